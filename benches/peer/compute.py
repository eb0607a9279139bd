"""Data work inside the sandbox, side by side: the scripts of
`benches/compute/` in Airlock and the same work in Python in
ProxmoxMCP-Plus's code mode (the Monty interpreter), one Python MCP
client, interleaved, every value checked against the one Airlock's bench
expects (`airlock_benches::COMPUTE`). Where `node` is on PATH, the same
scripts in Node (a new `vm` context per run, timed inside Node:
`node_compute.cjs`) stand beside them as the reference a user knows.

Monty runs a Python subset with no imports, so two workloads are the
nearest equivalent rather than the same: the JSON round trip is a deep
copy of the rows (no `json` module), and the regex filter is the same
filter written with string tests (no `re`). Python has no sort
comparator; the sort takes a key function, one call per element where
JavaScript makes one per comparison. Monty has no `bytearray`, so the two
typed-array workloads use a list of a million ints.

    python benches/peer/compute.py --airlock target/release/airlock \\
        --python target/peer-venv/bin/python [--rounds 5] [--only NAME,...]
"""

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession
from mcp.client.stdio import stdio_client

from compare import airlock, pmp

ROOT = Path(__file__).resolve().parents[2]

# name → (ProxmoxMCP-Plus Python, expected value)
PYTHON = {
    "calls_300k": (
        "f = lambda x: x + 1\ns = 0\nfor i in range(300000):\n    s = f(s)\ns",
        300000,
    ),
    "sort_20k_comparator": (
        "a = []\nx = 12345\nfor i in range(20000):\n    x = (x * 48271) % 2147483647\n    a.append(x)\n"
        "a.sort(key=lambda v: v)\na[0] + a[19999]",
        2147699569,
    ),
    "group_5k_by_key": (
        "rows = []\nfor i in range(5000):\n"
        "    rows.append({'id': i, 'node': 'pve' + str(i % 7), 'status': 'running' if i % 3 else 'stopped', 'mem': i * 1024})\n"
        "g = {}\nfor r in rows:\n    k = r['node']\n    if k not in g:\n        g[k] = []\n    g[k].append(r)\n"
        "[len(g[k]) for k in g]",
        [715, 715, 714, 714, 714, 714, 714],
    ),
    "json_1k_rows_round_trip": (
        "rows = []\nfor i in range(1000):\n"
        "    rows.append({'id': i, 'name': 'vm-' + str(i), 'node': 'pve' + str(i % 3), 'tags': ['a', 'b'], "
        "'mem': i * 1048576, 'running': i % 2 == 0})\n"
        "copy = [{k: (list(v) if k == 'tags' else v) for k, v in r.items()} for r in rows]\nlen(copy)",
        1000,
    ),
    "concat_50k_pieces": (
        "s = ''\nfor i in range(50000):\n    s += 'x' + str(i % 10)\nlen(s)",
        100000,
    ),
    "regex_10k_lines": (
        "lines = []\nfor i in range(10000):\n"
        "    level = 'ERROR' if i % 17 == 0 else 'INFO'\n"
        "    lines.append('2026-12-01T10:' + ('0' + str(i % 60))[-2:] + ':00Z pve' + str(i % 3) + ' ' + level "
        "+ ' task ' + str(i) + ' finished in ' + str(i % 100) + ' ms')\n"
        "len([l for l in lines if 'ERROR ' in l and ' finished in ' in l and l.endswith(' ms')])",
        589,
    ),
    "typed_fill_1mib": (
        "n = 1048576\na = [7] * n\nfor i in range(1000, 2000):\n    a[i] = 1\na[0] + a[1500] + a[n - 1]",
        15,
    ),
    "typed_bytes_loop_1mib": (
        "a = [0] * 1048576\nfor i in range(len(a)):\n    a[i] = i & 255\n"
        "s = 0\nfor i in range(len(a)):\n    s += a[i]\ns",
        133693440,
    ),
    "objects_10k_x10": (
        "rows = []\nfor i in range(10000):\n"
        "    rows.append({'id': i, 'name': 'vm-' + str(i), 'node': 'pve' + str(i % 3), "
        "'status': 'running' if i % 4 else 'stopped', 'cpus': 1 + i % 8, 'mem': (i % 64) * 1048576, "
        "'disk': i * 4096, 'uptime': i * 60, 'tags': 'prod', 'pool': 'p' + str(i % 5)})\n"
        "running = [r for r in rows if r['status'] == 'running']\n"
        "slim = [{'node': r['node'], 'mib': r['mem'] // 1048576, 'cpus': r['cpus']} for r in running]\n"
        "acc = {}\nfor r in slim:\n    acc[r['node']] = acc.get(r['node'], 0) + r['mib'] * r['cpus']\nacc",
        {"pve1": 411174, "pve2": 411186, "pve0": 411200},
    ),
}


