// A person's runbook, through the official TypeScript SDK's client: it
// lists the server's prompts, gets `runbook_<name>` with the arguments
// given as JSON, takes the script the prompt's message asks the agent to
// run and runs it with `execute`. Prints one JSON line:
//
//   {"prompts": [<name>, ...], "message": <text>, "result": <structuredContent>, "is_error": bool}
//
// Usage: node runbook_prompt.mjs NAME ARGS_JSON COMMAND [ARG...]
// Used by host/tests/runbooks.rs.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [name, given, command, ...args] = process.argv.slice(2);
const client = new Client({ name: "runbook-prompt", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, env: process.env }));
const prompts = await client.listPrompts();
const got = await client.getPrompt({ name: `runbook_${name}`, arguments: JSON.parse(given) });
const message = got.messages[0].content.text;
const script = message.match(/const result = await runbooks\.\w+\(.*\);\nresult/)[0];
const result = await client.callTool({ name: "execute", arguments: { script } });
console.log(
  JSON.stringify({
    prompts: prompts.prompts.map((p) => p.name),
    message,
    result: result.structuredContent,
    is_error: Boolean(result.isError),
  }),
);
await client.close();
