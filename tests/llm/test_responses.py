"""``OpenAIResponsesAdapter`` through the official SDK against a loopback Responses server.

The server speaks the documented Responses event stream event by event (``responses_wire``)
and records every request body, so the tests assert both the chunks / the log and exactly
what went over the wire. Nothing inside the SDK is patched.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import weakref
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from steerloop import AgentOptions, CancelCause, Runtime, define_tool, user_message
from steerloop.llm import CallConfig, GenerateRequest, LlmFailure, TokenUsage, ToolSchema
from steerloop.llm.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from steerloop.llm.openai import OpenAIResponsesAdapter
from steerloop.messages import (
    AssistantMessage,
    MessageSource,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)

from ..conftest import compact, events_of, settle
from .responses_wire import Wire, reply
from .sse_server import SSEServer, json_reply

KEY = "sk-resp-0123456789abcdefSECRET"
MODEL = "o4-mini"
ENC_1 = "gAAAAABo-encrypted-one=="
ENC_2 = "gAAAAABo-encrypted-two=="
INCLUDE = ["reasoning.encrypted_content"]


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

LOOKUP_TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Look a key up",
    "parameters": LookupArgs.model_json_schema(),
    "strict": False,
}


def adapter_at(server: SSEServer, **kwargs: Any) -> OpenAIResponsesAdapter:
    return OpenAIResponsesAdapter(base_url=server.url, api_key=KEY, **kwargs)


async def agent_on(
    rt: Runtime, adapter: OpenAIResponsesAdapter, *, resume: bool = False, **options: Any
) -> Any:
    rt.llm.register_adapter(["openai"], adapter)

    def setup(scope: Any) -> None:
        scope.tools.register(lookup)

    agent_options = AgentOptions(provider="openai", model=MODEL, **options)
    if resume:
        handle = await rt.agents.resume(
            resume_session_id="s-1", agent_options=agent_options, setup=setup
        )
    else:
        handle = await rt.agents.create(session_id="s-1", agent_options=agent_options, setup=setup)
    return handle.agent


async def run(agent: Any, text: str) -> None:
    agent.followup(user_message(text))
    # Bounded, but generous: a first request in a process imports the SDK's Responses types.
    await settle(agent, 30)


def turn_end(agent: Any) -> Any:
    return events_of(agent.session, "turn/end")[-1].data.reason


async def collect(adapter: OpenAIResponsesAdapter, request: GenerateRequest) -> list[StreamChunk]:
    return [chunk async for chunk in adapter.stream(request)]


async def stream_once(server: SSEServer, request: GenerateRequest) -> list[StreamChunk]:
    """Stream ``request`` through a fresh adapter on ``server``, closed afterwards."""
    adapter = adapter_at(server)
    try:
        return await collect(adapter, request)
    finally:
        await adapter.aclose()


def request(**fields: Any) -> GenerateRequest:
    base: dict[str, Any] = {
        "provider": "openai",
        "model": MODEL,
        "messages": (UserMessage(id="m1", content=(TextBlock("u1"),)),),
    }
    return GenerateRequest(**{**base, **fields})


def reasoning_item(id: str, summary: str, encrypted: str) -> dict[str, Any]:
    return {
        "id": id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": encrypted,
    }


def step_with_call(
    wire: Wire, rs_id: str, summary: str, enc: str, fc_id: str, call_id: str, key: str
) -> Any:
    events = wire.created()
    events += wire.reasoning(0, [[summary]], id=rs_id, encrypted=enc)
    events += wire.function_call(1, "lookup", ['{"key": ', f'"{key}"}}'], id=fc_id, call_id=call_id)
    events.append(wire.completed(Wire.usage(100, 40, cached=64, reasoning=30)))
    return reply(events)


def text_step(wire: Wire, text: str) -> Any:
    events = wire.created() + wire.message(0, [text])
    events.append(wire.completed(Wire.usage(150, 5)))
    return reply(events)


# --- the stream ---------------------------------------------------------------------------


async def test_events_become_chunks(server: SSEServer) -> None:
    """Reasoning summary parts (one block, paragraphs), output text, a function call's
    arguments by item, usage with cached and reasoning tokens split out, ``tool-calls``."""
    wire = Wire()
    events = wire.created()
    events += wire.reasoning(0, [["Plan", " it."], ["Then act."]], id="rs_1", encrypted=ENC_1)
    events += wire.message(1, ["Let me ", "check."])
    events += wire.function_call(2, "lookup", ['{"key"', ': "a"}'], id="fc_1", call_id="call_1")
    events.append(wire.completed(Wire.usage(1000, 300, cached=600, reasoning=200)))
    server.add(reply(events))
    chunks = await stream_once(server, request())
    item: dict[str, Any] = reasoning_item("rs_1", "Plan it.", ENC_1)
    state = {"kind": "openai/reasoning", "item": item}
    item["summary"] = [
        {"type": "summary_text", "text": "Plan it."},
        {"type": "summary_text", "text": "Then act."},
    ]
    assert chunks == [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="Plan"),
        ReasoningDelta(index=0, text=" it."),
        ReasoningDelta(index=0, text="\n\n"),
        ReasoningDelta(index=0, text="Then act."),
        BlockEnd(index=0, block=ReasoningBlock("Plan it.\n\nThen act.", state)),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="Let me "),
        TextDelta(index=1, text="check."),
        BlockEnd(index=1, block=TextBlock("Let me check.")),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="call_1", name="lookup", arguments_delta=""),
        ToolCallDelta(index=2, id="call_1", arguments_delta='{"key"'),
        ToolCallDelta(index=2, id="call_1", arguments_delta=': "a"}'),
        BlockEnd(index=2, block=ToolCallBlock("call_1", "lookup", '{"key": "a"}')),
        UsageChunk(
            usage=TokenUsage(
                input_tokens=400, output_tokens=100, cache_read_tokens=600, reasoning_tokens=200
            )
        ),
        Finish(reason=FinishReason(kind="tool-calls")),
    ]
    # The replay state survives JSON (the session codec stores it as JSON).
    assert json.loads(json.dumps(state)) == state


async def test_request_body_exactly(server: SSEServer) -> None:
    """Stateless (``store: false``, encrypted reasoning included, no previous_response_id),
    ``prompt_cache_key`` = the session id, ``max_output_tokens``, ``reasoning.effort`` with a
    summary, system messages in place, and ``CallConfig.extra`` (a hosted tool, ``text``)
    carried verbatim over the adapter's own fields."""
    wire = Wire()
    server.add(text_step(wire, "ok"))
    adapter = adapter_at(server)
    extra = {
        "tools": [LOOKUP_TOOL, {"type": "web_search"}],
        "text": {"format": {"type": "json_object"}},
        "service_tier": "flex",
    }
    req = request(
        messages=(
            SystemMessage(id="s", content=(TextBlock("be brief"),)),
            UserMessage(id="m1", content=(TextBlock("u1"),)),
        ),
        tools=(ToolSchema(name="lookup", description="Look a key up", parameters={}),),
        max_tokens=2048,
        reasoning_effort="high",
        session_id="sess-42",
        config=CallConfig(temperature=0.5, extra=extra),
    )
    try:
        chunks = await collect(adapter, req)
    finally:
        await adapter.aclose()
    assert chunks[-1] == Finish(reason=FinishReason(kind="stop"))
    (received,) = server.requests
    assert received.path == "/responses"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.json() == {
        "model": MODEL,
        "input": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "u1"},
        ],
        "stream": True,
        "store": False,
        "include": INCLUDE,
        "tools": [LOOKUP_TOOL, {"type": "web_search"}],
        "prompt_cache_key": "sess-42",
        "max_output_tokens": 2048,
        "reasoning": {"effort": "high", "summary": "auto"},
        "temperature": 0.5,
        "text": {"format": {"type": "json_object"}},
        "service_tier": "flex",
    }


