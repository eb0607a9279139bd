"""Airlock and ProxmoxMCP-Plus side by side: the same MCP client (the
Python `mcp` SDK) drives both servers over stdio, on equivalent code-mode
workloads, in fresh and reuse modes, interleaved A/B in one run.

Airlock's tool calls go to the simulated Proxmox VE cluster it starts
in-process when no backend is configured (`node_list`, HTTPS on loopback,
tasks instant); ProxmoxMCP-Plus answers a stub `echo` registered through
its own tool registry (pmp_launcher.py), which does no work at all. So
Airlock's side carries a real HTTPS round trip per call that the peer's
does not. (Until issue 13, Airlock answered from an in-memory fleet with
no round trip; the numbers of that time are in CHANGELOG.md.)

Run it with benches/peer/run.sh, which builds Airlock and the venv.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent

# name → (Airlock JavaScript, ProxmoxMCP-Plus Python)
WORKLOADS = {
    "1+1": ("1+1", "1 + 1"),
    "one_call": (
        "(await tools.node_list({})).length",
        'r = await call_tool("echo", {"n": 1})\nlen(r)',
    ),
    "ten_sequential": (
        "let s = 0; for (let i = 0; i < 10; i++) { s += (await tools.node_list({})).length } s",
        'n = 0\nfor i in range(10):\n    r = await call_tool("echo", {"n": i})\n    n = n + len(r)\nn',
    ),
}
CONCURRENT = 8


class Server:
    """One server under test: how to start it and how to run a script."""

    def __init__(self, name, mode, params, tool, arg):
        self.name, self.mode, self.params, self.tool, self.arg = name, mode, params, tool, arg

    async def execute(self, session, script):
        t0 = time.perf_counter()
        r = await session.call_tool(self.tool, {self.arg: script})
        took = time.perf_counter() - t0
        text = "".join(getattr(c, "text", "") for c in r.content)
        if r.isError or '"success": false' in text or '"success":false' in text:
            raise RuntimeError(f"{self.name} ({self.mode}) failed: {text[:300]}")
        return took


def airlock(binary, mode, scratch):
    config = Path(scratch) / "airlock.toml"
    config.write_text("[rate]\ncalls_per_minute = 0\n")
    env = dict(os.environ, AIRLOCK_STATE_DIR=str(Path(scratch) / "state"), AIRLOCK_LOG="error")
    params = StdioServerParameters(
        command=str(binary), args=["serve", "--config", str(config), "--mode", mode], env=env
    )
    return Server("airlock", mode, params, "execute", "script")


def pmp_server(python, mode, scratch, args, settings, env=None):
    """ProxmoxMCP-Plus in code mode on stdio, fresh or pooled workers:
    `settings` (its `proxmox`, `auth`, ...) on top of what every run here
    shares, `env` on top of this process's environment."""
    config = Path(scratch) / f"pmp-{mode}.json"
    config.write_text(json.dumps({
        **settings,
        "logging": {"level": "ERROR"},
        "jobs": {"sqlite_path": str(Path(scratch) / f"pmp-jobs-{mode}.sqlite3")},
        "mcp": {"transport": "STDIO", "code_mode": True, "code_mode_pool_reuse": mode == "reuse"},
    }))
    env = dict(
        os.environ,
        **(env or {}),
        PROXMOX_MCP_CONFIG=str(config),
        MCP_CODE_MODE_POOL_REUSE="1" if mode == "reuse" else "0",
        NO_PROXY="127.0.0.1",
    )
    params = StdioServerParameters(command=str(python), args=args, env=env)
    return Server("proxmox-mcp-plus", mode, params, "proxmox_code_execute", "code")


def pmp(python, mode, scratch):
    """With the stub `echo` tool (pmp_launcher.py) and no cluster."""
    return pmp_server(python, mode, scratch, [str(HERE / "pmp_launcher.py")], {
        # Nothing listens there: the stub tool never contacts Proxmox.
        "proxmox": {"host": "127.0.0.1", "port": 9, "verify_ssl": False},
        "auth": {"user": "root@pam", "token_name": "bench", "token_value": "unused"},
        "security": {"dev_mode": True},
    })


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p * len(xs) + 0.5)) - 1))]


