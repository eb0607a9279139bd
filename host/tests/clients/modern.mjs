// The official TypeScript SDK 2.x client (`@modelcontextprotocol/client`),
// pinned to the 2026-07-28 revision, over streamable HTTP with a bearer
// key; with the official tasks extension client
// (`@modelcontextprotocol/ext-tasks`) where a way below says so.
//
//   node modern.mjs URL KEY SCRIPT WAY [OTHER_URL]
//
// WAY is one of:
//
// - `flow`: search, get_schema, then `execute`, the SDK answering each
//   input-required result by asking its elicitation handler (which
//   approves) and retrying with the answers and the state: the whole
//   flow through URL (nginx round-robin in the test);
// - `other`: `execute` through URL, its input-required result answered
//   by hand through OTHER_URL (another replica): first with the state
//   altered, then with the state as it came, then once more (replayed);
// - `foreign`: `execute` through URL; prints the state it got, for the
//   test to send as another identity (`answer`);
// - `answer`: sends the state in SCRIPT's place (a JSON object with the
//   script and state) with a yes, and prints what came back;
// - `task`: `execute` through the tasks extension client, its questions
//   approved, settled;
// - `task-cancel`: `execute` as a task, one snapshot, cancelled, and the
//   outcome settled.
//
// Prints one JSON line. Used by host/tests/replicas.rs.

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const [url, key, script, way, otherUrl] = process.argv.slice(2);
const VERSION = "2026-07-28";
const TASKS = "io.modelcontextprotocol/tasks";
const capabilities = {
  elicitation: { form: {} },
  ...(way.startsWith("task") ? { extensions: { [TASKS]: {} } } : {}),
};
const asked = [];

function client(on, autoFulfill = true) {
  const c = new Client(
    { name: "airlock-modern-test", version: "1.0.0" },
    {
      capabilities,
      versionNegotiation: { mode: { pin: VERSION } },
      inputRequired: { autoFulfill },
    },
  );
  c.setRequestHandler("elicitation/create", async (request) => {
    asked.push(request.params.message);
    return { action: "accept", content: { approve: true } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(on), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  return { c, transport };
}

async function connected(on, autoFulfill) {
  const { c, transport } = client(on, autoFulfill);
  await c.connect(transport);
  return c;
}

function shown(result) {
  if (result?.resultType === "input_required") {
    return { input_required: Object.keys(result.inputRequests ?? {}) };
  }
  return { result: result.structuredContent, is_error: Boolean(result.isError) };
}

// One JSON-RPC request of the tasks extension, as the HTTP transport
// would send it on this revision; the answer as the extension wants it.
let nextId = 1;
async function rawDispatch(request) {
  const body = { jsonrpc: "2.0", ...request, id: request.id ?? `raw-${nextId++}` };
  const name = body.params?.taskId ?? body.params?.name;
  const response = await fetch(url, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      Authorization: `Bearer ${key}`,
      "MCP-Protocol-Version": VERSION,
      "Mcp-Method": body.method,
      ...(name === undefined ? {} : { "Mcp-Name": name }),
    },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let message;
  if ((response.headers.get("content-type") ?? "").includes("text/event-stream")) {
    for (const line of text.split("\n")) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (!data) continue;
      const m = JSON.parse(data);
      if (m.id === body.id) message = m;
    }
  } else if (text) {
    message = JSON.parse(text);
  }
  if (message === undefined) {
    throw new Error(`no answer to ${body.method} (HTTP ${response.status}): ${text.slice(0, 300)}`);
  }
  return message.error ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
}

async function taskSession() {
  const c = await connected(url, true);
  const session = createTaskSessionFromClient(c, {
    endpointId: "airlock-test",
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: VERSION,
      clientInfo: { name: "airlock-modern-test", version: "1.0.0" },
      clientCapabilities: capabilities,
    },
    onInputRequest: async (request) => {
      asked.push(request.params.message);
      return { action: "accept", content: { approve: true } };
    },
  });
  return { c, session };
}

const out = { asked };
if (way === "flow") {
  const c = await connected(url, true);
  out.protocol = c.getProtocolVersion?.() ?? VERSION;
  const found = await c.callTool({ name: "search", arguments: { query: "shutdown vm" } });
  out.searched = (found.content?.[0]?.text ?? "").includes("vm_shutdown");
  const schema = await c.callTool({ name: "get_schema", arguments: { names: ["vm_shutdown"] } });
  out.schema = (schema.content?.[0]?.text ?? "").includes("vmid");
  out.final = shown(await c.callTool({ name: "execute", arguments: { script } }));
  await c.close();
} else if (way === "other" || way === "foreign") {
  const a = await connected(url, false);
  const first = await a.callTool({ name: "execute", arguments: { script } }, { allowInputRequired: true });
  out.first = shown(first);
  const keys = Object.keys(first.inputRequests ?? {});
  const yes = Object.fromEntries(keys.map((k) => [k, { action: "accept", content: { approve: true } }]));
  if (way === "foreign") {
    out.state = first.requestState;
    out.answers = yes;
  } else {
    const b = await connected(otherUrl, false);
    const retry = async (state) =>
      shown(
        await b.callTool(
          { name: "execute", arguments: { script }, inputResponses: yes, requestState: state },
          { allowInputRequired: true },
        ),
      );
    const state = first.requestState;
    const flip = state.endsWith("A") ? "B" : "A";
    out.tampered = await retry(state.slice(0, -1) + flip);
    out.answered = await retry(state);
    out.replayed = await retry(state);
    await b.close();
  }
  await a.close();
} else if (way === "answer") {
  const given = JSON.parse(script);
  const a = await connected(url, false);
  out.answered = shown(
    await a.callTool(
      {
        name: "execute",
        arguments: { script: given.script },
        inputResponses: given.answers,
        requestState: given.state,
      },
      { allowInputRequired: true },
    ),
  );
  await a.close();
} else if (way === "task" || way === "task-cancel") {
  const { c, session } = await taskSession();
  const execution = await session.callTool("execute", { script }, { task: { preference: "prefer" } });
  out.kind = execution.kind;
  out.statuses = [];
  if (way === "task-cancel") {
    await execution.cancel();
  }
  const { outcome } = await execution.settle({
    onEvent: (event) => {
      if (event.type === "task") out.statuses.push(event.task.status);
    },
  });
  out.outcome = outcome.status;
  if (outcome.status === "completed") {
    out.final = resultFromTaskOutcome(outcome).structuredContent;
  }
  await session.close?.();
  await c.close();
}
console.log(JSON.stringify(out));
process.exit(0);
