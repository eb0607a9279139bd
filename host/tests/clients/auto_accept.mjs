// An MCP client that says yes to everything, written with the official
// TypeScript SDK: every elicitation is accepted with every yes-or-no field
// set to true. It starts the server given on the command line over stdio,
// runs one `execute`, and prints what came back as one JSON line:
//
//   {"result": <structuredContent>, "is_error": bool, "asked": [<message>, ...]}
//
// host/tests/approvals.rs copies it next to the SDK it installed
// (target/mcp-clients) and runs it there.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [script, mode, command, ...args] = process.argv.slice(2);
const asked = [];
const client = new Client(
  { name: "auto-accept", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  const properties = request.params.requestedSchema?.properties ?? {};
  const content = {};
  for (const [name, p] of Object.entries(properties)) {
    if (p.type === "boolean") content[name] = true;
  }
  if (!("approve" in content)) content.approve = true;
  return { action: "accept", content };
});
await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));
const toolArgs = { script };
if (mode) toolArgs.mode = mode;
const result = await client.callTool({ name: "execute", arguments: toolArgs });
console.log(JSON.stringify({ result: result.structuredContent, is_error: !!result.isError, asked }));
await client.close();