async def run_pair(a, b, rounds, warmup):
    """Both servers up at once; every round runs each workload on A and B,
    alternating which goes first."""
    samples = {(s.name, w): [] for s in (a, b) for w in list(WORKLOADS) + [f"{CONCURRENT}_concurrent"]}
    async with stdio_client(a.params) as (ar, aw), stdio_client(b.params) as (br, bw):
        async with ClientSession(ar, aw) as sa, ClientSession(br, bw) as sb:
            await sa.initialize()
            await sb.initialize()
            pairs = [(a, sa, 0), (b, sb, 1)]
            for r in range(warmup + rounds):
                order = pairs if r % 2 == 0 else pairs[::-1]
                for w, scripts in WORKLOADS.items():
                    for server, session, i in order:
                        took = await server.execute(session, scripts[i])
                        if r >= warmup:
                            samples[(server.name, w)].append(took)
                for server, session, i in order:
                    script = WORKLOADS["one_call"][i]
                    t0 = time.perf_counter()
                    await asyncio.gather(*(server.execute(session, script) for _ in range(CONCURRENT)))
                    if r >= warmup:
                        samples[(server.name, f"{CONCURRENT}_concurrent")].append(time.perf_counter() - t0)
    return samples


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--airlock", required=True, help="path to the airlock binary")
    ap.add_argument("--python", default=sys.executable, help="python of the venv with proxmox-mcp-plus")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default=None, help="write the samples' summary here")
    ap.add_argument(
        "--skip-output-validation",
        action="store_true",
        help="skip the SDK's client-side check of structured results against a tool's outputSchema "
        "(it rebuilds a jsonschema validator on every call), for both servers alike",
    )
    args = ap.parse_args()
    if args.skip_output_validation:
        async def _skip(self, name, result):
            return None

        ClientSession._validate_tool_result = _skip

    report = []
    with tempfile.TemporaryDirectory() as scratch:
        for mode in ("fresh", "reuse"):
            a = airlock(args.airlock, mode, scratch)
            b = pmp(args.python, mode, scratch)
            print(f"{mode}: {args.rounds} rounds, interleaved …", file=sys.stderr)
            samples = await run_pair(a, b, args.rounds, args.warmup)
            for w in list(WORKLOADS) + [f"{CONCURRENT}_concurrent"]:
                xa, xb = samples[(a.name, w)], samples[(b.name, w)]
                row = {
                    "mode": mode,
                    "workload": w,
                    "airlock_p50_ms": statistics.median(xa) * 1e3,
                    "airlock_p99_ms": pct(xa, 0.99) * 1e3,
                    "pmp_p50_ms": statistics.median(xb) * 1e3,
                    "pmp_p99_ms": pct(xb, 0.99) * 1e3,
                }
                row["ratio_p50"] = row["pmp_p50_ms"] / row["airlock_p50_ms"]
                report.append(row)

    print(f"{'mode':6} {'workload':15} {'airlock p50':>12} {'pmp p50':>10} {'airlock p99':>12} {'pmp p99':>10} {'pmp/airlock':>12}")
    for r in report:
        print(
            f"{r['mode']:6} {r['workload']:15} {r['airlock_p50_ms']:10.2f}ms {r['pmp_p50_ms']:8.2f}ms "
            f"{r['airlock_p99_ms']:10.2f}ms {r['pmp_p99_ms']:8.2f}ms {r['ratio_p50']:11.1f}×"
        )
    print(f"(times per execute over stdio, client side; {CONCURRENT}_concurrent is the wall time of "
          f"{CONCURRENT} executes started together)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "rounds": args.rounds,
            "skip_output_validation": args.skip_output_validation,
            "rows": report,
        }, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
