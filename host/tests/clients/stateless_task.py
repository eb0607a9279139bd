"""The official Python SDK's `Client` (2026-07-28) with the tasks
extension (`io.modelcontextprotocol/tasks`), written against the SDK's
own extension interface (`ClientExtension`, `ResultClaim`): it declares
the extension, and a `tools/call` answered with a task (`resultType:
"task"`) is followed with `tasks/get` at the interval the server asks,
its questions (`input_required`) answered with `tasks/update`.

It starts the server given on the command line over stdio and runs one
`execute` of the script (argv[1]), in one of these ways (argv[2]):

- `approve`: `client.call_tool`, the extension's resolver polling the
  task and approving each question it is put;
- `operator`: the same, without elicitation; when the task names a
  request, the command in argv[3] (a JSON array) is run with the request
  id appended, as an operator deciding it;
- `cancel`: the task handle taken as it comes, one poll, then
  `tasks/cancel`, a poll after it, a second cancel, and a poll of an id
  that was never a task.

It prints one JSON line: the protocol spoken, the statuses it saw, the
questions asked and what came back.

Used by host/tests/durable.rs.
"""

import asyncio
import json
import re
import subprocess
import sys
from typing import Any, Literal

from mcp import Client, StdioServerParameters, types
from mcp.client.extension import ClientExtension, ResultClaim
from mcp_types import Request, RequestParams, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"


class TaskHandle(Result):
    """`CreateTaskResult`: the task, flattened."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class DetailedTask(Result):
    """`tasks/get`'s answer: the task and its payload, flattened."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskParams(RequestParams):
    model_config = ConfigDict(extra="allow")
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateParams(TaskParams):
    input_responses: dict[str, Any]


class UpdateTask(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class Ack(Result):
    model_config = ConfigDict(extra="allow")


async def get(session, task_id: str) -> DetailedTask:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), DetailedTask)


class Tasks(ClientExtension):
    identifier = TASKS

    def __init__(self, seen: list, asked: list, operator: list[str] | None) -> None:
        self.seen, self.asked, self.operator = seen, asked, operator
        self.decided: set[str] = set()

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle: TaskHandle, ctx) -> types.CallToolResult:
        self.seen.append(handle.status)
        interval = (handle.poll_interval_ms or 1000) / 1000
        while True:
            await asyncio.sleep(interval)
            task = await get(ctx.session, handle.task_id)
            self.seen.append(task.status)
            interval = (task.poll_interval_ms or 1000) / 1000
            if task.status == "completed":
                return types.CallToolResult.model_validate(task.result)
            if task.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {task.status}: {task.error}")
            if task.status == "input_required":
                answers = {}
                for key, request in (task.input_requests or {}).items():
                    self.asked.append(request["params"]["message"])
                    answers[key] = {"action": "accept", "content": {"approve": True}}
                await ctx.session.send_request(
                    UpdateTask(params=UpdateParams(task_id=handle.task_id, input_responses=answers)),
                    Ack,
                )
            elif self.operator is not None:
                for request in re.findall(r"request (\S+) ", task.status_message or ""):
                    if request not in self.decided:
                        self.decided.add(request)
                        subprocess.run(self.operator + [request], check=True, stdout=sys.stderr)


async def main() -> None:
    script, how = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    operator = None
    if how == "operator":
        operator, rest = json.loads(rest[0]), rest[1:]
    command, args = rest[0], rest[1:]
    seen: list[str] = []
    asked: list[str] = []

    async def approve(context, params: types.ElicitRequestParams):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    server = StdioServerParameters(command=command, args=args)
    extension = Tasks(seen, asked, operator)
    callback = approve if how == "approve" else None
    async with Client(server, elicitation_callback=callback, extensions=[extension]) as client:
        out: dict[str, Any] = {"protocol": client.protocol_version, "seen": seen, "asked": asked}
        if how in ("approve", "operator"):
            result = await client.call_tool("execute", {"script": script})
            out["final"] = result.structured_content
        else:
            handle = await client.session.call_tool("execute", {"script": script}, allow_claimed=True)
            out["handle"] = handle.model_dump(by_alias=True, exclude_none=True)
            out["polled"] = (await get(client.session, handle.task_id)).model_dump(by_alias=True, exclude_none=True)
            cancel = CancelTask(params=TaskParams(task_id=handle.task_id))
            await client.session.send_request(cancel, Ack)
            out["after"] = (await get(client.session, handle.task_id)).model_dump(by_alias=True, exclude_none=True)
            for step, request in (("again", cancel), ("unknown", GetTask(params=TaskParams(task_id="never-a-task")))):
                try:
                    await client.session.send_request(request, Ack)
                    out[step] = "accepted"
                except Exception as e:  # the SDK's MCPError
                    out[step] = {"code": getattr(getattr(e, "error", None), "code", None), "message": str(e)}
        print(json.dumps(out))


asyncio.run(main())
