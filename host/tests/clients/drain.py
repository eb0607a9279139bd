"""An MCP client over streamable HTTP written with the official Python
SDK: it opens a session with the bearer key given, runs one `execute`
and prints what came back as one JSON line:

    {"result": <structuredContent>, "is_error": bool}

It prints `called` on its own line once the request is sent, so that a
test can stop the server (SIGTERM) while the execution runs. Used by
host/tests/faults.rs: a server draining must deliver the answer to the
SDK's session, whose standalone GET stream reconnects when it closes.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, key, script = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                call = asyncio.ensure_future(session.call_tool("execute", {"script": script}))
                print("called", flush=True)
                result = await call
                print(
                    json.dumps(
                        {"result": result.structured_content, "is_error": bool(result.is_error)}
                    ),
                    flush=True,
                )


asyncio.run(main())
