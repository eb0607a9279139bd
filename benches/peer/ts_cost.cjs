// What an output schema on `execute` would cost a client built on the
// official TypeScript MCP SDK: `1+1` through the SDK's Client over stdio
// against `airlock serve --demo`, without an output schema (as Airlock
// serves it) and with the one `execute` declared before issue 15, given
// to the client the way its own `listTools()` does (cacheToolMetadata),
// alternately in one session; an MCP ping beside each for scale.
//
//   node benches/peer/ts_cost.cjs target/release/airlock [RUNS]
//
// The SDK comes from target/mcp-clients (mcp-clients/install.sh), or the
// directory in AIRLOCK_MCP_CLIENTS.
const path = require("node:path");
const os = require("node:os");
const fs = require("node:fs");

const root = path.resolve(__dirname, "../..");
const clients = process.env.AIRLOCK_MCP_CLIENTS || path.join(root, "target/mcp-clients");
const sdk = path.join(clients, "node_modules/@modelcontextprotocol/sdk/dist/cjs");
const { Client } = require(path.join(sdk, "client/index.js"));
const { StdioClientTransport } = require(path.join(sdk, "client/stdio.js"));

// `execute`'s output schema before issue 15, with `calls` as the object
// it now is.
const EXECUTE_OUTPUT_SCHEMA = {
  type: "object",
  properties: { error: { type: "object" }, logs: { type: "array" }, calls: { type: "object" } },
};

function p50(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function timeEach(runs, f) {
  const xs = [];
  for (let i = 0; i < runs; i++) {
    const t = process.hrtime.bigint();
    await f();
    xs.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  return p50(xs);
}

async function main() {
  const binary = process.argv[2];
  const runs = Number(process.argv[3] || 400);
  const state = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-ts-cost-"));
  const transport = new StdioClientTransport({
    command: binary,
    args: ["serve", "--demo"],
    env: { PATH: process.env.PATH, AIRLOCK_STATE_DIR: state, AIRLOCK_LOG: "warn" },
  });
  const client = new Client({ name: "ts-cost", version: "1" });
  try {
    await client.connect(transport);
    const { tools } = await client.listTools();
    const execute = tools.find((t) => t.name === "execute");
    if (execute.outputSchema) throw new Error("execute declares an output schema already");
    const withSchema = tools.map((t) => (t.name === "execute" ? { ...t, outputSchema: EXECUTE_OUTPUT_SCHEMA } : t));
    const call = async () => {
      const r = await client.callTool({ name: "execute", arguments: { script: "1+1" } });
      if (r.isError || r.structuredContent.result !== 2) throw new Error(`unexpected: ${JSON.stringify(r)}`);
    };
    for (let round = 1; round <= 2; round++) {
      for (const [label, list] of [["no output schema", tools], ["output schema", withSchema]]) {
        client.cacheToolMetadata(list);
        await timeEach(50, call); // warm-up
        const exec = await timeEach(runs, call);
        const ping = await timeEach(runs, () => client.ping());
        console.log(JSON.stringify({ round, label, "1+1 p50 ms": +exec.toFixed(3), "ping p50 ms": +ping.toFixed(3) }));
      }
    }
  } finally {
    await client.close();
    fs.rmSync(state, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
