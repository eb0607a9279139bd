// The official TypeScript SDK 2.x client (`@modelcontextprotocol/client`)
// answering every approval question the same way: `decline` (a no) or
// `cancel` (dismissed without a choice, as a headless client answers).
// On `2025` it connects the legacy way (initialize; the question arrives
// as an elicitation during the call); on `2026` it is pinned to
// 2026-07-28 and answers the InputRequiredResult through the same
// handler (the SDK's autoFulfill).
//
//   node answer.mjs ACTION PROTOCOL SCRIPT SERVER_COMMAND [ARGS...]
//
// It runs `execute` of SCRIPT. When the answer waits for an approval
// request and APPROVE_WITH is set (a JSON list: the command that
// approves as an operator, the request id appended), it runs that
// command and follows the execution in the same session. Prints one
// JSON line: {"protocol", "first", "followed", "asked"}.
//
// host/tests/approvals.rs copies it next to the SDK it installed
// (target/mcp-clients) and runs it there.
import { execFileSync } from "node:child_process";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [action, protocol, script, command, ...args] = process.argv.slice(2);
const asked = [];
const client = new Client(
  { name: "airlock-answer-test", version: "1.0.0" },
  {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: protocol === "2025" ? "legacy" : { pin: "2026-07-28" } },
  },
);
client.setRequestHandler("elicitation/create", async (request) => {
  asked.push(request.params.message);
  return { action };
});
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));
const shown = (r) => ({ result: r.structuredContent, is_error: Boolean(r.isError) });
const call = (a) => client.callTool({ name: "execute", arguments: a });
const out = { protocol: client.getNegotiatedProtocolVersion?.() ?? null, asked };
const first = await call({ script });
out.first = shown(first);
const s = first.structuredContent ?? {};
if (s.status === "waiting" && process.env.APPROVE_WITH) {
  const [bin, ...rest] = JSON.parse(process.env.APPROVE_WITH);
  execFileSync(bin, [...rest, s.waiting[0].request_id], { stdio: "ignore" });
  out.asked_before_follow = asked.length;
  out.followed = shown(await call({ execution: s.execution }));
}
console.log(JSON.stringify(out));
await client.close();
