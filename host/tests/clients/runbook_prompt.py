"""A person's runbook, through the official Python SDK's client: it lists
the server's prompts, gets `runbook_<name>` with the arguments given as
JSON, takes the script the prompt's message asks the agent to run and
runs it with `execute`. Prints one JSON line:

    {"prompts": [<name>, ...], "message": <text>, "result": <structuredContent>, "is_error": bool}

Usage: runbook_prompt.py NAME ARGS_JSON COMMAND [ARG...]
Used by host/tests/runbooks.rs.
"""

import asyncio
import json
import re
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    name, given = sys.argv[1], json.loads(sys.argv[2])
    command, args = sys.argv[3], sys.argv[4:]
    server = StdioServerParameters(command=command, args=args)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            prompts = await session.list_prompts()
            got = await session.get_prompt(f"runbook_{name}", given)
            message = got.messages[0].content.text
            found = re.search(r"const result = await runbooks\.\w+\(.*\);\nresult", message)
            result = await session.call_tool("execute", {"script": found.group(0)})
            print(
                json.dumps(
                    {
                        "prompts": [p.name for p in prompts.prompts],
                        "message": message,
                        "result": result.structured_content,
                        "is_error": bool(result.is_error),
                    }
                )
            )


asyncio.run(main())
