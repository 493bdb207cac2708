"""AnthropicAdapter through the official SDK against a loopback Messages API server.

Every test drives a real ``Runtime`` + agent; the server speaks the SSE wire format event by
event and records the JSON bodies it received, so the assertions cover both what the loop
logged and what went over the wire.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from steerloop import AgentOptions, CancelCause, Runtime, define_tool, user_message
from steerloop.llm import LlmFailure, TokenUsage
from steerloop.llm.anthropic import AnthropicAdapter
from steerloop.messages import (
    AssistantMessage,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from steerloop.session._codec import event_to_json

from ..conftest import compact, events_of, settle
from ..support import last_reason
from .anthropic_wire import (
    MODEL,
    api_error,
    block_start,
    delta,
    error_event,
    message,
    message_start,
    ping,
    redacted_thinking,
    streamed,
    text,
    thinking,
    tool_use,
)
from .sse_server import SSEServer

KEY = "sk-ant-test"
SIGNATURE = "EqQBCkgIARABGAIiQL2s/sig+unchanged=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"


class Model:
    """An agent on provider ``anthropic`` served by an ``AnthropicAdapter`` at ``server``."""

    def __init__(self, rt: Runtime, server: SSEServer, **adapter_kwargs: Any) -> None:
        self.rt = rt
        self.server = server
        self.adapter = AnthropicAdapter(base_url=server.url, api_key=KEY, **adapter_kwargs)
        rt.llm.register_adapter(["anthropic"], self.adapter)

    async def agent(self, *replies: Any, tools: tuple[Any, ...] = (), **options: Any) -> Any:
        self.server.add(*replies)

        def setup(scope: Any) -> None:
            for tool in tools:
                scope.tools.register(tool)

        handle = await self.rt.agents.create(
            session_id="s-1",
            agent_options=AgentOptions(provider="anthropic", model=MODEL, **options),
            setup=setup,
        )
        return handle.agent

    def body(self, index: int) -> Any:
        return self.server.requests[index].json()


@pytest.fixture
async def model(rt: Runtime, server: SSEServer) -> AsyncIterator[Model]:
    m = Model(rt, server)
    try:
        yield m
    finally:
        await m.adapter.aclose()


async def run(agent: Any, text_: str = "u1") -> None:
    agent.followup(user_message(text_))
    await settle(agent)


def chunk_kinds(event: Any) -> list[str]:
    return [record.chunk.kind for record in event.data.stream]


def frames_of(rt: Runtime, kind: str) -> asyncio.Event:
    """Set once a live ``agent/assistant-stream`` chunk of ``kind`` was delivered."""
    seen = asyncio.Event()

    def on_frame(payload: Any) -> None:
        frame = payload.frame
        if frame.kind == "chunk" and getattr(frame.chunk, "kind", None) == kind:
            seen.set()

    rt.hooks.on("agent/assistant-stream", on_frame)
    return seen


def log_text(agent: Any) -> str:
    return "\n".join(json.dumps(event_to_json(e)) for e in agent.session.events)


class LookupArgs(BaseModel):
    key: str


async def _lookup(args: LookupArgs, exec: Any) -> str:
    return f"value of {args.key}"


lookup = define_tool(
    name="lookup",
    description="Look a key up",
    parameters=LookupArgs,
    execute=_lookup,
    concurrency_safe=True,
)


# --- the tool loop with thinking ---------------------------------------------------------


async def test_tool_round_trip_replays_thinking_and_pairs_results(model: Model) -> None:
    """Thinking (signed and redacted), text and two tool calls; the second request of the
    tool loop carries the assistant turn with the thinking blocks unchanged and the tool_use
    blocks, then ONE user message with both tool_results paired by tool_use_id. Prompt
    caching is on by default: breakpoints on the system prompt, the last tool and the last
    block of the last message (here the second tool_result)."""
    m = model
    m.rt.system_prompt.add_section("persona", "You are terse.")
    first = message(
        thinking(0, ["I should ", "look both up."], SIGNATURE),
        redacted_thinking(1, REDACTED),
        text(2, "Looking ", "up."),
        tool_use(3, "toolu_a", "lookup", '{"ke', 'y": "x"}'),
        tool_use(4, "toolu_b", "lookup", '{"key": "y"}'),
        stop_reason="tool_use",
    )
    second = message(text(0, "x and y found."))
    agent = await m.agent(
        streamed(first), streamed(second), tools=(lookup,), reasoning_effort="medium"
    )
    await run(agent, "find x and y")

    assert compact(agent.session) == [
        "ins(nt,find x and y)", "T+1", "claim(nt,find x and y)",
        "S+1.1", "sys", "user(find x and y)", "hdr(initial)", "ctx", "msg",
        "call(toolu_a)", "call(toolu_b)", "result(toolu_a)", "result(toolu_b)", "S-1.1",
        "S+1.2", "msg", "S-1.2", "T-1:completed",
    ]  # fmt: skip

    body1, body2 = m.body(0), m.body(1)
    cache = {"type": "ephemeral"}
    assert body1["system"] == [{"type": "text", "text": "You are terse.", "cache_control": cache}]
    assert body1["stream"] is True
    (tool,) = body1["tools"]
    assert set(tool) == {"name", "description", "input_schema", "cache_control"}
    assert tool["cache_control"] == cache
    assert (tool["name"], tool["description"]) == ("lookup", "Look a key up")
    assert tool["input_schema"]["type"] == "object"
    assert tool["input_schema"]["properties"]["key"]["type"] == "string"
    assert body1["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert body1["max_tokens"] == 8192 + 16384
    assert body1["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "find x and y", "cache_control": cache}],
        }
    ]
    assert all(msg["role"] != "system" for msg in body2["messages"])
    assert body2["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "find x and y"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should look both up.", "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": REDACTED},
                {"type": "text", "text": "Looking up."},
                {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"key": "x"}},
                {"type": "tool_use", "id": "toolu_b", "name": "lookup", "input": {"key": "y"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_a",
                    "content": [{"type": "text", "text": "value of x"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": "value of y"}],
                    "cache_control": cache,
                },
            ],
        },
    ]
    for key in ("system", "tools", "thinking", "max_tokens", "model"):
        assert body2[key] == body1[key]

    messages = agent.session.derive_messages()
    assistant = messages[2]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == (
        ReasoningBlock(
            "I should look both up.",
            {"kind": "anthropic/thinking", "signature": SIGNATURE},
        ),
        ReasoningBlock("", {"kind": "anthropic/redacted_thinking", "data": REDACTED}),
        TextBlock("Looking up."),
        ToolCallBlock("toolu_a", "lookup", '{"key": "x"}'),
        ToolCallBlock("toolu_b", "lookup", '{"key": "y"}'),
    )
    assert assistant.source.provider == "anthropic" and assistant.source.model == MODEL
    assert [type(x).__name__ for x in messages] == [
        "SystemMessage", "UserMessage", "AssistantMessage",
        "ToolResultMessage", "ToolResultMessage", "AssistantMessage",
    ]  # fmt: skip
    assert isinstance(messages[3], ToolResultMessage) and messages[3].call_id == "toolu_a"
    assert messages[-1].content == (TextBlock("x and y found."),)
    # The stream records keep every delta boundary as the wire delivered it.
    msg1 = events_of(agent.session, "assistant/message")[0]
    tool_deltas = [
        r.chunk.arguments_delta
        for r in msg1.data.stream
        if r.chunk.kind == "tool-call-delta" and r.chunk.index == 3
    ]
    assert tool_deltas == ["", '{"ke', 'y": "x"}']
    assert msg1.data.stream[-1].chunk.reason.kind == "tool-calls"
    assert KEY not in log_text(agent)


async def test_tool_call_without_arguments_gets_the_start_input(
    model: Model,
) -> None:
    """A call whose input streams no JSON gets the start block's input (``{}``), so the tool
    runs instead of failing with INVALID_ARGS."""
    ping_tool = define_tool(
        name="ping",
        description="Ping",
        parameters={"type": "object", "properties": {}},
        execute=lambda args, exec: _pong(),
    )
    agent = await model.agent(
        streamed(message(tool_use(0, "toolu_p", "ping"), stop_reason="tool_use")),
        streamed(message(text(0, "done"))),
        tools=(ping_tool,),
    )
    await run(agent)
    result = events_of(agent.session, "tool/result")[0].data
    assert result.error is None and result.message.content == (TextBlock("pong"),)
    assert model.body(1)["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_p", "name": "ping", "input": {}}
    ]


async def _pong() -> str:
    return "pong"


# --- usage, system prompt, max tokens ----------------------------------------------------


async def test_usage_with_cache_read_and_write(model: Model) -> None:
    """message_start usage (input, cache read/write) and message_delta output_tokens become
    one TokenUsage with disjoint counts on the assistant/message."""
    reply = message(
        text(0, "hi"), input_tokens=12, cache_read=3000, cache_write=250, output_tokens=42
    )
    agent = await model.agent(streamed(reply))
    await run(agent)
    assert compact(agent.session)[-4:] == ["ctx", "msg", "S-1.1", "T-1:completed"]
    event = events_of(agent.session, "assistant/message")[0]
    assert event.data.usage == TokenUsage(
        input_tokens=12, output_tokens=42, cache_read_tokens=3000, cache_write_tokens=250
    )
    assert chunk_kinds(event) == [
        "usage", "block-start", "text-delta", "block-end", "usage", "finish",
    ]  # fmt: skip
    body = model.body(0)
    assert "system" not in body  # an empty prompt sends no system
    assert "thinking" not in body
    assert body["max_tokens"] == 16384  # the model default from resolve_model
    header = events_of(agent.session, "request/header")[0].data.header
    assert header["adapter_defaults"] == {"max_tokens": 16384}
    ctx = events_of(agent.session, "request/context")[0].data
    assert ctx.context_window == 200_000


async def test_max_tokens_from_options_and_unknown_model_default(
    rt: Runtime, server: SSEServer
) -> None:
    """AgentOptions.max_tokens is sent as is; an unknown model gets the fallback default."""
    m = Model(rt, server)
    try:
        agent = await m.agent(streamed(message(text(0, "a"))), max_tokens=321)
        await run(agent)
        assert m.body(0)["max_tokens"] == 321
        info = await m.adapter.resolve_model("anthropic", "other-model")
        assert info.defaults == {"max_tokens": 4096} and info.context_window is None
    finally:
        await m.adapter.aclose()


async def test_max_tokens_stop_drops_the_cut_off_tool_call(model: Model) -> None:
    """stop_reason max_tokens → finish max-tokens: the text is kept, the partial tool call
    is dropped and never runs; the turn ends max-tokens."""
    reply = message(
        text(0, "Let me "),
        tool_use(1, "toolu_cut", "lookup", '{"key": "x', stop=False),
        stop_reason="max_tokens",
    )
    agent = await model.agent(streamed(reply), tools=(lookup,))
    await run(agent)
    assert compact(agent.session)[-4:] == ["ctx", "msg", "S-1.1", "T-1:max-tokens"]
    assert events_of(agent.session, "tool/call") == []
    msg = events_of(agent.session, "assistant/message")[0].data
    assert msg.message.content == (TextBlock("Let me "),)
    assert msg.stream[-1].chunk.reason.kind == "max-tokens"
    assert len(model.server.requests) == 1


# --- failures ------------------------------------------------------------------------------


async def test_429_with_retry_after_is_a_retryable_failure(model: Model) -> None:
    """A 429 before the stream: one attempt, the turn ends error with RATE_LIMITED,
    retryable, provider_retry_after_ms from Retry-After and the request id; no key leaks."""
    agent = await model.agent(
        api_error(429, "rate_limit_error", "Too many requests", {"retry-after": "7"})
    )
    await run(agent)
    assert compact(agent.session)[3:] == [
        "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx", "attempt", "S-1.1", "T-1:error",
    ]  # fmt: skip
    assert last_reason(agent).error == LlmFailure(
        message="429 rate_limit_error: Too many requests",
        code="RATE_LIMITED",
        status=429,
        retryable=True,
        provider_retry_after_ms=7000,
        request_id="req_429",
    )
    attempt = events_of(agent.session, "assistant/attempt")[0]
    assert chunk_kinds(attempt) == ["finish"]
    assert len(model.server.requests) == 1  # the SDK does not retry on its own
    assert model.server.requests[0].headers["x-stainless-retry-count"] == "0"
    assert KEY not in log_text(agent)


@pytest.mark.parametrize(
    ("status", "error_type", "text_", "code", "retryable"),
    [
        (500, "api_error", "Internal server error", "SERVER", True),
        (529, "overloaded_error", "Overloaded", "OVERLOADED", True),
        (503, "api_error", "Unavailable", "SERVER", True),
        (401, "authentication_error", "invalid x-api-key", "AUTH", False),
        (400, "invalid_request_error", "messages: field required", "INVALID_REQUEST", False),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "CONTEXT_OVERFLOW",
            False,
        ),
    ],
    ids=["500", "529-overloaded", "503", "401-auth", "400-invalid", "400-overflow"],
)
async def test_http_errors_before_the_stream(
    model: Model, status: int, error_type: str, text_: str, code: str, retryable: bool
) -> None:
    """Status errors before any event: an error finish with the mapped code; terminal by
    default, one request."""
    agent = await model.agent(api_error(status, error_type, text_))
    await run(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    failure = last_reason(agent).error
    assert (failure.code, failure.status, failure.retryable) == (code, status, retryable)
    assert failure.request_id == f"req_{status}"
    assert text_ in failure.message
    assert len(model.server.requests) == 1


async def test_a_key_read_from_the_environment_is_redacted_from_failures(
    rt: Runtime, server: SSEServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key the SDK read from ``ANTHROPIC_API_KEY`` (none given to the adapter) never
    appears in a failure the model's turn records, nor does anything shaped like a key."""
    secret = "sk-ant-api03-envsecret1234567890"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)  # the SDK's endpoint, read by the SDK
    adapter = AnthropicAdapter()
    rt.llm.register_adapter(["anthropic"], adapter)
    server.add(api_error(401, "authentication_error", f"invalid x-api-key: {secret}"))
    agent = (
        await rt.agents.create(
            session_id="s-1", agent_options=AgentOptions(provider="anthropic", model=MODEL)
        )
    ).agent
    await run(agent)
    failure = last_reason(agent).error
    assert failure.code == "AUTH"
    assert "invalid x-api-key: ***" in failure.message
    assert secret not in failure.message and "envsecret" not in failure.message
    assert secret in server.requests[0].headers.get("authorization", "") + server.requests[
        0
    ].headers.get("x-api-key", "")
    await adapter.aclose()