async def test_a_chat_model_gets_no_reasoning_field(server: SSEServer) -> None:
    """A model outside the reasoning family with no ``reasoning_effort`` is sent no
    ``reasoning`` (such models refuse it); ``reasoning_summary=None`` asks for no summary."""
    wire = Wire(model="gpt-4.1")
    server.add(text_step(wire, "a"), text_step(Wire(), "b"))
    adapter = adapter_at(server)
    quiet = adapter_at(server, reasoning_summary=None)
    try:
        await collect(adapter, request(model="gpt-4.1"))
        await collect(quiet, request())
    finally:
        await adapter.aclose()
        await quiet.aclose()
    assert "reasoning" not in server.requests[0].json()
    assert "reasoning" not in server.requests[1].json()


async def test_incomplete_for_max_output_tokens_is_max_tokens(server: SSEServer) -> None:
    wire = Wire()
    events = wire.created() + wire.reasoning(0, [["Long"]], id="rs_1", encrypted=ENC_1)
    events.append(wire.incomplete("max_output_tokens", Wire.usage(10, 64, reasoning=64)))
    server.add(reply(events))
    chunks = await stream_once(server, request(max_tokens=64))
    assert chunks[-2:] == [
        UsageChunk(usage=TokenUsage(input_tokens=10, output_tokens=0, cache_read_tokens=0,
                                    reasoning_tokens=64)),
        Finish(reason=FinishReason(kind="max-tokens")),
    ]  # fmt: skip


