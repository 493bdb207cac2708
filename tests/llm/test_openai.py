"""``OpenAIChatAdapter`` through the official SDK against a loopback SSE server.

Every test speaks the chat-completions wire format chunk by chunk over real HTTP; nothing
inside the SDK is patched. Runs go through a real ``Runtime`` and agent, and the log is
asserted in CONTRACTS.md notation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerloop import AgentOptions, CancelCause, Runtime, define_tool, user_message
from steerloop.llm import GenerateRequest, ModelInfo, TokenUsage, ToolSchema
from steerloop.llm.chunks import Finish, TextDelta
from steerloop.llm.openai import OpenAIChatAdapter
from steerloop.llm.retry import install_retry
from steerloop.messages import (
    AssistantMessage,
    MessageSource,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)
from steerloop.session._events import encode
from tests.conftest import compact, events_of, settle, within
from tests.llm.openai_wire import DONE, chunk, text_reply, tool_delta, usage
from tests.llm.sse_server import SSEServer, json_reply, sse, sse_reply

KEY = "sk-test"


# --- wire helpers -----------------------------------------------------------------------


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture
async def adapter(server: SSEServer) -> AsyncIterator[OpenAIChatAdapter]:
    a = OpenAIChatAdapter(base_url=server.url, api_key=KEY)
    try:
        yield a
    finally:
        await a.aclose()


async def echo(args: Any, exec: Any) -> str:
    return str(args["text"])


ECHO = define_tool(
    name="echo",
    description="Echo text",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    execute=echo,
    concurrency_safe=True,
)


async def run_agent(
    rt: Runtime,
    adapter: OpenAIChatAdapter,
    prompt: str = "u1",
    *,
    model: str = "deepseek-reasoner",
    max_tokens: int | None = None,
    tools: bool = False,
) -> Any:
    rt.llm.register_adapter(["deepseek"], adapter)
    if tools:
        rt.tools.register(ECHO)
    handle = await rt.agents.create(
        session_id="s-1",
        agent_options=AgentOptions(provider="deepseek", model=model, max_tokens=max_tokens),
    )
    agent = handle.agent
    agent.followup(user_message(prompt))
    await settle(agent)
    return agent


def turn_error(agent: Any) -> Any:
    (end,) = events_of(agent.session, "turn/end")
    return end.data.reason.error


# --- round trips ------------------------------------------------------------------------


async def test_tool_call_round_trip_with_deepseek_reasoning(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        sse_reply(
            [
                chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
                chunk({"reasoning_content": "need "}),
                chunk({"reasoning_content": "echo"}),
                tool_delta(0, id="call_1", name="echo", arguments=""),
                tool_delta(0, arguments='{"te'),
                tool_delta(0, arguments='xt": "hi"}'),
                chunk({}, "tool_calls"),
                usage(100, 30, cached=60, reasoning=20),
                DONE,
            ]
        ),
        sse_reply(
            [
                chunk({"role": "assistant", "reasoning_content": "got it"}),
                chunk({"content": "echoed "}),
                chunk({"content": "hi"}),
                chunk({}, "stop"),
                usage(140, 8),
                DONE,
            ]
        ),
    )
    agent = await run_agent(rt, adapter, tools=True)

    assert compact(agent.session) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "S+1.1",
        "sys",
        "user(u1)",
        "hdr(initial)",
        "ctx",
        "msg",
        "call(call_1)",
        "result(call_1)",
        "S-1.1",
        "S+1.2",
        "msg",
        "S-1.2",
        "T-1:completed",
    ]
    first, second = events_of(agent.session, "assistant/message")
    assert first.data.message.content == (
        ReasoningBlock("need echo"),
        ToolCallBlock("call_1", "echo", '{"text": "hi"}'),
    )
    assert first.data.usage == TokenUsage(
        input_tokens=40, output_tokens=10, cache_read_tokens=60, reasoning_tokens=20
    )
    assert second.data.message.content == (ReasoningBlock("got it"), TextBlock("echoed hi"))
    (result,) = events_of(agent.session, "tool/result")
    assert result.data.message.content == (TextBlock("hi"),)

    # What went over the wire.
    assert len(server.requests) == 2
    req1, req2 = (r.json() for r in server.requests)
    assert server.requests[0].path == "/chat/completions"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.requests[0].headers["x-stainless-retry-count"] == "0"
    assert req1["model"] == "deepseek-reasoner"
    assert req1["stream"] is True
    assert req1["stream_options"] == {"include_usage": True}
    assert req1["messages"] == [{"role": "user", "content": "u1"}]
    assert req1["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Echo text",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            },
        }
    ]
    assert "max_tokens" not in req1
    # The tool loop's second request carries exactly what DeepSeek requires: the assistant
    # turn with its tool calls and reasoning_content, then the matching tool message.
    assert req2["messages"] == [
        {"role": "user", "content": "u1"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "need echo",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text": "hi"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "hi"},
    ]


async def test_parallel_tool_calls_by_wire_index(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        sse_reply(
            [
                chunk({"content": "two calls"}),
                tool_delta(0, id="a", name="echo", arguments='{"text":'),
                tool_delta(1, id="b", name="echo", arguments='{"text": "B"}'),
                tool_delta(0, arguments=' "A"}'),
                chunk({}, "tool_calls"),
                DONE,
            ]
        ),
        text_reply("ok"),
    )
    agent = await run_agent(rt, adapter, tools=True)
    first = events_of(agent.session, "assistant/message")[0].data.message
    assert first.content == (
        TextBlock("two calls"),
        ToolCallBlock("a", "echo", '{"text": "A"}'),
        ToolCallBlock("b", "echo", '{"text": "B"}'),
    )
    assert compact(agent.session, only=["call", "result", "T-"]) == [
        "call(a)",
        "call(b)",
        "result(a)",
        "result(b)",
        "T-1:completed",
    ]
    messages = server.requests[1].json()["messages"]
    assert messages[1]["content"] == "two calls"
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["a", "b"]
    assert "reasoning_content" not in messages[1]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
    ]


async def test_usage_with_deepseek_cache_fields(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        sse_reply(
            [
                chunk({"content": "hi"}),
                chunk({}, "stop"),
                chunk(
                    usage={
                        "prompt_tokens": 50,
                        "completion_tokens": 5,
                        "total_tokens": 55,
                        "prompt_cache_hit_tokens": 32,
                        "prompt_cache_miss_tokens": 18,
                    }
                ),
                DONE,
            ]
        )
    )
    agent = await run_agent(rt, adapter, model="deepseek-chat")
    (msg,) = events_of(agent.session, "assistant/message")
    assert msg.data.usage == TokenUsage(input_tokens=18, output_tokens=5, cache_read_tokens=32)
    kinds = [r.chunk.kind for r in msg.data.stream]
    assert kinds == ["block-start", "text-delta", "block-end", "usage", "finish"]
    (ctx,) = events_of(agent.session, "request/context")
    assert ctx.data.context_window == 128_000


async def test_length_finish_is_max_tokens(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        sse_reply(
            [
                chunk({"content": "cut o"}),
                tool_delta(0, id="c1", name="echo", arguments='{"te'),
                chunk({}, "length"),
                DONE,
            ]
        )
    )
    agent = await run_agent(rt, adapter, max_tokens=5, tools=True)
    assert compact(agent.session)[-4:] == ["ctx", "msg", "S-1.1", "T-1:max-tokens"]
    (msg,) = events_of(agent.session, "assistant/message")
    assert msg.data.message.content == (TextBlock("cut o"),)
    assert server.requests[0].json()["max_tokens"] == 5


async def test_content_filter_is_an_error_finish(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(sse_reply([chunk({"content": "no"}), chunk({}, "content_filter"), DONE]))
    agent = await run_agent(rt, adapter)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    failure = turn_error(agent)
    assert failure.code == "CONTENT_FILTER"
    assert failure.retryable is False


# --- failures ---------------------------------------------------------------------------


async def test_server_error_before_the_stream(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        json_reply(
            500,
            {"error": {"message": "upstream exploded", "type": "server_error"}},
            {"x-request-id": "req-500"},
        )
    )
    agent = await run_agent(rt, adapter)
    assert compact(agent.session) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "S+1.1",
        "sys",
        "user(u1)",
        "hdr(initial)",
        "ctx",
        "attempt",
        "S-1.1",
        "T-1:error",
    ]
    failure = turn_error(agent)
    assert failure.code == "SERVER"
    assert failure.status == 500
    assert failure.retryable is True
    assert failure.request_id == "req-500"
    assert "upstream exploded" in failure.message
    (attempt,) = events_of(agent.session, "assistant/attempt")
    assert [r.chunk.reason.kind for r in attempt.data.stream] == ["error"]
    assert len(server.requests) == 1  # SDK retries are off


@pytest.mark.parametrize(
    ("status", "body", "code", "retryable"),
    [
        (400, {"error": {"message": "bad field", "code": "invalid"}}, "INVALID_REQUEST", False),
        (
            400,
            {"error": {"message": "too long", "code": "context_length_exceeded"}},
            "CONTEXT_OVERFLOW",
            False,
        ),
        (
            400,
            {"error": {"message": "This model's maximum context length is 131072 tokens"}},
            "CONTEXT_OVERFLOW",
            False,
        ),
        (401, {"error": {"message": "Incorrect API key provided: sk-test"}}, "AUTH", False),
        (402, {"error": {"message": "Insufficient Balance"}}, "QUOTA", False),
        (404, {"error": {"message": "model not found"}}, "NOT_FOUND", False),
        (408, {"error": {"message": "timeout"}}, "TIMEOUT", True),
        (409, {"error": {"message": "conflict"}}, "CONFLICT", True),
        (429, {"error": {"message": "slow", "code": "insufficient_quota"}}, "QUOTA", False),
        (503, {"error": {"message": "overloaded"}}, "SERVER", True),
    ],
)
async def test_status_errors_map_to_failures(
    rt: Runtime,
    server: SSEServer,
    adapter: OpenAIChatAdapter,
    status: int,
    body: Any,
    code: str,
    retryable: bool,
) -> None:
    server.add(json_reply(status, body))
    agent = await run_agent(rt, adapter)
    failure = turn_error(agent)
    assert (failure.code, failure.status, failure.retryable) == (code, status, retryable)
    assert KEY not in failure.message
    assert KEY not in json.dumps([e.to_json() for e in agent.session.events])


async def test_connection_reset_mid_stream(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        sse_reply(
            [chunk({"content": "par"}), chunk({"content": "tial"}), chunk({}, "stop")],
            reset_after=2,
        )
    )
    agent = await run_agent(rt, adapter)
    assert compact(agent.session)[-4:] == ["ctx", "attempt", "S-1.1", "T-1:error"]
    failure = turn_error(agent)
    assert failure.code == "CONNECTION"
    assert failure.retryable is True
    (attempt,) = events_of(agent.session, "assistant/attempt")
    kinds = [r.chunk.kind for r in attempt.data.stream]
    assert kinds == ["block-start", "text-delta", "text-delta", "finish"]
    # The partial reply never reaches the surface.
    assert [m.role for m in agent.session.derive_messages()] == ["user"]


async def test_malformed_sse_is_an_error_finish(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(sse_reply([chunk({"content": "ok"}), b"data: {not json\n\n", DONE]))
    agent = await run_agent(rt, adapter)
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    failure = turn_error(agent)
    assert failure.code == "BAD_RESPONSE"
    assert failure.retryable is False


async def test_error_event_inside_the_stream(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(
        sse_reply(
            [
                chunk({"content": "ok"}),
                sse({"error": {"message": "backend overloaded", "type": "server_error"}}),
            ]
        )
    )
    agent = await run_agent(rt, adapter)
    failure = turn_error(agent)
    assert failure.code == "SERVER"
    assert failure.retryable is True
    assert "backend overloaded" in failure.message


async def test_stream_without_finish_reason_is_incomplete(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(sse_reply([chunk({"content": "trunc"})]))
    agent = await run_agent(rt, adapter)
    assert turn_error(agent).code == "INCOMPLETE_STREAM"


async def test_unreachable_server_is_a_connection_failure(rt: Runtime) -> None:
    srv = await SSEServer.start()
    url = srv.url
    await srv.stop()
    adapter = OpenAIChatAdapter(base_url=url, api_key=KEY)
    try:
        agent = await run_agent(rt, adapter)
    finally:
        await adapter.aclose()
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    assert turn_error(agent).code == "CONNECTION"


# --- retry over the wire ----------------------------------------------------------------


async def test_rate_limit_with_retry_after_then_success(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    notices: list[Any] = []
    install_retry(rt, sleep=sleep)
    rt.hooks.on("llm/retry", notices.append)
    server.add(
        json_reply(
            429,
            {"error": {"message": "Rate limit reached", "type": "requests"}},
            {"retry-after": "2", "x-request-id": "req-429"},
        ),
        text_reply("fine"),
    )
    agent = await run_agent(rt, adapter)
    assert compact(agent.session, only=["hdr", "ctx", "attempt", "msg", "T-"]) == [
        "hdr(initial)",
        "ctx",
        "attempt",
        "msg",
        "T-1:completed",
    ]
    assert slept == [2.0]
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    (notice,) = notices
    assert notice.attempt == 2
    assert notice.delay_ms == 2000
    assert notice.failure.code == "RATE_LIMITED"
    assert notice.failure.provider_retry_after_ms == 2000
    assert notice.failure.request_id == "req-429"


async def test_retry_after_ms_header(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    install_retry(rt, sleep=sleep)
    server.add(
        json_reply(503, {"error": {"message": "busy"}}, {"retry-after-ms": "1500"}),
        text_reply("fine"),
    )
    await run_agent(rt, adapter)
    assert slept == [1.5]


# --- cancellation -----------------------------------------------------------------------


async def test_cancel_mid_stream_closes_the_connection(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    install_retry(rt)
    server.add(
        sse_reply([chunk({"reasoning_content": "hmm"}), chunk({"content": "Hel"})], hang_after=2)
    )
    rt.llm.register_adapter(["deepseek"], adapter)
    seen = asyncio.Event()

    def on_frame(payload: Any) -> None:
        if payload.frame.kind == "chunk" and payload.frame.chunk.kind == "text-delta":
            seen.set()

    rt.hooks.on("agent/assistant-stream", on_frame)
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="deepseek", model="deepseek-chat")
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await within(seen.wait())
    agent.cancel(CancelCause.user())
    await settle(agent)
    await within(server.requests[0].client_closed.wait(), 2.0)

    assert compact(agent.session)[-4:] == ["ctx", "msg(interrupted)", "S-1.1", "T-1:aborted"]
    (msg,) = events_of(agent.session, "assistant/message")
    assert msg.data.interrupted is True
    assert msg.data.message.content == (ReasoningBlock("hmm"), TextBlock("Hel"))
    assert len(server.requests) == 1  # nothing retried
    assert not events_of(agent.session, "assistant/attempt")


async def test_cancel_before_the_first_chunk(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    never, arrived = asyncio.Event(), asyncio.Event()

    def reply(request: Any) -> Any:
        arrived.set()
        return sse_reply([chunk({"content": "late"}), DONE], gates={0: never})

    server.add(reply)
    rt.llm.register_adapter(["deepseek"], adapter)
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="deepseek", model="deepseek-chat")
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await within(arrived.wait())
    agent.cancel(CancelCause.user())
    await settle(agent)
    await within(server.requests[0].client_closed.wait(), 2.0)
    assert compact(agent.session)[-4:] == ["ctx", "attempt", "S-1.1", "T-1:aborted"]


async def test_abort_between_chunks_releases_the_response(
    server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    from steerloop import AbortController

    server.add(sse_reply([chunk({"content": "a"}), chunk({"content": "b"})], hang_after=2))
    ctrl = AbortController()
    request = GenerateRequest(
        provider="deepseek",
        model="deepseek-chat",
        messages=(user_message("u1"),),
        signal=ctrl.signal,
    )
    iterator = aiter(adapter.stream(request))
    chunks = [await anext(iterator), await anext(iterator)]
    assert isinstance(chunks[1], TextDelta)
    # The consumer is paused between chunks: the abort alone must release the response.
    ctrl.abort("stop")
    await within(server.requests[0].client_closed.wait(), 2.0)
    rest = [c async for c in iterator]
    assert len(rest) == 1 and isinstance(rest[0], Finish)
    assert rest[0].reason.kind == "aborted"


# --- mapping details --------------------------------------------------------------------


def _request(messages: tuple[Any, ...], **kwargs: Any) -> GenerateRequest:
    return GenerateRequest(
        provider="deepseek", model="deepseek-reasoner", messages=messages, **kwargs
    )


def _assistant(*blocks: Any, provider: str = "deepseek") -> AssistantMessage:
    return AssistantMessage(
        id="a", content=blocks, source=MessageSource(kind="model", provider=provider, model="m")
    )


async def test_history_mapping(adapter: OpenAIChatAdapter) -> None:
    history = (
        SystemMessage(id="s", content=(TextBlock("be terse"),)),
        user_message("q1"),
        _assistant(ReasoningBlock("old thought"), TextBlock("a1")),
        user_message([TextBlock("q2"), TextBlock("more")]),
        _assistant(ReasoningBlock("plan"), ToolCallBlock("c1", "echo", "{}")),
        ToolResultMessage(id="t", call_id="c1", content=(TextBlock("r1"),), is_error=True),
        _assistant(ReasoningBlock("foreign"), ToolCallBlock("c2", "echo", "{}"), provider="x"),
        ToolResultMessage(id="t2", call_id="c2", content=(TextBlock("r2"),)),
    )
    tools = (ToolSchema(name="echo", description="d", parameters={"type": "object"}),)
    body = adapter.request_body(_request(history, tools=tools, reasoning_effort="high"))
    assert body["messages"] == [
        {"role": "system", "content": "be terse"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},  # an earlier turn's reasoning is dropped
        {"role": "user", "content": "q2\n\nmore"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "plan",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
    ]
    assert body["reasoning_effort"] == "high"


async def test_reasoning_replay_never(server: SSEServer) -> None:
    adapter = OpenAIChatAdapter(base_url=server.url, api_key=KEY, reasoning_replay="never")
    try:
        body = adapter.request_body(
            _request(
                (user_message("q"), _assistant(ReasoningBlock("p"), ToolCallBlock("c", "f", "")))
            )
        )
    finally:
        await adapter.aclose()
    assert "reasoning_content" not in body["messages"][1]


async def test_max_tokens_parameter_by_model(adapter: OpenAIChatAdapter) -> None:
    msgs = (user_message("q"),)
    assert adapter.request_body(_request(msgs, max_tokens=7))["max_tokens"] == 7
    o3 = GenerateRequest(provider="openai", model="o3-mini", messages=msgs, max_tokens=7)
    body = adapter.request_body(o3)
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body


async def test_resolve_model(server: SSEServer) -> None:
    adapter = OpenAIChatAdapter(
        base_url=server.url, api_key=KEY, models={"my-local": ModelInfo(context_window=32_768)}
    )
    try:
        assert (await adapter.resolve_model("deepseek", "deepseek-reasoner")).context_window == (
            128_000
        )
        dated = await adapter.resolve_model("openai", "gpt-4o-2024-08-06")
        assert (dated.context_window, dated.max_output_tokens) == (128_000, 16_384)
        mini = await adapter.resolve_model("openai", "gpt-4.1-mini")
        assert mini.context_window == 1_047_576
        assert (await adapter.resolve_model("local", "my-local")).context_window == 32_768
        unknown = await adapter.resolve_model("local", "qwen3:8b")
        assert (unknown.context_window, unknown.max_output_tokens) == (None, None)
    finally:
        await adapter.aclose()


async def test_key_is_not_in_repr_or_log(
    rt: Runtime, server: SSEServer, adapter: OpenAIChatAdapter
) -> None:
    server.add(text_reply("hello"))
    agent = await run_agent(rt, adapter)
    assert KEY not in repr(adapter)
    assert KEY not in json.dumps(encode(list(agent.session.events)))