async def test_connection_reset_mid_stream(model: Model) -> None:
    """The upstream resets the TCP connection after some text: the received chunks are kept
    in the attempt, which ends with a retryable CONNECTION error finish."""
    events = message(text(0, "Hel", "lo", " world"))
    agent = await model.agent(streamed(events, reset_after=5))
    await run(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    attempt = events_of(agent.session, "assistant/attempt")[0]
    assert chunk_kinds(attempt) == ["usage", "block-start", "text-delta", "text-delta", "finish"]
    failure = last_reason(agent).error
    assert (failure.code, failure.retryable, failure.status) == ("CONNECTION", True, None)
    assert failure.request_id == "req_stream"
    assert agent.session.derive_messages()[-1].role == "user"  # nothing on the surface


async def test_stream_that_ends_before_message_stop(model: Model) -> None:
    """A clean end of the body before message_stop is an incomplete response."""
    events = message(text(0, "partial"))[:-2]
    agent = await model.agent(streamed(events))
    await run(agent)
    failure = last_reason(agent).error
    assert (failure.code, failure.retryable) == ("INCOMPLETE_STREAM", True)
    assert "message_stop" in failure.message


async def test_malformed_sse_data(model: Model) -> None:
    """An event whose data is not JSON ends the attempt with BAD_RESPONSE."""
    events = [message_start(), ping(), b"event: content_block_start\ndata: {not json\n\n"]
    agent = await model.agent(streamed(events))
    await run(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    failure = last_reason(agent).error
    assert (failure.code, failure.retryable) == ("BAD_RESPONSE", False)
    assert failure.request_id == "req_stream"


async def test_sse_error_event_mid_stream(model: Model) -> None:
    """An SSE ``error`` event after some text: the partial text stays log-only in the
    attempt, the failure is OVERLOADED (retryable) from the event body, no HTTP status."""
    events = [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Half an"}),
        error_event("overloaded_error", "Overloaded"),
    ]
    agent = await model.agent(streamed(events))
    await run(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    attempt = events_of(agent.session, "assistant/attempt")[0]
    assert chunk_kinds(attempt) == ["usage", "block-start", "text-delta", "finish"]
    assert last_reason(agent).error == LlmFailure(
        message="overloaded_error: Overloaded",
        code="OVERLOADED",
        status=None,
        retryable=True,
        request_id="req_stream",
    )
    assert [type(x) for x in agent.session.derive_messages()][-1] is UserMessage


async def test_refusal_is_an_error_finish(model: Model) -> None:
    agent = await model.agent(streamed(message(text(0, "I can't"), stop_reason="refusal")))
    await run(agent)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    assert last_reason(agent).error.code == "REFUSAL"


# --- retry through agent/request-error --------------------------------------------------


async def test_429_then_success_through_install_retry(model: Model) -> None:
    """install_retry waits the provider's Retry-After (injected sleep) and retries: the
    failed attempt stays log-only and the retried request carries the same body."""
    from steerloop.llm.retry import install_retry

    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    install_retry(model.rt, sleep=sleep)
    agent = await model.agent(
        api_error(429, "rate_limit_error", "slow down", {"retry-after": "2"}),
        streamed([*message(text(0, "Hal"))[:4], error_event("overloaded_error", "Overloaded")]),
        streamed(message(text(0, "ok"))),
    )
    await run(agent)
    assert compact(agent.session)[3:] == [
        "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx", "attempt", "attempt", "msg",
        "S-1.1", "T-1:completed",
    ]  # fmt: skip
    assert sleeps[0] == 2.0 and len(sleeps) == 2
    assert model.body(0) == model.body(1) == model.body(2)
    assert agent.session.derive_messages()[-1].content == (TextBlock("ok"),)


# --- cancel ------------------------------------------------------------------------------


async def test_cancel_mid_stream_closes_the_connection(model: Model) -> None:
    """Cancel while the server holds the stream open after thinking and text: the HTTP
    connection is closed (the server sees it), the interrupted prefix is an interrupted
    assistant/message, the turn ends aborted, nothing is retried. The unsigned thinking of
    the prefix is not replayed in the next turn's request; the text is."""
    events = [
        message_start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "Hmm"}),
        block_start(1, {"type": "text", "text": ""}),  # a text block after unfinished thinking
        delta(1, {"type": "text_delta", "text": "Partial answer"}),
    ]
    got_text = frames_of(model.rt, "text-delta")
    agent = await model.agent(streamed(events, hang_after=len(events)))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(got_text.wait(), 5)
    agent.cancel(CancelCause.user())
    await settle(agent)
    await asyncio.wait_for(model.server.requests[0].client_closed.wait(), 5)

    assert compact(agent.session)[-3:] == ["msg(interrupted)", "S-1.1", "T-1:aborted"]
    assert last_reason(agent).reason.kind == "user"
    msg = events_of(agent.session, "assistant/message")[0].data
    assert msg.interrupted
    assert msg.message.content == (ReasoningBlock("Hmm"), TextBlock("Partial answer"))
    assert msg.usage == TokenUsage(input_tokens=10, output_tokens=1)
    assert len(model.server.requests) == 1
    assert events_of(agent.session, "assistant/attempt") == []
    derived = agent.session.derive_messages()
    assert isinstance(derived[-1], AssistantMessage)

    model.server.add(streamed(message(text(0, "fine"))))
    await run(agent, "u2")
    assert model.body(1)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "u1"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Partial answer"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "u2", "cache_control": {"type": "ephemeral"}}],
        },
    ]


