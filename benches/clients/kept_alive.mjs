// One kept-alive connection to `airlock serve --http`, timed the way two
// Node clients use it: `fetch` (undici, the transport of Node's MCP
// clients and of Claude Code) with raw JSON-RPC, and the official
// TypeScript SDK's client (1.x, StreamableHTTPClientTransport). Each
// does RUNS MCP pings and RUNS `execute` of `1+1`, alternately, after a
// warm-up, and prints one JSON line of milliseconds per request:
//
//   node kept_alive.mjs URL RUNS fetch|sdk
//   {"ping": [ms, ...], "execute": [ms, ...]}
//
// `airlock bench` copies it next to the SDK that mcp-clients/install.sh
// installs (target/mcp-clients) and runs it there.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, runsArg, way] = process.argv.slice(2);
const runs = Number(runsArg);
const VERSION = "2025-11-25";

async function rawSession() {
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
  };
  let id = 0;
  const send = async (method, params, notify = false) => {
    const body = { jsonrpc: "2.0", method, ...(params ? { params } : {}) };
    if (!notify) body.id = ++id;
    const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method}: HTTP ${r.status}: ${text}`);
    return r;
  };
  const init = await send("initialize", {
    protocolVersion: VERSION,
    capabilities: {},
    clientInfo: { name: "airlock-bench-fetch", version: "1" },
  });
  headers["mcp-session-id"] = init.headers.get("mcp-session-id");
  headers["mcp-protocol-version"] = VERSION;
  await send("notifications/initialized", undefined, true);
  return {
    ping: () => send("ping"),
    execute: () => send("tools/call", { name: "execute", arguments: { script: "1+1" } }),
    close: async () => {},
  };
}

async function sdkSession() {
  const client = new Client({ name: "airlock-bench-sdk", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return {
    ping: () => client.ping(),
    execute: async () => {
      const r = await client.callTool({ name: "execute", arguments: { script: "1+1" } });
      if (r.isError) throw new Error(JSON.stringify(r.structuredContent));
    },
    close: () => client.close(),
  };
}

const session = way === "sdk" ? await sdkSession() : await rawSession();
const out = { ping: [], execute: [] };
const timed = async (f) => {
  const t = process.hrtime.bigint();
  await f();
  return Number(process.hrtime.bigint() - t) / 1e6;
};
for (let i = 0; i < 20; i++) {
  await session.ping();
  await session.execute();
}
for (let i = 0; i < runs; i++) {
  out.ping.push(await timed(session.ping));
  out.execute.push(await timed(session.execute));
}
await session.close();
console.log(JSON.stringify(out));