def node_reference(names, rounds):
    """p50 ms per script in Node, or {} where Node is not installed."""
    node = shutil.which("node")
    if not node:
        return {}
    files = [str(ROOT / "benches" / "compute" / f"{n}.js") for n in names]
    out = subprocess.run([node, str(Path(__file__).with_name("node_compute.cjs")), str(rounds), *files],
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    for n in names:
        if got[n]["value"] != PYTHON[n][1]:
            raise RuntimeError(f"node answered {n} with {got[n]['value']!r}, expected {PYTHON[n][1]!r}")
    return {n: got[n]["p50_ms"] for n in names}


async def timed(session, tool, arg, script):
    t0 = time.perf_counter()
    r = await session.call_tool(tool, {arg: script})
    took = time.perf_counter() - t0
    body = r.structuredContent or {}
    if tool == "execute":
        if r.isError:
            raise RuntimeError(f"airlock failed: {r.content}")
        return took, body["result"]
    if r.isError or not body.get("success"):
        raise RuntimeError(f"proxmox-mcp-plus failed: {r.content}")
    return took, body["data"]["result"]


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--airlock", required=True)
    ap.add_argument("--python", default=sys.executable, help="python of the venv with proxmox-mcp-plus")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pmp-mode", default="reuse", choices=["fresh", "reuse"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(PYTHON)
    unknown = [n for n in names if n not in PYTHON]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; known: {', '.join(PYTHON)}")
    scripts = {p.stem: p.read_text() for p in sorted((ROOT / "benches" / "compute").glob("*.js"))}
    samples = {(s, w): [] for s in ("airlock", "pmp") for w in names}
    with tempfile.TemporaryDirectory(prefix="airlock-compute-") as scratch:
        a = airlock(args.airlock, "fresh", scratch)
        b = pmp(args.python, args.pmp_mode, scratch)
        async with stdio_client(a.params) as (ar, aw), stdio_client(b.params) as (br, bw):
            async with ClientSession(ar, aw) as sa, ClientSession(br, bw) as sb:
                await sa.initialize()
                await sb.initialize()
                for r in range(args.rounds + 1):  # the first round warms up
                    for w in names:
                        py, want = PYTHON[w]
                        runs = [("airlock", sa, "execute", "script", scripts[w]),
                                ("pmp", sb, "proxmox_code_execute", "code", py)]
                        for name, session, tool, arg, script in (runs if r % 2 == 0 else runs[::-1]):
                            took, value = await timed(session, tool, arg, script)
                            if value != want:
                                raise RuntimeError(f"{name} answered {w} with {value!r}, expected {want!r}")
                            if r > 0:
                                samples[(name, w)].append(took * 1e3)
    node = node_reference(names, args.rounds)
    rows = []
    print(f"{'workload':26} {'airlock p50':>12} {'pmp p50':>10} {'airlock/pmp':>12} {'node p50':>10}")
    for w in names:
        xa, xb = statistics.median(samples[("airlock", w)]), statistics.median(samples[("pmp", w)])
        row = {"workload": w, "airlock_p50_ms": xa, "pmp_p50_ms": xb, "airlock_over_pmp": xa / xb}
        if w in node:
            row["node_p50_ms"] = node[w]
        rows.append(row)
        shown = f"{node[w]:8.2f}ms" if w in node else f"{'-':>10}"
        print(f"{w:26} {xa:10.1f}ms {xb:8.1f}ms {xa / xb:11.2f}× {shown}")
    print(f"(median of {args.rounds} executes each, client side; ProxmoxMCP-Plus in {args.pmp_mode} mode; "
          "Node timed inside Node, no MCP)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "pmp_mode": args.pmp_mode, "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