async def test_cancel_with_no_safe_prefix_settles_an_attempt(model: Model) -> None:
    """A cancel while the stream waits for the next event and nothing model-visible has
    arrived yet: the close wakes the blocked read, the attempt settles log-only with the
    usage received so far, and the turn ends aborted."""
    started = frames_of(model.rt, "usage")
    agent = await model.agent(streamed([message_start()], hang_after=1))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(started.wait(), 5)
    agent.cancel(CancelCause.user())
    await settle(agent)
    await asyncio.wait_for(model.server.requests[0].client_closed.wait(), 5)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:aborted"]
    assert chunk_kinds(events_of(agent.session, "assistant/attempt")[0]) == ["usage"]


async def test_cancel_before_the_response_headers(rt: Runtime) -> None:
    """A server that reads the request and never answers: a cancel abandons the pending
    request at once (no timeout wait) and the server sees the connection close."""
    received = asyncio.Event()
    closed = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        received.set()
        while await reader.read(1024):
            pass
        closed.set()
        writer.close()

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    adapter = AnthropicAdapter(base_url=f"http://127.0.0.1:{port}", api_key=KEY)
    rt.llm.register_adapter(["anthropic"], adapter)
    try:
        handle = await rt.agents.create(
            session_id="s-1", agent_options=AgentOptions(provider="anthropic", model=MODEL)
        )
        agent = handle.agent
        agent.followup(user_message("u1"))
        await asyncio.wait_for(received.wait(), 5)
        agent.cancel(CancelCause.user())
        await settle(agent)
        await asyncio.wait_for(closed.wait(), 5)
        assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:aborted"]
        assert events_of(agent.session, "assistant/attempt")[0].data.stream == ()
    finally:
        await adapter.aclose()
        srv.close()
        await srv.wait_closed()


