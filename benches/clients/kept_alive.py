"""One kept-alive connection to `airlock serve --http`, timed through the
official Python SDK's client (ClientSession over its streamable HTTP
transport): RUNS MCP pings and RUNS `execute` of `1+1`, alternately,
after a warm-up. Prints one JSON line of milliseconds per request:

    python kept_alive.py URL RUNS
    {"ping": [ms, ...], "execute": [ms, ...]}

Run by `airlock bench` with the venv scripts/test-venv.sh makes.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, runs = sys.argv[1], int(sys.argv[2])
    out = {"ping": [], "execute": []}
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def execute():
                r = await session.call_tool("execute", {"script": "1+1"})
                if r.is_error:
                    raise RuntimeError(json.dumps(r.structured_content))

            for _ in range(20):
                await session.send_ping()
                await execute()
            for _ in range(runs):
                t = time.perf_counter()
                await session.send_ping()
                out["ping"].append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await execute()
                out["execute"].append((time.perf_counter() - t) * 1000)
    print(json.dumps(out))


asyncio.run(main())
