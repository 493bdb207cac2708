"""A server's ``sampling/createMessage``, answered by the model of the calling agent.

The server's policy decides (``MCPServer(..., sampling=...)``): ``deny`` (the default: the
capability is not even declared), ``ask`` (an input request of kind ``sampling``; ``accept``
lets it run, anything else refuses it) or ``allow``. The request runs on the agent's current
route with the call's signal, so cancelling the turn stops it. Every request is logged as
``mcp/sampled`` (its outcome, the model, its usage and answer), which ``install_limits``
counts with the agent's own usage.

Text only: a request carrying images, audio or tools is refused (steerloop declares neither
``sampling.tools`` nor media sampling).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import mcp_types as types

from .. import AbortSignal
from ..agent import Agent
from ..context import current_config
from ..errors import AbortedError, LlmError
from ..ids import new_id
from ..llm import CallConfig, GenerateRequest, TokenUsage
from ..messages import AssistantMessage, Message, SystemMessage, TextBlock, UserMessage
from ..session.events import InputRequest, MCPSampled
from ._calls import CallContext
from ._config import MCPServer
from ._limits import json_size

Ask = Callable[[InputRequest], Awaitable["types.ElicitResult | types.ErrorData"]]

__all__ = ["sample"]

_APPROVAL_SCHEMA = {"type": "object", "properties": {}}
_STOP_REASONS = {"stop": "endTurn", "max-tokens": "maxTokens"}


def _messages(params: types.CreateMessageRequestParams) -> tuple[Message, ...] | str:
    """The request's conversation as steerloop messages, or why it cannot be one."""
    if params.tools:
        return "it offers tools, which steerloop does not sample with"
    out: list[Message] = []
    if params.system_prompt:
        out.append(SystemMessage(id="sampling-system", content=(TextBlock(params.system_prompt),)))
    for index, message in enumerate(params.messages):
        blocks = message.content if isinstance(message.content, list) else [message.content]
        texts = []
        for block in blocks:
            if not isinstance(block, types.TextContent):
                return f"it holds {block.type} content; steerloop samples text only"
            texts.append(TextBlock(block.text))
        if message.role == "user":
            out.append(UserMessage(id=f"sampling-{index}", content=tuple(texts)))
        else:
            out.append(AssistantMessage(id=f"sampling-{index}", content=tuple(texts)))
    return tuple(out)


def _summary(server: str, params: types.CreateMessageRequestParams) -> str:
    last = params.messages[-1].content if params.messages else None
    preview = last.text if isinstance(last, types.TextContent) else ""
    if len(preview) > 200:
        preview = preview[:200] + "…"
    return (
        f"MCP server {server!r} asks to use the model for up to {params.max_tokens} tokens "
        f"({len(params.messages)} message(s); last: {preview!r}). Accept to let it run."
    )


async def sample(
    server: MCPServer,
    ask: Ask,
    call: CallContext,
    agent: Agent,
    params: types.CreateMessageRequestParams,
) -> types.CreateMessageResult | types.ErrorData:
    """Answer ``params`` for the call ``call`` of ``agent`` under ``server``'s policy
    (``ask`` puts an input request to a person and waits for the answer)."""

    def refuse(detail: str) -> types.ErrorData:
        agent.session.append(
            MCPSampled(
                server=server.name, outcome="denied", call_id=call.exec.call_id, detail=detail
            ),
            ignorable=True,
        )
        return types.ErrorData(code=types.INVALID_REQUEST, message=f"sampling refused: {detail}")

    size = json_size(params.model_dump(mode="json", by_alias=True, exclude_none=True))
    if size > server.limits.max_result_bytes:
        return refuse(f"the request takes {size:,} bytes (max_result_bytes)")
    messages = _messages(params)
    if isinstance(messages, str):
        return refuse(messages)
    if server.sampling == "ask":
        request = InputRequest(
            id=new_id("input"),
            server=server.name,
            message=_summary(server.name, params),
            schema=_APPROVAL_SCHEMA,
            kind="sampling",
            call_id=call.exec.call_id,
            turn=call.exec.turn or None,
        )
        answer = await ask(request)
        if not isinstance(answer, types.ElicitResult) or answer.action != "accept":
            action = answer.action if isinstance(answer, types.ElicitResult) else "error"
            return refuse(f"the person asked answered {action}")
    try:
        return await _run(agent, call, params, messages, server.name)
    except AbortedError:
        return types.ErrorData(
            code=types.INTERNAL_ERROR, message="sampling cancelled: the call ended"
        )


async def _run(
    agent: Agent,
    call: CallContext,
    params: types.CreateMessageRequestParams,
    messages: tuple[Message, ...],
    server: str,
) -> types.CreateMessageResult | types.ErrorData:
    config = current_config(agent)
    max_tokens = min(params.max_tokens, config.max_tokens or params.max_tokens)
    config = config.replace(max_tokens=max_tokens)
    if params.temperature is not None:
        config = config.replace(temperature=params.temperature)
    try:
        text, usage, finish = await _generate(agent, config, messages, call.signal)
    except (LlmError, ValueError) as exc:
        agent.session.append(
            MCPSampled(
                server=server,
                outcome="failed",
                call_id=call.exec.call_id,
                provider=config.provider,
                model=config.model,
                detail=str(exc),
            ),
            ignorable=True,
        )
        return types.ErrorData(code=types.INTERNAL_ERROR, message=f"sampling failed: {exc}")
    stop = _STOP_REASONS.get(finish, finish)
    agent.session.append(
        MCPSampled(
            server=server,
            outcome="answered",
            call_id=call.exec.call_id,
            provider=config.provider,
            model=config.model,
            usage=usage,
            stop_reason=stop,
            text=text,
        ),
        ignorable=True,
    )
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=text),
        model=config.model or "",
        stop_reason=stop,
    )


async def _generate(
    agent: Agent, config: CallConfig, messages: tuple[Message, ...], signal: AbortSignal
) -> tuple[str, TokenUsage | None, str]:
    """``(text, usage, finish kind)`` of one request to the agent's model."""
    prepared = await agent.services.llm.prepare_call(config, signal)
    request = GenerateRequest(
        provider=prepared.provider,
        model=prepared.model,
        messages=messages,
        max_tokens=config.max_tokens,
        reasoning_effort=config.reasoning_effort,
        session_id=agent.session.id,
        signal=signal,
        config=config,
    )
    assembler = await prepared.collect(request)
    signal.throw_if_aborted()
    reason = assembler.reason
    if reason.kind in ("error", "aborted"):
        failure = reason.failure
        raise LlmError(failure) if failure is not None else ValueError(f"ended {reason.kind}")
    text = "".join(b.text for b in assembler.blocks() if isinstance(b, TextBlock))
    return text, assembler.usage, reason.kind
