"""Airlock and ProxmoxMCP-Plus against the same simulated Proxmox VE
cluster: one `airlock sim` (HTTPS on loopback), both servers configured to
use it with a token of their own, one Python MCP client (the official SDK)
driving both over stdio, interleaved, in fresh and reuse modes.

ProxmoxMCP-Plus runs unmodified (`python -m proxmox_mcp.server`, code mode)
with its real tools; it verifies TLS, so the simulator's certificate is
given to it through REQUESTS_CA_BUNDLE. Every answer's value is checked
against the expected one, on both sides (ProxmoxMCP-Plus reports a failed
script with `isError: false` and `success: false`).

Workloads (the same value from both servers):
- `1+1`;
- list nodes: the node names;
- fleet report: offline nodes, running and stopped guests, memory of the
  running ones, the three biggest. ProxmoxMCP-Plus's tools answer in
  formatted text, so its script parses that text; its `get_nodes` answer
  is cached for 5 s, so the fleet report is timed cold (more than 5 s after
  the last `get_nodes`) and warm (right after another fleet report).
  Neither server's tools say which guests are templates in the same way
  (ProxmoxMCP-Plus's do not at all), so both count a template as a guest.

Before each timed call, the client waits until every process it started
(both servers, their workers, the simulator) is quiet: less than 5% of a
core over 2 ms, read from /proc (Linux). Without that, work a server does
after answering (ProxmoxMCP-Plus tears down its worker process in fresh
mode) lands on the other server's next call on a 2-core machine: measured
that way, Airlock's `1+1` took 1.18 ms at p50 with ProxmoxMCP-Plus
interleaved and 0.59 ms alone.

Also the bytes an agent's context pays: each workload's result, `tools/list`,
and a whole search → schema → execute exchange for the fleet report.

Run it with benches/peer/run.sh, which builds Airlock and the venv.
"""

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import compare
from compare import pct

PMP_CACHE_S = 5.0

AIRLOCK_FLEET = """
const nodes = await tools.node_list({});
const online = nodes.filter((n) => n.status === "online");
const lists = await Promise.all(
  online.flatMap((n) => [tools.vm_list({ node: n.node }), tools.ct_list({ node: n.node })]),
);
const guests = online.flatMap((n, i) => [
  ...lists[2 * i].map((g) => ({ ...g, node: n.node })),
  ...lists[2 * i + 1].map((g) => ({ ...g, node: n.node })),
]);
const running = guests.filter((g) => g.status === "running");
({
  nodes_offline: nodes.filter((n) => n.status !== "online").map((n) => n.node),
  running: running.length,
  stopped: guests.length - running.length,
  memory_gib_running: +(running.reduce((sum, g) => sum + g.maxmem, 0) / 2 ** 30).toFixed(1),
  biggest: running.sort((a, b) => b.maxmem - a.maxmem).slice(0, 3).map((g) => `${g.node}/${g.vmid} ${g.name}`),
})
"""

