import { readFile } from "fs/promises";
await readFile("/etc/hosts", "utf8")
