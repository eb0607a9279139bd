// An MCP client over streamable HTTP written with the official TypeScript
// SDK: it opens a session with the bearer key given, runs one `execute`,
// and prints what came back as one JSON line:
//
//   {"result": <structuredContent>, "is_error": bool}
//
// It prints `called` on its own line once the request is sent, so that a
// test can stop the server (SIGTERM) while the execution runs.
// host/tests/faults.rs copies it next to the SDK it installed
// (target/mcp-clients) and runs it there.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key, script] = process.argv.slice(2);
const client = new Client({ name: "drain", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
await client.connect(transport);
const call = client.callTool({ name: "execute", arguments: { script } });
console.log("called");
const result = await call;
console.log(JSON.stringify({ result: result.structuredContent, is_error: !!result.isError }));
await client.close();