# ProxmoxMCP-Plus's code mode runs a Python subset (Monty) with no imports;
# its tools answer [{"type": "text", "text": ...}] in a fixed layout.
PMP_FLEET = '''
UNITS = {"B": 1, "KB": 2**10, "KiB": 2**10, "MB": 2**20, "MiB": 2**20, "GB": 2**30, "GiB": 2**30, "TB": 2**40, "TiB": 2**40}

def guests(text):
    out = []
    cur = None
    for line in text.split("\\n"):
        s = line.strip()
        if "(ID: " in s:
            if s.startswith("["):
                s = s.split("] ", 1)[1]
            head = s.split(" (ID: ")
            cur = {"name": head[0], "vmid": head[1].rstrip(")")}
            out.append(cur)
        elif cur is not None and s.startswith("- Status: "):
            cur["status"] = s[10:].lower()
        elif cur is not None and s.startswith("- Node: "):
            cur["node"] = s[8:]
        elif cur is not None and s.startswith("- Memory: "):
            total = s.split(" / ")[1].split(" (")[0].split(" ")
            cur["maxmem"] = float(total[0]) * UNITS[total[1]]
    return out

nodes = []
for line in (await call_tool("get_nodes", {}))[0]["text"].split("\\n"):
    if line.startswith("[node] ") and "Proxmox Nodes" not in line:
        nodes.append({"node": line[7:]})
    elif line.strip().startswith("- Status: "):
        nodes[-1]["status"] = line.strip()[10:].lower()
all_guests = guests((await call_tool("get_vms", {}))[0]["text"]) + guests((await call_tool("get_containers", {}))[0]["text"])
online = [n["node"] for n in nodes if n["status"] == "online"]
mine = [g for g in all_guests if g["node"] in online]
running = [g for g in mine if g["status"] == "running"]
biggest = sorted(running, key=lambda g: -g["maxmem"])[:3]
{
    "nodes_offline": [n["node"] for n in nodes if n["status"] != "online"],
    "running": len(running),
    "stopped": len(mine) - len(running),
    "memory_gib_running": round(sum([g["maxmem"] for g in running]) / 2**30, 1),
    "biggest": [g["node"] + "/" + g["vmid"] + " " + g["name"] for g in biggest],
}
'''

PMP_NODES = '''
names = []
for line in (await call_tool("get_nodes", {}))[0]["text"].split("\\n"):
    if line.startswith("[node] ") and "Proxmox Nodes" not in line:
        names.append(line[7:])
names
'''

# name → (Airlock JavaScript, ProxmoxMCP-Plus Python)
WORKLOADS = {
    "1+1": ("1+1", "1 + 1"),
    "list nodes": ("(await tools.node_list({})).map((n) => n.node)", PMP_NODES),
    "fleet report": (AIRLOCK_FLEET, PMP_FLEET),
}

# What an agent sends to find and learn the tools the fleet report needs,
# on each server: searches, then one schema request for the tools found.
EXCHANGE = {
    "airlock": {
        "search": ("search", "query", ["list nodes", "list vms on a node", "list containers on a node"]),
        "schema": ("get_schema", {"names": ["node_list", "vm_list", "ct_list"]}),
        "execute": ("execute", "script", AIRLOCK_FLEET),
    },
    "pmp": {
        "search": ("proxmox_code_search", "query", ["nodes", "vms", "containers"]),
        "schema": ("proxmox_code_get_schema", {"names": ["get_nodes", "get_vms", "get_containers"]}),
        "execute": ("proxmox_code_execute", "code", PMP_FLEET),
    },
}