async def test_incomplete_for_content_filter_is_an_error(server: SSEServer) -> None:
    wire = Wire()
    events = [*wire.created(), wire.incomplete("content_filter", Wire.usage(10, 1))]
    server.add(reply(events))
    chunks = await stream_once(server, request())
    failure = chunks[-1].reason.failure  # type: ignore[union-attr]
    assert failure is not None
    assert (failure.code, failure.retryable, failure.request_id) == (
        "CONTENT_FILTER",
        False,
        "req_123",
    )


async def test_refusal_is_an_error_finish(server: SSEServer) -> None:
    """A refusal content part ends the stream as an error ``REFUSAL`` carrying the words;
    they are not streamed as answer text."""
    wire = Wire()
    events = wire.created() + wire.message(0, ["I can't ", "help with that."], refusal=True)
    events.append(wire.completed(Wire.usage(10, 5)))
    server.add(reply(events))
    chunks = await stream_once(server, request())
    assert [c for c in chunks if isinstance(c, TextDelta)] == []
    assert chunks[-1] == Finish(
        reason=FinishReason(
            kind="error",
            failure=LlmFailure(
                message="the model refused to answer: I can't help with that.",
                code="REFUSAL",
                retryable=False,
                request_id="req_123",
            ),
        )
    )


@pytest.mark.parametrize(
    ("terminal", "code", "retryable"),
    [
        ("failed:server_error", "SERVER", True),
        ("failed:rate_limit_exceeded", "RATE_LIMITED", True),
        ("error:context_length_exceeded", "CONTEXT_OVERFLOW", False),
        ("error:invalid_prompt", "SERVER", True),
    ],
)
async def test_error_mid_stream_goes_through_the_failure_table(
    rt: Runtime, server: SSEServer, terminal: str, code: str, retryable: bool
) -> None:
    """``response.failed`` and an ``error`` event after text arrived: an error finish
    classified by the shared table, the request id attached, the partial text kept only as
    a log-only attempt; no retry without a policy."""
    wire = Wire()
    kind, _, error_code = terminal.partition(":")
    events = wire.created() + wire.message(0, ["Half"])
    message = f"it broke ({error_code}) {KEY}"
    events.append(
        wire.failed(error_code, message) if kind == "failed" else wire.error(error_code, message)
    )
    adapter = adapter_at(server)
    agent = await agent_on(rt, adapter)
    server.add(reply(events))
    await run(agent, "u1")
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    failure = turn_end(agent).error
    assert failure == LlmFailure(
        message=f"stream error: it broke ({error_code}) ***",
        code=code,
        retryable=retryable,
        request_id="req_123",
    )
    assert len(server.requests) == 1