# --- history translation (pure) ----------------------------------------------------------


def test_history_translation_merges_user_turns_with_tool_results_first() -> None:
    """Tool results and a following user message form ONE user turn, tool_result blocks
    first; unsigned or foreign reasoning is not replayed; unparsable call arguments are sent
    as ``{}`` (their INVALID_ARGS result still pairs with the call)."""
    from steerloop.llm.anthropic import to_anthropic_messages
    from steerloop.messages import SystemMessage

    history = (
        SystemMessage(id="s", content=(TextBlock("be brief"),)),
        user_message("go", id="u"),
        AssistantMessage(
            id="a",
            content=(
                ReasoningBlock("cut before its signature"),
                ReasoningBlock("other provider", {"kind": "openai/encrypted", "data": "x"}),
                ToolCallBlock("t1", "lookup", '{"key": "x"}'),
                ToolCallBlock("t2", "lookup", "{not json"),
            ),
        ),
        ToolResultMessage(id="r1", call_id="t1", content=(TextBlock("value of x"),)),
        ToolResultMessage(
            id="r2", call_id="t2", content=(TextBlock("invalid arguments"),), is_error=True
        ),
        user_message("and hurry", id="u2"),
    )
    system, turns = to_anthropic_messages(history)
    assert system == "be brief"
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"key": "x"}},
                {"type": "tool_use", "id": "t2", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "value of x"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "invalid arguments"}],
                    "is_error": True,
                },
                {"type": "text", "text": "and hurry"},
            ],
        },
    ]
