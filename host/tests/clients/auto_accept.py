"""An MCP client that says yes to everything, written with the official
Python SDK: every elicitation is accepted with every yes-or-no field set
to true (`approve`, `ask_an_operator`, and any other boolean the form
asks for). It starts the server given on the command line over stdio,
runs one `execute`, and prints what came back as one JSON line:

    {"result": <structuredContent>, "is_error": bool, "asked": [<message>, ...]}

Used by host/tests/approvals.rs: an agent's client set to auto-accept must
not be able to approve its own calls.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main() -> None:
    script = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    command, args = sys.argv[3], sys.argv[4:]
    asked: list[str] = []

    async def accept_everything(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        schema = getattr(params, "requested_schema", None) or {}
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        content = {name: True for name, p in props.items() if p.get("type") == "boolean"}
        content.setdefault("approve", True)
        return types.ElicitResult(action="accept", content=content)

    server = StdioServerParameters(command=command, args=args)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=accept_everything) as session:
            await session.initialize()
            arguments = {"script": script}
            if mode:
                arguments["mode"] = mode
            result = await session.call_tool("execute", arguments)
            print(
                json.dumps(
                    {
                        "result": result.structured_content,
                        "is_error": bool(result.is_error),
                        "asked": asked,
                    }
                )
            )


asyncio.run(main())
