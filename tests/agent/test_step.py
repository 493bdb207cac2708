"""Step: from admission to attempt settlement (§7.6): C7.6-1 … C7.6-20."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    CancelCause,
    PreStepDecision,
    RequestErrorAction,
    Runtime,
    ToolExec,
    ToolResult,
    define_tool,
    user_message,
)
from steerloop.llm import GenerateRequest, ModelInfo, TokenUsage
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
from steerloop.messages import MessageSource, ReasoningBlock, TextBlock, ToolCallBlock
from steerloop.session import MemoryStore
from steerloop.testing import (
    ScriptedAdapter,
    error_response,
    text_response,
    tool_call_response,
)

from ..conftest import Harness, compact, events_of, settle, texts
from ..support import reason_of

Next = Callable[[], Awaitable[Any]]


def register_tool(h: Harness, name: str = "echo", result: Any = "ok") -> list[str]:
    ran: list[str] = []

    async def execute(args: Any, exec: ToolExec) -> Any:
        ran.append(exec.call_id)
        return result

    h.rt.tools.register(
        define_tool(name=name, description=name, parameters={"type": "object"}, execute=execute)
    )
    return ran


def frames_of(h: Harness) -> list[Any]:
    frames: list[Any] = []
    h.rt.hooks.on("agent/assistant-stream", lambda p: frames.append(p.frame))
    return frames


class TracingAdapter(ScriptedAdapter):
    """A scripted adapter that records the log when `prepare_call` resolves the model."""

    def __init__(self, agent_ref: dict[str, Any], trace: list[Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.agent_ref = agent_ref
        self.trace = trace

    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        self.trace.append(("prepare", compact(self.agent_ref["agent"].session)[-1]))
        return self.model_info


# --- C7.6-1 / 2 / 3 -------------------------------------------------------------------


async def test_attempt_order(h: Harness) -> None:
    """C7.6-1: `agent/request` → `prepare_call` → system projection → user messages → hdr/ctx
    → stream; `agent/request` runs before any `user/message` of the step is logged."""
    trace: list[Any] = []
    ref: dict[str, Any] = {}
    adapter = TracingAdapter(ref, trace)
    h.rt.llm.register_adapter(["traced"], adapter)

    async def on_request(payload: Any, next: Next) -> Any:
        trace.append(("request", compact(payload.agent.session)[-1]))
        return await next()

    h.rt.hooks.on("agent/request", on_request)
    agent = await h.agent(agent_options=AgentOptions(provider="traced", model="m"))
    ref["agent"] = agent

    def stream(request: GenerateRequest) -> Any:
        trace.append(("stream", compact(agent.session)[-1]))
        return text_response("ok")

    adapter.add(stream)
    agent.followup(user_message("u1"))
    await settle(agent)
    assert trace == [("request", "S+1.1"), ("prepare", "S+1.1"), ("stream", "ctx")]
    assert compact(agent.session)[3:] == [
        "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx", "msg", "S-1.1", "T-1:completed",
    ]  # fmt: skip


async def test_prompt_rendered_once_per_step_projection_per_attempt(h: Harness) -> None:
    """C7.6-2: assembly is rendered once per step; the projection is re-evaluated on every
    attempt against that attempt's prepared call (here the retry moves to a route that does
    not read in-history system messages, so the appended node is normalised away)."""
    prompt: dict[str, Any] = {"text": "A", "renders": 0}

    def section(agent: Any) -> str:
        prompt["renders"] += 1
        return str(prompt["text"])

    h.rt.system_prompt.add_section("p", section)
    h.adapter.model_info = ModelInfo(reads_in_history_system=True)
    flat = ScriptedAdapter([text_response("a2")])
    h.rt.llm.register_adapter(["flat"], flat)
    attempts = {"n": 0}

    async def on_request(payload: Any, next: Next) -> Any:
        config = await next()
        if payload.turn == 2:
            attempts["n"] += 1
            if attempts["n"] == 2:
                return config.replace(provider="flat")
        return config

    async def on_error(payload: Any, next: Next) -> Any:
        return RequestErrorAction.retry()

    h.rt.hooks.on("agent/request", on_request)
    h.rt.hooks.on("agent/request-error", on_error)
    agent = await h.agent(text_response("a1"), error_response("E", "try again"))
    agent.followup(user_message("u1"))
    await settle(agent)
    prompt["text"], prompt["renders"] = "B", 0
    n = len(compact(agent.session))
    agent.followup(user_message("u2"))
    await settle(agent)
    assert prompt["renders"] == 1
    assert compact(agent.session)[n:] == [
        "ins(nt,u2)", "T+2", "claim(nt,u2)", "S+2.1", "sys", "user(u2)", "attempt",
        "sys", "sys", "hdr(change)", "ctx", "msg", "S-2.1", "T-2:completed",
    ]  # fmt: skip
    # attempt 1 (in-history route) saw the appended prompt after the history …
    assert texts(h.adapter.requests[1].messages) == [
        "system:A", "user:u1", "assistant:a1", "system:B", "user:u2",
    ]  # fmt: skip
    # … attempt 2 (flat route) sees exactly one system message, at index 0.
    assert texts(flat.requests[0].messages) == ["system:B", "user:u1", "assistant:a1", "user:u2"]


async def test_first_request_writes_system_node_even_when_empty(h: Harness) -> None:
    """C7.6-3: the session's first request writes `system/message` as surface node 0 before
    any user message, even when the rendered prompt is empty (then it projects to nothing)."""
    agent = await h.agent(text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    [sys] = events_of(agent.session, "system/message")
    assert agent.session.surface_seqs()[0] == sys.seq and sys.data.message.content == ()
    assert sys.surface_op == "append"
    assert texts(agent.session.derive_messages()) == ["user:u1", "assistant:ok"]


async def test_first_request_with_prompt_leads_the_request(h: Harness) -> None:
    """C7.6-3: a non-empty first prompt is the first message of the request."""
    h.rt.system_prompt.add_section("p", "be brief")
    agent = await h.agent(text_response("ok"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert texts(h.adapter.requests[0].messages) == ["system:be brief", "user:u1"]


# --- C7.6-4 / 5 ----------------------------------------------------------------------


async def _two_prompts(
    h: Harness, first: str, second: str, *, in_history: bool, new_series: bool = False
) -> Any:
    prompt = {"text": first}
    h.rt.system_prompt.add_section("p", lambda agent: prompt["text"])
    h.adapter.model_info = ModelInfo(reads_in_history_system=in_history)

    async def pre_step(payload: Any, next: Next) -> Any:
        decision = await next()
        if new_series and payload.turn == 2:
            return PreStepDecision.enter(decision.messages, starts_request_series=True)
        return decision

    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(text_response("a1"), text_response("a2"))
    agent.followup(user_message("u1"))
    await settle(agent)
    prompt["text"] = second
    agent.followup(user_message("u2"))
    await settle(agent)
    return agent


async def test_changed_prompt_appended_for_in_history_route(h: Harness) -> None:
    """C7.6-4: an in-history route inside a continuing series gets the changed prompt as a
    new `system/message` appended after the history."""
    agent = await _two_prompts(h, "A", "B", in_history=True)
    first, second = events_of(agent.session, "system/message")
    assert second.surface_op == "append" and second.seq > first.seq
    assert texts(h.adapter.requests[1].messages) == [
        "system:A", "user:u1", "assistant:a1", "system:B", "user:u2",
    ]  # fmt: skip


async def test_changed_prompt_replaces_head_otherwise(h: Harness) -> None:
    """C7.6-4: otherwise the head node is replaced (`Replace(head, head)` citing it) and the
    request holds exactly one system message, at index 0."""
    agent = await _two_prompts(h, "A", "B", in_history=False)
    head, new = events_of(agent.session, "system/message")
    assert new.surface_op is not None and new.surface_op != "append"
    assert (new.surface_op.start_seq, new.surface_op.end_seq) == (head.seq, head.seq)
    assert new.source_event_seqs == (head.seq,)
    assert texts(h.adapter.requests[1].messages) == [
        "system:B", "user:u1", "assistant:a1", "user:u2",
    ]  # fmt: skip


async def test_new_series_replaces_even_for_in_history_route(h: Harness) -> None:
    """C7.6-4: when pre-step starts a new series, an in-history route also gets the head
    replaced instead of an appended node."""
    agent = await _two_prompts(h, "A", "B", in_history=True, new_series=True)
    _, new = events_of(agent.session, "system/message")
    assert new.surface_op != "append"
    systems = [m for m in agent.session.derive_messages() if m.role == "system"]
    assert texts(systems) == ["system:B"] and agent.session.derive_messages()[0] is systems[0]


@pytest.mark.parametrize("in_history", [False, True])
async def test_empty_prompt_empties_every_system_node(h: Harness, in_history: bool) -> None:
    """C7.6-5: an empty rendered prompt empties every active system node."""
    prompt = {"text": "A"}
    h.rt.system_prompt.add_section("p", lambda agent: prompt["text"])
    h.adapter.model_info = ModelInfo(reads_in_history_system=in_history)
    agent = await h.agent(text_response("1"), text_response("2"), text_response("3"))
    agent.followup(user_message("u1"))
    await settle(agent)
    prompt["text"] = "B"
    agent.followup(user_message("u2"))
    await settle(agent)
    prompt["text"] = ""
    agent.followup(user_message("u3"))
    await settle(agent)
    assert [m.role for m in agent.session.derive_messages()] == [
        "user", "assistant", "user", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert all(m.role != "system" for m in h.adapter.requests[2].messages)


# --- C7.6-6 / 7 / 8 / 9 ---------------------------------------------------------------


async def test_header_reasons(h: Harness) -> None:
    """C7.6-6: `initial` first; nothing for identical requests; `change` when the header
    differs; `series` when only the surface was replaced or pre-step declared a series."""
    prompt = {"text": "A"}
    h.rt.system_prompt.add_section("p", lambda agent: prompt["text"])
    route = {"model": "m"}
    series = {"on": False}

    async def on_request(payload: Any, next: Next) -> Any:
        return (await next()).replace(model=route["model"])

    async def pre_step(payload: Any, next: Next) -> Any:
        decision = await next()
        return PreStepDecision.enter(decision.messages, starts_request_series=series["on"])

    h.rt.hooks.on("agent/request", on_request)
    h.rt.hooks.on("agent/pre-step", pre_step)
    agent = await h.agent(*[text_response(str(i)) for i in range(6)])

    async def turn(text: str) -> list[str]:
        agent.followup(user_message(text))
        await settle(agent)
        return [e.data.reason for e in events_of(agent.session, "request/header")]

    assert await turn("1") == ["initial"]
    assert await turn("2") == ["initial"]  # identical: no header
    route["model"] = "m2"
    assert await turn("3") == ["initial", "change"]
    prompt["text"] = "B"  # head replaced, header identical
    assert await turn("4") == ["initial", "change", "series"]
    series["on"] = True
    assert await turn("5") == ["initial", "change", "series", "series"]
    series["on"] = False
    prompt["text"], route["model"] = "C", "m3"  # both: a change that also restarts the series
    assert await turn("6") == ["initial", "change", "series", "series", "change"]
    flags = [e.data.starts_series for e in events_of(agent.session, "request/header")]
    assert flags == [False, False, True, True, True]


async def test_resume_header_and_process_local_frames() -> None:
    """C7.6-6 (`resume`) and C7.6-19: a new loop instance over a log with a header writes
    `hdr(resume)`; attempt ids and frame revisions are process-local — a new runtime restarts
    revisions at 1 and no durable event carries them."""
    store = MemoryStore()
    seen: list[list[Any]] = []
    for round_ in range(2):
        async with await Runtime.open(store=store) as rt:  # closed if settle times out
            adapter = ScriptedAdapter([text_response(f"r{round_}")])
            rt.llm.register_adapter(["mock"], adapter)
            frames: list[Any] = []
            rt.hooks.on("agent/assistant-stream", lambda p, frames=frames: frames.append(p.frame))
            options = AgentOptions(provider="mock", model="m")
            if round_ == 0:
                handle = await rt.agents.create(session_id="s-1", agent_options=options)
            else:
                handle = await rt.agents.resume(resume_session_id="s-1", agent_options=options)
            agent = handle.agent
            agent.followup(user_message(f"u{round_}"))
            await settle(agent)
            seen.append(frames)
            reasons = [e.data.reason for e in events_of(agent.session, "request/header")]
    assert reasons == ["initial", "resume"]
    assert [f.revision for f in seen[0]] == [f.revision for f in seen[1]]
    assert seen[0][0].revision == 1
    log_text = "\n".join(store.raw("s-1"))
    assert '"assistant/message"' in log_text
    for frames in seen:
        assert frames[0].attempt_id not in log_text
    assert "revision" not in log_text


async def test_request_context_only_on_change(h: Harness) -> None:
    """C7.6-7: `request/context` is written only when provider, model, context window or
    system-prompt update mode differ from the latest one."""
    agent = await h.agent(*[text_response(str(i)) for i in range(4)])

    async def turn(text: str) -> list[str]:
        agent.followup(user_message(text))
        await settle(agent)
        return compact(agent.session, only=["ctx", "hdr"])

    assert await turn("1") == ["hdr(initial)", "ctx"]
    assert await turn("2") == ["hdr(initial)", "ctx"]
    h.adapter.model_info = ModelInfo(context_window=2000)
    assert await turn("3") == ["hdr(initial)", "ctx", "ctx"]
    h.adapter.model_info = ModelInfo(context_window=2000, reads_in_history_system=True)
    assert await turn("4") == ["hdr(initial)", "ctx", "ctx", "ctx"]
    contexts = [e.data for e in events_of(agent.session, "request/context")]
    assert [(c.context_window, c.system_prompt_update) for c in contexts] == [
        (None, None), (2000, None), (2000, "in-history"),
    ]  # fmt: skip


async def test_agent_request_model_override_is_logged_and_sticks(h: Harness) -> None:
    """C7.6-8: a listener switching the model makes the request carry it and writes
    `hdr(change)`; the next step's default proposal starts from that logged header, minus
    fields the adapter filled in."""
    register_tool(h)
    h.adapter.model_info = ModelInfo(defaults={"max_tokens": 512})
    proposals: list[tuple[int, int, Any]] = []

    async def on_request(payload: Any, next: Next) -> Any:
        config = await next()
        proposals.append((payload.turn, payload.step, config))
        if (payload.turn, payload.step) == (2, 1):
            return config.replace(model="m2")
        return config

    h.rt.hooks.on("agent/request", on_request)
    agent = await h.agent(
        text_response("1"), tool_call_response("c1", "echo", {}), text_response("2")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    agent.followup(user_message("u2"))
    await settle(agent)
    assert [r.model for r in h.adapter.requests] == ["m", "m2", "m2"]
    assert compact(agent.session, only=["hdr", "S+"]) == [
        "S+1.1", "hdr(initial)", "S+2.1", "hdr(change)", "S+2.2",
    ]  # fmt: skip
    assert [(t, s, c.model, c.max_tokens) for t, s, c in proposals] == [
        (1, 1, "m", None), (2, 1, "m", None), (2, 2, "m2", None),
    ]  # fmt: skip
    header = events_of(agent.session, "request/header")[-1].data.header
    assert header["adapter_defaults"] == {"max_tokens": 512}


async def test_missing_route_fails_before_any_stream(h: Harness) -> None:
    """C7.6-9: no provider/model anywhere → `turn/end{error}` naming them, no request."""
    agent = await h.agent(text_response("never"), agent_options=AgentOptions())
    agent.followup(user_message("u1"))
    await settle(agent)
    reason = reason_of(agent)
    assert reason.kind == "error"
    assert "provider" in reason.error.message and "model" in reason.error.message
    assert h.adapter.requests == []
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "S-1.1", "T-1:error",
    ]  # fmt: skip


# --- C7.6-10 / 11 / 12 / 13 ------------------------------------------------------------


async def test_request_is_frozen(h: Harness) -> None:
    """C7.6-10: `request.messages` equals `derive_messages()` at build time and later
    appends do not change the request object the adapter holds."""
    register_tool(h)
    agent = await h.agent()
    at_build: list[Any] = []

    def capture(request: GenerateRequest) -> Any:
        at_build.append(agent.session.derive_messages())
        return tool_call_response("c1", "echo", {})

    h.adapter.add(capture, text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    first = h.adapter.requests[0]
    assert isinstance(first.messages, tuple)
    assert list(first.messages) == at_build[0]
    assert texts(first.messages) == ["user:u1"]
    assert len(agent.session.derive_messages()) == 4


async def test_stream_frames(h: Harness) -> None:
    """C7.6-11: `start` once the iterator is obtained, one `chunk` per chunk (index 0, 1, …),
    then `end` committed(event_type, seq) after settlement; revisions increase by one."""
    frames = frames_of(h)
    agent = await h.agent()
    log_at_start: list[str] = []
    h.rt.hooks.on(
        "agent/assistant-stream",
        lambda p: log_at_start.append(compact(agent.session)[-1]) if p.frame.kind != "chunk" else 0,
    )
    chunks = text_response("hello")
    h.adapter.add(chunks)
    agent.followup(user_message("u1"))
    await settle(agent)
    [msg] = events_of(agent.session, "assistant/message")
    assert [f.kind for f in frames] == ["start", *["chunk"] * len(chunks), "end"]
    assert [f.index for f in frames[1:-1]] == list(range(len(chunks)))
    assert [f.chunk for f in frames[1:-1]] == chunks
    assert (frames[0].turn, frames[0].step) == (1, 1)
    assert frames[-1].outcome == {"kind": "committed", "event_type": "assistant/message",
                                  "seq": msg.seq}  # fmt: skip
    revisions = [f.revision for f in frames]
    assert revisions == list(range(revisions[0], revisions[0] + len(frames)))
    assert len({f.attempt_id for f in frames}) == 1
    assert log_at_start == ["ctx", "msg"]


class GenAdapter:
    """A hand-written adapter that traces how far the loop pulled its generator."""

    def __init__(self) -> None:
        self.trace: list[str] = []

    async def resolve_model(self, provider: str, model: str) -> None:
        return None

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        self.trace.append("begin")
        try:
            yield BlockStart(index=0, block_type="text")
            self.trace.append("after-0")
            yield TextDelta(index=0, text="hi")
            self.trace.append("after-1")
            yield Finish(reason=FinishReason(kind="stop"))
            self.trace.append("after-2")
        finally:
            self.trace.append("closed")


async def test_abort_mid_stream_consumes_no_more_chunks(h: Harness) -> None:
    """C7.6-12: after an abort (here during chunk 1) the loop pulls no further chunk and
    closes the adapter's iterator."""
    gen = GenAdapter()
    h.rt.llm.register_adapter(["gen"], gen)
    agent = await h.agent(agent_options=AgentOptions(provider="gen", model="m"))

    def on_frame(payload: Any) -> None:
        if payload.frame.kind == "chunk" and payload.frame.index == 1:
            agent.cancel(CancelCause.user())

    h.rt.hooks.on("agent/assistant-stream", on_frame)
    agent.followup(user_message("u1"))
    await settle(agent)
    assert gen.trace == ["begin", "after-0", "closed"]
    assert compact(agent.session)[-3:] == ["msg(interrupted)", "S-1.1", "T-1:aborted"]
    [msg] = events_of(agent.session, "assistant/message")
    assert msg.data.message.content == (TextBlock("hi"),) and len(msg.data.stream) == 2


