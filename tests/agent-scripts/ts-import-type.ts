import type { VmListResult } from "./airlock-types";
const guests: VmListResult = await tools.vm_list({ node: "pve1" });
guests.length