async def test_http_error_before_the_stream(server: SSEServer) -> None:
    """A 429 answer: ``RATE_LIMITED`` with the server's wait, the key scrubbed."""
    server.add(
        json_reply(
            429,
            {
                "error": {
                    "message": f"Slow down {KEY}",
                    "type": "requests",
                    "code": "rate_limit_exceeded",
                }
            },
            headers={"retry-after-ms": "1500", "x-request-id": "req_9"},
        )
    )
    chunks = await stream_once(server, request())
    assert chunks == [
        Finish(
            reason=FinishReason(
                kind="error",
                failure=LlmFailure(
                    message="HTTP 429: Slow down ***",
                    code="RATE_LIMITED",
                    status=429,
                    retryable=True,
                    provider_retry_after_ms=1500,
                    request_id="req_9",
                ),
            )
        )
    ]


async def test_stream_cut_before_the_terminal_event(server: SSEServer) -> None:
    wire = Wire()
    server.add(reply(wire.created() + wire.message(0, ["Hal"])))
    chunks = await stream_once(server, request())
    assert chunks[-1].reason.failure.code == "INCOMPLETE_STREAM"  # type: ignore[union-attr]


async def test_hosted_tool_items_are_skipped(server: SSEServer) -> None:
    """An output item of a hosted tool (web search) is not a block; its neighbours keep
    consecutive block indices."""
    wire = Wire()
    events = wire.created()
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed"}
    events.append(wire.event("response.output_item.added", output_index=0, item=search))
    events.append(wire.event("response.output_item.done", output_index=0, item=search))
    events += wire.message(1, ["found"])
    events.append(wire.completed(Wire.usage(5, 1)))
    server.add(reply(events))
    chunks = await stream_once(server, request())
    assert chunks[:3] == [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="found"),
        BlockEnd(index=0, block=TextBlock("found")),
    ]
    assert chunks[-1] == Finish(reason=FinishReason(kind="stop"))


# --- replay: resume in a fresh runtime ------------------------------------------------------


