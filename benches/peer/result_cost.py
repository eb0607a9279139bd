"""What an `execute` result costs an agent: its bytes (text, structured
content, the whole result as the Python MCP SDK parses it) for `1+1`, a
500-call fan-out and the fleet report, and `1+1`'s time against an MCP
ping, through the Python SDK over stdio against `airlock serve --demo`.

Give several binaries (say, before and after a change) to measure them
alternately in one run:

    python benches/peer/result_cost.py target/release/airlock /tmp/airlock-old
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = {
    "1+1": "1+1",
    "fan-out 500": "(await Promise.all(Array.from({length: 500}, () => tools.node_list({})))).length",
    "fleet report": (ROOT / "examples" / "fleet-report.js").read_text(),
}


async def measure(binary, runs):
    with tempfile.TemporaryDirectory(prefix="airlock-cost-") as state:
        return await measure_in(binary, runs, state)


async def measure_in(binary, runs, state):
    params = StdioServerParameters(
        command=binary,
        args=["serve", "--demo"],
        env={"AIRLOCK_STATE_DIR": state, "AIRLOCK_LOG": "warn", "PATH": os.environ["PATH"]},
    )
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            out["tools/list bytes"] = len(listed.model_dump_json(exclude_none=True))
            for name, script in WORKLOADS.items():
                r = await session.call_tool("execute", {"script": script})
                if r.isError:
                    raise RuntimeError(f"{name} failed on {binary}")
                text = "".join(getattr(c, "text", "") for c in r.content)
                structured = json.dumps(r.structuredContent, separators=(",", ":")) if r.structuredContent else ""
                out[f"{name} bytes (text, structured, whole)"] = [
                    len(text.encode()),
                    len(structured.encode()),
                    len(r.model_dump_json(exclude_none=True).encode()),
                ]
            executes, pings = [], []
            for _ in range(runs):
                t = time.perf_counter()
                await session.call_tool("execute", {"script": "1+1"})
                executes.append(time.perf_counter() - t)
                t = time.perf_counter()
                await session.send_ping()
                pings.append(time.perf_counter() - t)
            out["1+1 p50 ms"] = round(statistics.median(executes) * 1000, 3)
            out["ping p50 ms"] = round(statistics.median(pings) * 1000, 3)
    return out


async def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for rnd in range(args.rounds):
        for b in args.binaries:
            print(json.dumps({"round": rnd + 1, "binary": b, **await measure(b, args.runs)}))


asyncio.run(main())
