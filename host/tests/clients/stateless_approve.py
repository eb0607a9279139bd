"""The official Python SDK's `Client` in its default mode (`auto`: it
probes `server/discover` and speaks 2026-07-28 when the server offers
it), with an elicitation callback that approves every question. It
starts the server given on the command line over stdio and runs one
`execute` of the script, in one of two ways (argv[2]):

- `auto`: `client.call_tool`, which answers an `InputRequiredResult` by
  asking the callback and retrying with the answers and the state;
- `tamper`: the rounds driven by hand: the state changed before the
  retry; sent with another script; sent with an answer that is not yes
  or no; then sent as it came; then sent again (replayed).

It prints one JSON line: the protocol spoken, what came back, and the
questions asked.

Used by host/tests/durable.rs.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters, types


def shown(result):
    if isinstance(result, types.InputRequiredResult):
        return {"input_required": sorted((result.input_requests or {}).keys())}
    return {"result": result.structured_content, "is_error": bool(result.is_error)}


async def main() -> None:
    script, how = sys.argv[1], sys.argv[2]
    command, args = sys.argv[3], sys.argv[4:]
    asked: list[str] = []

    async def approve(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    server = StdioServerParameters(command=command, args=args)
    async with Client(server, elicitation_callback=approve) as client:
        out = {"protocol": client.protocol_version, "asked": asked}
        if how == "auto":
            out["final"] = shown(await client.call_tool("execute", {"script": script}))
        else:
            first = await client.session.call_tool(
                "execute", {"script": script}, allow_input_required=True
            )
            out["first"] = shown(first)
            if isinstance(first, types.InputRequiredResult):
                keys = first.input_requests or {}

                def answering(approve):
                    return {k: {"action": "accept", "content": {"approve": approve}} for k in keys}

                async def retry(state, answers, script=script):
                    return shown(
                        await client.session.call_tool(
                            "execute",
                            {"script": script},
                            input_responses=answers,
                            request_state=state,
                            allow_input_required=True,
                        )
                    )

                state = first.request_state
                tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
                out["tampered"] = await retry(tampered, answering(True))
                out["other_script"] = await retry(state, answering(True), script + "\n// another")
                out["garbled"] = await retry(state, answering("maybe"))
                out["answered"] = await retry(state, answering(True))
                out["replayed"] = await retry(state, answering(True))
        print(json.dumps(out))


asyncio.run(main())
