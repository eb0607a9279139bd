"""The official Python SDK's default `Client` (2026-07-28) with a logging
callback: it starts the server given on the command line over stdio and
runs the script with `execute` twice, first from a client that set no
log level, then from one that asked for `debug` (which stamps
`io.modelcontextprotocol/logLevel` on its requests). Prints one JSON
line: the protocol, and the log messages each received.

Used by host/tests/durable.rs.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


async def run(server, script, level):
    got = []

    async def keep(params):
        got.append({"level": params.level, "data": params.data})

    async with Client(server, logging_callback=keep, log_level=level) as client:
        result = await client.call_tool("execute", {"script": script})
        return client.protocol_version, result.structured_content, got


async def main() -> None:
    script = sys.argv[1]
    server = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
    protocol, unasked_result, unasked = await run(server, script, None)
    _, asked_result, asked = await run(server, script, "debug")
    print(
        json.dumps(
            {
                "protocol": protocol,
                "unasked": unasked,
                "asked": asked,
                "results": [unasked_result, asked_result],
            }
        )
    )


asyncio.run(main())