async def test_abort_before_iteration(h: Harness) -> None:
    """C7.6-12: the signal is checked before iteration: an abort at the `start` frame pulls
    no chunk at all (the adapter body never runs); the started attempt settles empty."""
    gen = GenAdapter()
    h.rt.llm.register_adapter(["gen"], gen)
    agent = await h.agent(agent_options=AgentOptions(provider="gen", model="m"))
    h.rt.hooks.on(
        "agent/assistant-stream",
        lambda p: agent.cancel(CancelCause.user()) if p.frame.kind == "start" else None,
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert gen.trace == []
    assert compact(agent.session)[-4:] == ["ctx", "attempt", "S-1.1", "T-1:aborted"]
    assert events_of(agent.session, "assistant/attempt")[0].data.stream == ()


class BrokenStreamAdapter:
    async def resolve_model(self, provider: str, model: str) -> None:
        return None

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        raise RuntimeError("could not open the stream")


class BrokenPrepareAdapter(ScriptedAdapter):
    async def resolve_model(self, provider: str, model: str) -> ModelInfo:
        raise RuntimeError("model lookup failed")


@pytest.mark.parametrize("where", ["prepare", "agent/request", "iterator", "cancelled"])
async def test_unstarted_stream_writes_no_settlement(h: Harness, where: str) -> None:
    """C7.6-13: when prepare, `agent/request` or obtaining the iterator fails or is cancelled,
    there is no `assistant/attempt`, no `assistant/message` and no stream frame."""
    frames = frames_of(h)
    provider = "mock"
    if where == "prepare":
        h.rt.llm.register_adapter(["broken"], BrokenPrepareAdapter([text_response("x")]))
        provider = "broken"
    elif where == "iterator":
        h.rt.llm.register_adapter(["broken"], BrokenStreamAdapter())
        provider = "broken"
    elif where == "agent/request":

        async def on_request(payload: Any, next: Next) -> Any:
            raise RuntimeError("router down")

        h.rt.hooks.on("agent/request", on_request)
    agent = await h.agent(
        text_response("x"), agent_options=AgentOptions(provider=provider, model="m")
    )
    if where == "cancelled":
        h.rt.hooks.on(
            "session/event",
            lambda p: agent.cancel(CancelCause.user()) if p.event.type == "request/context" else 0,
        )
    agent.followup(user_message("u1"))
    await settle(agent)
    log = compact(agent.session)
    assert "attempt" not in log and not any(x.startswith("msg") for x in log)
    assert frames == []
    assert log[-2:] == ["S-1.1", "T-1:aborted" if where == "cancelled" else "T-1:error"]


# --- C7.6-14 … C7.6-18 ----------------------------------------------------------------


async def test_successful_finish_settles_assistant_message(h: Harness) -> None:
    """C7.6-14: content, `source{model, provider, model, replay_state}`, usage and the full
    stream are recorded, before any `tool/call` of the message."""
    register_tool(h)
    usage = TokenUsage(input_tokens=3, output_tokens=4, reasoning_tokens=1)
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="think"),
        BlockEnd(index=0, block=ReasoningBlock("think")),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="hi"),
        BlockEnd(index=1, block=TextBlock("hi")),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="c1", name="echo", arguments_delta="{}"),
        BlockEnd(index=2, block=ToolCallBlock("c1", "echo", "{}")),
        UsageChunk(usage=usage),
        Finish(reason=FinishReason(kind="tool-calls"), replay_state={"sig": "xyz"}),
    ]
    agent = await h.agent(chunks, text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    msg = events_of(agent.session, "assistant/message")[0]
    data = msg.data
    assert data.message.content == (
        ReasoningBlock("think"), TextBlock("hi"), ToolCallBlock("c1", "echo", "{}"),
    )  # fmt: skip
    assert data.message.source == MessageSource(
        kind="model", provider="mock", model="m", replay_state={"sig": "xyz"}
    )
    assert data.usage == usage and not data.interrupted
    assert [r.chunk for r in data.stream] == chunks
    assert msg.seq < events_of(agent.session, "tool/call")[0].seq


@pytest.mark.parametrize("finish", [True, False])
async def test_stop_without_tools_completes(h: Harness, finish: bool) -> None:
    """C7.6-15: `stop` without tool calls → `completed`; no finish chunk counts as `stop`."""
    chunks = text_response("hi")
    agent = await h.agent(chunks if finish else chunks[:-1])
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:completed"]
    assert len(h.adapter.requests) == 1


async def test_max_tokens_drops_tool_calls(h: Harness) -> None:
    """C7.6-16: `max-tokens` → no tool runs, every tool-call block (complete or not) is
    dropped from the stored message, text is kept; the turn ends `max-tokens`."""
    ran = register_tool(h)
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="partial"),
        BlockEnd(index=0, block=TextBlock("partial")),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id="c1", name="echo", arguments_delta="{}"),
        BlockEnd(index=1, block=ToolCallBlock("c1", "echo", "{}")),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="c2", name="echo", arguments_delta='{"a": '),
        Finish(reason=FinishReason(kind="max-tokens")),
    ]
    agent = await h.agent(chunks)
    agent.followup(user_message("u1"))
    await settle(agent)
    assert ran == [] and events_of(agent.session, "tool/call") == []
    [msg] = events_of(agent.session, "assistant/message")
    assert msg.data.message.content == (TextBlock("partial"),)
    assert len(msg.data.stream) == len(chunks)
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:max-tokens"]