async def test_reasoning_tool_loop_replayed_after_resume_in_a_fresh_runtime(
    tmp_path: Path,
) -> None:
    """A reasoning model's two-step tool loop on a SQLite session file; the runtime is
    closed and a fresh runtime with a fresh adapter resumes the session. Every request
    carries the encrypted reasoning items of earlier steps, in stream order before their
    function calls, and the request after the resume carries them too (read back from the
    file), never ``previous_response_id``."""
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    server = await SSEServer.start()
    try:
        # async with: a run that times out under load still closes the store's writer
        async with await Runtime.open(store=url) as rt:
            adapter = adapter_at(server)
            agent = await agent_on(rt, adapter, reasoning_effort="medium")
            server.add(
                step_with_call(Wire("resp_1"), "rs_1", "Need a.", ENC_1, "fc_1", "call_1", "a"),
                step_with_call(Wire("resp_2"), "rs_2", "Need b.", ENC_2, "fc_2", "call_2", "b"),
                text_step(Wire("resp_3"), "a and b"),
            )
            await run(agent, "u1")
            assert turn_end(agent).kind == "completed"

        async with await Runtime.open(store=url) as fresh:
            resumed = await agent_on(
                fresh, adapter_at(server), resume=True, reasoning_effort="medium"
            )
            server.add(text_step(Wire("resp_4"), "again"))
            await run(resumed, "u2")
            assert turn_end(resumed).kind == "completed"
    finally:
        await server.stop()

    def call(call_id: str, key: str) -> dict[str, Any]:
        args = f'{{"key": "{key}"}}'
        return {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": args}

    def output(call_id: str, key: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": f"value of {key}"}

    turn_1 = [
        {"role": "user", "content": "u1"},
        reasoning_item("rs_1", "Need a.", ENC_1),
        call("call_1", "a"),
        output("call_1", "a"),
        reasoning_item("rs_2", "Need b.", ENC_2),
        call("call_2", "b"),
        output("call_2", "b"),
    ]
    inputs = [r.json()["input"] for r in server.requests]
    assert inputs == [
        turn_1[:1],
        turn_1[:4],
        turn_1,
        [*turn_1, {"role": "assistant", "content": "a and b"}, {"role": "user", "content": "u2"}],
    ]
    for body in (r.json() for r in server.requests):
        assert body["store"] is False and body["include"] == INCLUDE
        assert body["prompt_cache_key"] == "s-1"
        assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
        assert body["tools"] == [LOOKUP_TOOL]
        assert "previous_response_id" not in body


# --- cancel -------------------------------------------------------------------------------


async def test_cancel_mid_reasoning_closes_the_stream(rt: Runtime, server: SSEServer) -> None:
    """Cancel while the server holds the stream open inside a reasoning summary: the HTTP
    connection is closed (the server sees it), the turn ends aborted, the unfinished
    reasoning (no encrypted item yet) is kept in the log but never sent back."""
    wire = Wire()
    events = wire.created()
    events.append(
        wire.event(
            "response.output_item.added",
            output_index=0,
            item={"id": "rs_1", "type": "reasoning", "summary": []},
        )
    )
    common = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
    part = {"type": "summary_text", "text": ""}
    events.append(wire.event("response.reasoning_summary_part.added", **common, part=part))
    events.append(wire.event("response.reasoning_summary_text.delta", **common, delta="Thinking"))
    seen = asyncio.Event()

    def on_frame(payload: Any) -> None:
        frame = payload.frame
        if frame.kind == "chunk" and getattr(frame.chunk, "kind", None) == "reasoning-delta":
            seen.set()

    rt.hooks.on("agent/assistant-stream", on_frame)
    adapter = adapter_at(server)
    agent = await agent_on(rt, adapter)
    server.add(reply(events, hang_after=len(events)))
    agent.followup(user_message("u1"))
    await asyncio.wait_for(seen.wait(), 30)
    agent.cancel(CancelCause.user())
    await settle(agent, 30)
    await asyncio.wait_for(server.requests[0].client_closed.wait(), 5)
    assert compact(agent.session)[-3:] == ["msg(interrupted)", "S-1.1", "T-1:aborted"]
    msg = events_of(agent.session, "assistant/message")[0].data
    assert msg.message.content == (ReasoningBlock("Thinking"),)

    server.add(text_step(Wire("resp_2"), "fine"))
    await run(agent, "u2")
    assert server.requests[1].json()["input"] == [
        {"role": "user", "content": "u1"},
        {"role": "user", "content": "u2"},
    ]
    assert len(server.requests) == 2


# --- hostile stored state ------------------------------------------------------------------


def test_only_intact_reasoning_items_of_this_provider_are_replayed() -> None:
    """Stored rows are untrusted: a reasoning block whose replay state is not an intact
    Responses item, or that another provider produced (a fork to another provider), is
    left out instead of being sent as a malformed item; an intact one goes back with the
    fields of a reasoning input item only."""
    adapter = OpenAIResponsesAdapter(base_url="http://127.0.0.1:9", api_key=KEY)
    good = {
        "kind": "openai/reasoning",
        "item": {**reasoning_item("rs_1", "ok", ENC_1), "injected": {"x": 1}},
    }
    bad_states: list[Any] = [
        None,
        "garbage",
        {"kind": "anthropic/thinking", "signature": "x"},
        {"kind": "openai/reasoning", "item": "not a mapping"},
        {"kind": "openai/reasoning", "item": {"type": "message", "id": "m"}},
        {"kind": "openai/reasoning", "item": {"type": "reasoning", "id": 7}},
    ]
    ours = MessageSource(kind="model", provider="openai", model=MODEL)
    theirs = MessageSource(kind="model", provider="azure", model=MODEL)
    messages = (
        UserMessage(id="u", content=(TextBlock("u1"),)),
        AssistantMessage(
            id="a1",
            content=(*(ReasoningBlock("r", s) for s in bad_states), ReasoningBlock("r", good)),
            source=ours,
        ),
        AssistantMessage(
            id="a2", content=(ReasoningBlock("r", good), TextBlock("t")), source=theirs
        ),
        ToolResultMessage(id="t", call_id="c", content=(TextBlock("x"),), is_error=True),
    )
    body = adapter.request_body(request(messages=messages))
    assert body["input"] == [
        {"role": "user", "content": "u1"},
        reasoning_item("rs_1", "ok", ENC_1),
        {"role": "assistant", "content": "t"},
        {"type": "function_call_output", "call_id": "c", "output": "x"},
    ]


async def test_known_model_limits(server: SSEServer) -> None:
    adapter = adapter_at(server, models={"my-model": _info(1000)})
    try:
        info = await adapter.resolve_model("openai", "o3-2025-04-16")
        assert (info.context_window, info.max_output_tokens) == (200_000, 100_000)
        assert (await adapter.resolve_model("openai", "my-model")).context_window == 1000
        assert (await adapter.resolve_model("openai", "unknown")).context_window is None
    finally:
        await adapter.aclose()


def _info(window: int) -> Any:
    from steerloop.llm import ModelInfo

    return ModelInfo(context_window=window)


@contextlib.contextmanager
def _started_async_generators() -> Iterator[list[weakref.ref[AsyncGenerator[Any]]]]:
    """Weak references to every async generator first iterated inside the block (the loop's
    own hooks still run: recording wraps its first-iteration hook)."""
    started: list[weakref.ref[AsyncGenerator[Any]]] = []
    hooks = sys.get_asyncgen_hooks()

    def firstiter(agen: AsyncGenerator[Any]) -> None:
        started.append(weakref.ref(agen))
        if hooks.firstiter is not None:
            hooks.firstiter(agen)

    sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=hooks.finalizer)
    try:
        yield started
    finally:
        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=hooks.finalizer)


