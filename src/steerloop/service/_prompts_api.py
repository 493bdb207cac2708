"""A session's MCP prompts over HTTP: what the web chat offers as ``/server:prompt args…``.

``GET /v1/sessions/{id}/prompts`` lists the prompts of the MCP servers open in this process
(``install_mcp`` in a profiles callable); ``POST /v1/sessions/{id}/prompts`` expands one
(``MCPTools.prompt_message``: the server's ``prompts/get``) and sends it as the session's
next message, whose source records the server, the prompt and its arguments
(``source.extra["mcp_prompt"]``), as ``steerloop chat`` does.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import Runtime
from ..mcp import MCPTools, installed_mcp
from ..messages import TextBlock
from ._answers import PromptList
from ._api import Host
from ._errors import ApiError
from ._no_model import require_session_model
from ._operation import Answer, Operation, command
from ._read_body import read_body
from ._text import check_text

__all__ = ["PROMPT_OPERATIONS", "PromptBody", "list_prompts", "send_prompt"]

_COMMAND = re.compile(r"/([A-Za-z0-9_-]{1,64}):(\S{1,200})(?:\s+(.*))?", re.DOTALL)
_MAX_PROMPTS = 1000


class PromptBody(BaseModel):
    """``POST /v1/sessions/{id}/prompts``: ``command`` is ``/server:prompt args…`` (the
    arguments ``key=value`` or positional words); sent as ``mode`` (a followup by default)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    command: Annotated[str, Field(min_length=3, max_length=16384)]
    mode: Literal["followup", "steer", "inject"] = "followup"
    message_id: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=512)] | None = None


def _servers(rt: Runtime) -> dict[str, MCPTools]:
    return {s.name: tools for tools in installed_mcp(rt) for s in tools.servers()}


async def list_prompts(request: Request, host: Host) -> Response:
    """``{"prompts": [{"server", "name", "command", "description", "arguments": [{"name",
    "description", "required"}]}], "unavailable": [server, …]}`` (a server that failed to
    list is named, not fatal)."""
    session_id = request.path_params["session_id"]
    await host.require(session_id)
    rows: list[dict[str, Any]] = []
    unavailable: list[str] = []
    for server, tools in _servers(host.rt).items():
        try:
            listed = await tools.prompts(server)
        except Exception:  # no prompts capability, or the server is down
            unavailable.append(server)
            continue
        for prompt in listed[: _MAX_PROMPTS - len(rows)]:
            rows.append(
                {
                    "server": server,
                    "name": prompt.name,
                    "command": f"/{server}:{prompt.name}",
                    "description": prompt.description or "",
                    "arguments": [
                        {
                            "name": a.name,
                            "description": a.description or "",
                            "required": bool(a.required),
                        }
                        for a in prompt.arguments or ()
                    ],
                }
            )
    return JSONResponse({"prompts": rows, "unavailable": unavailable})


async def send_prompt(request: Request, host: Host) -> Response:
    """Expand ``command`` and send it → 202 ``{"cmd_seq", "message_id"}``; 404
    ``prompt_not_found`` for a server not open here, 422 ``invalid_prompt`` for a command
    the server's prompt refuses (unknown prompt, missing arguments), 502 ``prompt_failed``
    when the server fails."""
    session_id = request.path_params["session_id"]
    body = await read_body(request, PromptBody)
    check_text(body.command, "command")
    match = _COMMAND.fullmatch(body.command.strip())
    if match is None:
        raise ApiError(422, "invalid_prompt", "command must be /server:prompt [arguments]")
    server, name, arguments = match.group(1), match.group(2), match.group(3) or ""
    await host.require(session_id)
    await require_session_model(host, session_id)
    tools = _servers(host.rt).get(server)
    if tools is None:
        raise ApiError(404, "prompt_not_found", f"no MCP server {server!r} is open here")
    try:
        message = await tools.prompt_message(server, name, arguments)
    except ValueError as exc:
        raise ApiError(422, "invalid_prompt", str(exc)) from None
    except Exception as exc:
        raise ApiError(502, "prompt_failed", f"/{server}:{name}: {exc}") from None
    text = "\n\n".join(b.text for b in message.content if isinstance(b, TextBlock))
    source = dict(message.source.extra or {})
    answer = await host.send(
        session_id,
        body.mode,
        text,
        body.message_id,
        body.idempotency_key,
        source=source,
    )
    return JSONResponse(answer, status_code=202)


_PATH = "/v1/sessions/{session_id:str}/prompts"
PROMPT_OPERATIONS = (
    Operation(
        method="GET",
        path=_PATH,
        summary="List the MCP prompts a session can send",
        handler=list_prompts,
        answers=(Answer(status=200, description="The prompts.", model=PromptList),),
        errors=frozenset({404}),
    ),
    command(
        _PATH,
        "Expand an MCP prompt and send it as the session's next message",
        send_prompt,
        PromptBody,
        frozenset({404, 409, 422, 429, 502}),
    ),
)