async def test_tool_calls_run_and_owe_a_request(h: Harness) -> None:
    """C7.6-17: tool calls with a non-`max-tokens` finish run (even under finish `stop`);
    without `concludes_turn` the step owes a request."""
    ran = register_tool(h)
    chunks = tool_call_response("c1", "echo", {})
    chunks[-1] = Finish(reason=FinishReason(kind="stop"))
    agent = await h.agent(chunks, text_response("done"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert ran == ["c1"] and len(h.adapter.requests) == 2
    assert compact(agent.session, only=["S", "T-"]) == [
        "S+1.1", "S-1.1", "S+1.2", "S-1.2", "T-1:completed",
    ]  # fmt: skip


async def test_concluding_tool_completes_the_step(h: Harness) -> None:
    """C7.6-17: a committed result with `concludes_turn=True` makes the step `completed`."""
    register_tool(h, result=ToolResult(content="final", concludes_turn=True))
    agent = await h.agent(tool_call_response("c1", "echo", {}), text_response("never"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert len(h.adapter.requests) == 1
    assert compact(agent.session)[-4:] == ["call(c1)", "result(c1)", "S-1.1", "T-1:completed"]


async def test_empty_assistant_message_keeps_usage(h: Harness) -> None:
    """C7.6-18: an empty-content `assistant/message` is still written with `usage` but
    contributes no message to `derive_messages()`."""
    usage = TokenUsage(input_tokens=5, output_tokens=0)
    agent = await h.agent(
        [UsageChunk(usage=usage), Finish(reason=FinishReason(kind="stop"))], text_response("b")
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    [msg] = events_of(agent.session, "assistant/message")
    assert msg.data.message.content == () and msg.data.usage == usage
    assert texts(agent.session.derive_messages()) == ["user:u1"]
    agent.followup(user_message("u2"))
    await settle(agent)
    assert texts(h.adapter.requests[1].messages) == ["user:u1", "user:u2"]


# --- C7.6-20 --------------------------------------------------------------------------


async def test_cancel_on_step_start_prevents_admission(h: Harness) -> None:
    """C7.6-20: a `session/event` listener cancelling on `step/start` prevents admission."""
    agent = await h.agent(text_response("never"))
    h.rt.hooks.on(
        "session/event",
        lambda p: agent.cancel(CancelCause.user()) if p.event.type == "step/start" else None,
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "S-1.1", "T-1:aborted",
    ]  # fmt: skip
    assert h.adapter.requests == [] and agent.session.derive_messages() == []
