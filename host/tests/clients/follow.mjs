// An agent's client that follows a waiting execution, written with the
// official TypeScript SDK: one `execute` of the script; while the answer
// says the execution waits, each request it names is approved by another
// person (the approve command given, with the request id and
// `--by APPROVER` appended), then the execution is followed with
// `execute({"execution": ID})`. Prints every answer as one JSON line:
//
//   {"answers": [<structuredContent>, ...], "is_error": bool}
//
// host/tests/durable.rs copies it next to the SDK it installed.
import { execFileSync } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [script, approver, approveJson, command, ...args] = process.argv.slice(2);
const approve = JSON.parse(approveJson);
const client = new Client({ name: "follow", version: "1.0.0" }, { capabilities: {} });
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));
const answers = [];
let result = await client.callTool({ name: "execute", arguments: { script } });
answers.push(result.structuredContent);
for (let i = 0; i < 10 && result.structuredContent?.status === "waiting"; i++) {
  for (const waiting of result.structuredContent.waiting) {
    execFileSync(approve[0], [...approve.slice(1), waiting.request_id, "--by", approver]);
  }
  result = await client.callTool({ name: "execute", arguments: result.structuredContent.follow });
  answers.push(result.structuredContent);
}
console.log(JSON.stringify({ answers, is_error: !!result.isError }));
await client.close();
