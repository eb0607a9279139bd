"""An agent's client that follows a waiting execution, written with the
official Python SDK. It starts the server given on the command line over
stdio, runs one `execute` of the script, and while the answer says the
execution waits, has each request it names approved by another person
(the approve command given, with the request id and `--by APPROVER`
appended), then follows the execution with `execute({"execution": ID})`.
It prints every answer as one JSON line:

    {"answers": [<structuredContent>, ...], "is_error": bool}

Used by host/tests/durable.rs.
"""

import asyncio
import json
import subprocess
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    script, approver = sys.argv[1], sys.argv[2]
    approve = json.loads(sys.argv[3])
    command, args = sys.argv[4], sys.argv[5:]
    answers = []
    server = StdioServerParameters(command=command, args=args)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("execute", {"script": script})
            answers.append(result.structured_content)
            for _ in range(10):
                answer = result.structured_content or {}
                if answer.get("status") != "waiting":
                    break
                for waiting in answer["waiting"]:
                    subprocess.run(
                        approve + [waiting["request_id"], "--by", approver],
                        check=True,
                        capture_output=True,
                    )
                result = await session.call_tool("execute", answer["follow"])
                answers.append(result.structured_content)
            print(json.dumps({"answers": answers, "is_error": bool(result.is_error)}))


asyncio.run(main())