def _tree_cpu_ns(pid):
    """CPU time used by `pid`'s threads and its descendants', in ns."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    for tid in tasks:
        try:
            if tid != str(pid) or pid != os.getpid():
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                total += sum(_tree_cpu_ns(int(c)) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


async def settle(limit_s=2.0):
    """Waits until the processes this client started are quiet: under
    0.1 ms of CPU in 2 ms. Gives up after `limit_s` (returns False)."""
    me = os.getpid()
    deadline = time.monotonic() + limit_s
    before = _tree_cpu_ns(me)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.002)
        now = _tree_cpu_ns(me)
        if now - before < 100_000:
            return True
        before = now
    return False


def start_sim(airlock, scratch):
    """`airlock sim` on a free port; its first stdout line names the URL."""
    sim_dir = Path(scratch) / "sim"
    proc = subprocess.Popen(
        [airlock, "sim", "--port", "0", "--dir", str(sim_dir), "--task-delay-ms", "50"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    first = proc.stdout.readline()
    if not first.startswith("simulated Proxmox VE cluster: https://127.0.0.1:"):
        proc.kill()
        raise RuntimeError(f"airlock sim did not start: {first!r}")
    port = int(first.rsplit(":", 1)[1])
    ca = Path(scratch) / "sim-ca.pem"
    ca.write_text(ssl.get_server_certificate(("127.0.0.1", port)))
    return proc, sim_dir, port, ca


class Server(compare.Server):
    """compare.py's server under test, whose execute also hands back the
    value, to be checked."""

    async def execute(self, session, script):
        """Time one execute and return (seconds, value, result)."""
        t0 = time.perf_counter()
        r = await session.call_tool(self.tool, {self.arg: script})
        took = time.perf_counter() - t0
        if self.name == "airlock":
            if r.isError:
                raise RuntimeError(f"airlock ({self.mode}) failed: {r.content}")
            value = r.structuredContent["result"]
        else:
            body = r.structuredContent or {}
            if r.isError or not body.get("success"):
                raise RuntimeError(f"proxmox-mcp-plus ({self.mode}) failed: {r.content}")
            value = body["data"]["result"]
        return took, value, r


def airlock_server(binary, mode, scratch, sim_dir):
    config = Path(scratch) / f"airlock-{mode}.toml"
    config.write_text((sim_dir / "airlock.toml").read_text() + "\n[rate]\ncalls_per_minute = 0\n")
    env = dict(os.environ, AIRLOCK_STATE_DIR=str(Path(scratch) / f"airlock-state-{mode}"), AIRLOCK_LOG="error")
    params = StdioServerParameters(
        command=str(binary), args=["serve", "--config", str(config), "--mode", mode, "--identity", "rita"], env=env
    )
    return Server("airlock", mode, params, "execute", "script")


def pmp_server(python, mode, scratch, sim_dir, port, ca):
    token = (sim_dir / "tokens" / "rita.token").read_text().strip()
    user, rest = token.split("!", 1)
    token_name, secret = rest.split("=", 1)
    server = compare.pmp_server(python, mode, scratch, ["-m", "proxmox_mcp.server"], {
        "proxmox": {"host": "127.0.0.1", "port": port, "verify_ssl": True},
        "auth": {"user": user, "token_name": token_name, "token_value": secret},
    }, env={"REQUESTS_CA_BUNDLE": str(ca), "MCP_CODE_MODE": "1"})
    return Server(server.name, server.mode, server.params, server.tool, server.arg)


def size(model):
    return len(model.model_dump_json(by_alias=True, exclude_none=True).encode())


def request_size(method, params):
    return len(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                          separators=(",", ":")).encode())


async def exchange_bytes(session, plan):
    """Bytes of every request and answer of a search → schema → execute
    exchange, as JSON-RPC messages (requests compact, answers as the SDK
    serialises them)."""
    total = 0
    tool, arg, queries = plan["search"]
    for q in queries:
        total += request_size("tools/call", {"name": tool, "arguments": {arg: q}})
        total += size(await session.call_tool(tool, {arg: q}))
    tool, args = plan["schema"]
    total += request_size("tools/call", {"name": tool, "arguments": args})
    total += size(await session.call_tool(tool, args))
    tool, arg, script = plan["execute"]
    total += request_size("tools/call", {"name": tool, "arguments": {arg: script}})
    total += size(await session.call_tool(tool, {arg: script}))
    return total


async def run_mode(a, b, rounds, cold_rounds, expected):
    names = list(WORKLOADS) + ["fleet report (cold)"]
    samples = {(s.name, w): [] for s in (a, b) for w in names}
    sizes = {}
    unsettled = [0]
    async with stdio_client(a.params) as (ar, aw), stdio_client(b.params) as (br, bw):
        async with ClientSession(ar, aw) as sa, ClientSession(br, bw) as sb:
            await sa.initialize()
            await sb.initialize()
            pairs = [(a, sa, 0), (b, sb, 1)]

            async def run(server, session, i, workload, key):
                if key is not None and not await settle():
                    unsettled[0] += 1
                took, value, r = await server.execute(session, WORKLOADS[workload][i])
                want = expected.get(workload)
                if want is None:
                    expected[workload] = value
                elif value != want:
                    raise RuntimeError(f"{server.name} ({server.mode}) answered {workload} with {value!r}, "
                                       f"expected {want!r}")
                sizes[(server.name, workload)] = size(r)
                if key is not None:
                    samples[(server.name, key)].append(took)

            # Warm up both (and fix the expected values from the first answers).
            for server, session, i in pairs:
                for w in WORKLOADS:
                    await run(server, session, i, w, None)
            last_nodes = time.monotonic()
            for r in range(rounds):
                order = pairs if r % 2 == 0 else pairs[::-1]
                if r < cold_rounds:
                    # Let ProxmoxMCP-Plus's cached node list expire.
                    await asyncio.sleep(max(0.0, last_nodes + PMP_CACHE_S + 0.2 - time.monotonic()))
                    for server, session, i in order:
                        await run(server, session, i, "fleet report", "fleet report (cold)")
                for w in WORKLOADS:
                    for server, session, i in order:
                        await run(server, session, i, w, w)
                last_nodes = time.monotonic()
            ctx = {}
            for server, session, _ in pairs:
                key = "airlock" if server.name == "airlock" else "pmp"
                listed = await session.list_tools()
                ctx[server.name] = {
                    "tools/list": size(listed),
                    "exchange": await exchange_bytes(session, EXCHANGE[key]),
                }
    if unsettled[0]:
        print(f"note: {unsettled[0]} calls were timed without the processes going quiet first", file=sys.stderr)
    return samples, sizes, ctx


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--airlock", required=True, help="path to the airlock binary")
    ap.add_argument("--python", default=sys.executable, help="python of the venv with proxmox-mcp-plus")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--cold-rounds", type=int, default=10,
                    help="rounds that first time a cold fleet report (each waits 5 s)")
    ap.add_argument("--json", default=None, help="write the summary here")
    args = ap.parse_args()

    report = {"rounds": args.rounds, "cold_rounds": args.cold_rounds, "rows": [], "bytes": {}}
    expected = {}
    with tempfile.TemporaryDirectory(prefix="airlock-peer-") as scratch:
        sim, sim_dir, port, ca = start_sim(args.airlock, scratch)
        try:
            for mode in ("fresh", "reuse"):
                a = airlock_server(args.airlock, mode, scratch, sim_dir)
                b = pmp_server(args.python, mode, scratch, sim_dir, port, ca)
                print(f"{mode}: {args.rounds} rounds, interleaved …", file=sys.stderr)
                samples, sizes, ctx = await run_mode(a, b, args.rounds, args.cold_rounds, expected)
                for w in list(WORKLOADS) + ["fleet report (cold)"]:
                    xa, xb = samples[(a.name, w)], samples[(b.name, w)]
                    row = {
                        "mode": mode, "workload": w, "n": len(xa),
                        "airlock_p50_ms": statistics.median(xa) * 1e3,
                        "airlock_p99_ms": pct(xa, 0.99) * 1e3,
                        "pmp_p50_ms": statistics.median(xb) * 1e3,
                        "pmp_p99_ms": pct(xb, 0.99) * 1e3,
                    }
                    row["ratio_p50"] = row["pmp_p50_ms"] / row["airlock_p50_ms"]
                    report["rows"].append(row)
                report["bytes"] = {
                    "result": {f"{s} / {w}": n for (s, w), n in sizes.items()},
                    **{f"{s} {k}": v for s, c in ctx.items() for k, v in c.items()},
                }
        finally:
            sim.terminate()
            sim.wait()
    report["values"] = expected

    print(f"{'mode':6} {'workload':20} {'n':>4} {'airlock p50':>12} {'pmp p50':>10} "
          f"{'airlock p99':>12} {'pmp p99':>10} {'pmp/airlock':>12}")
    for r in report["rows"]:
        print(f"{r['mode']:6} {r['workload']:20} {r['n']:4} {r['airlock_p50_ms']:10.2f}ms {r['pmp_p50_ms']:8.2f}ms "
              f"{r['airlock_p99_ms']:10.2f}ms {r['pmp_p99_ms']:8.2f}ms {r['ratio_p50']:11.1f}×")
    print("bytes (each result as the SDK serialises it; tools/list; the whole fleet-report exchange):")
    print(json.dumps(report["bytes"], indent=2))
    print("values:", json.dumps(report["values"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
