"""The official Python SDK's clients answering every approval question
the same way: `decline` (a no) or `cancel` (dismissed without a choice,
as a headless client answers). On `2025` it is a `ClientSession` that
initializes as before (the question arrives as an elicitation during
the call); on `2026` it is the SDK's `Client`, which speaks 2026-07-28
with the server and answers its InputRequiredResult through the same
callback.

    python answer.py ACTION PROTOCOL SCRIPT SERVER_COMMAND [ARGS...]

It runs `execute` of SCRIPT. When the answer waits for an approval
request and APPROVE_WITH is set (a JSON list: the command that approves
as an operator, the request id appended), it runs that command and
follows the execution in the same session. Prints one JSON line:
{"protocol", "first", "followed", "asked"}.

Used by host/tests/approvals.rs.
"""

import asyncio
import json
import os
import subprocess
import sys

from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


def shown(result):
    return {"result": result.structured_content, "is_error": bool(result.is_error)}


async def main() -> None:
    action, protocol, script = sys.argv[1], sys.argv[2], sys.argv[3]
    command, args = sys.argv[4], sys.argv[5:]
    asked: list[str] = []

    async def answer(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        return types.ElicitResult(action=action)

    async def run(call, version):
        out = {"protocol": version, "asked": asked}
        first = await call({"script": script})
        out["first"] = shown(first)
        s = first.structured_content or {}
        approve = os.environ.get("APPROVE_WITH")
        if s.get("status") == "waiting" and approve:
            request = s["waiting"][0]["request_id"]
            subprocess.run(json.loads(approve) + [request], check=True, capture_output=True)
            out["asked_before_follow"] = len(asked)
            out["followed"] = shown(await call({"execution": s["execution"]}))
        print(json.dumps(out))

    server = StdioServerParameters(command=command, args=args)
    if protocol == "2025":
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write, elicitation_callback=answer) as session:
                init = await session.initialize()
                await run(lambda a: session.call_tool("execute", a), init.protocol_version)
    else:
        async with Client(server, elicitation_callback=answer) as client:
            await run(lambda a: client.call_tool("execute", a), client.protocol_version)


asyncio.run(main())