def _suspended(started: list[weakref.ref[AsyncGenerator[Any]]]) -> list[str]:
    """Those of ``started`` that are alive, started and not finished."""
    alive = (ref() for ref in started)
    return sorted(
        g.ag_code.co_qualname  # type: ignore[attr-defined]
        for g in alive
        if g is not None and g.ag_frame is not None  # type: ignore[attr-defined]
    )


async def test_a_complete_response_leaves_no_sdk_generator_to_the_collector(
    server: SSEServer,
) -> None:
    """The stream ends at ``response.completed``, before the body does. With the cyclic
    collector off, every async generator the request started (the SDK's and its
    transport's) is finished within a bounded number of loop turns: none is left for a
    collection at an arbitrary later point (the OpenAI stream's own generator sits in a
    reference cycle with it). Counterexample: before the stream's ``_iterator`` was closed
    in the request, all ten stayed suspended (CI saw one finalized mid-collection: "async
    generator already executing")."""
    server.add(text_step(Wire("resp_1"), "hi"))
    collecting = gc.isenabled()
    gc.disable()
    try:
        with _started_async_generators() as started:
            chunks = await stream_once(server, request())
        assert chunks[-1] == Finish(reason=FinishReason(kind="stop"))
        assert len(started) >= 5  # the SDK and its transport did start their generators
        for _ in range(250):
            if not _suspended(started):
                break
            await asyncio.sleep(0)
        assert _suspended(started) == []
    finally:
        if collecting:
            gc.enable()
