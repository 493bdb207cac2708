"""``steerloop.telemetry``: the exact span tree, attributes and metrics of scripted turns,
read back through the OpenTelemetry SDK's in-memory exporter and metric reader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as gm
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

from steerloop import AgentOptions, CancelCause, ToolExec, define_tool
from steerloop.llm import TokenUsage
from steerloop.llm.chunks import UsageChunk
from steerloop.llm.retry import install_retry
from steerloop.subagents import install_subagents
from steerloop.telemetry import _otel as names
from steerloop.telemetry import install_otel, link_next_turn
from steerloop.testing import (
    ScriptedAdapter,
    error_response,
    hang_after,
    raise_after,
    text_response,
    tool_call_response,
    tool_calls_response,
)

from ..conftest import Harness, u, within

USAGE = TokenUsage(input_tokens=10, output_tokens=3, cache_read_tokens=5, reasoning_tokens=2)
SECRET = "sk-live1234567890abcdef"


class Otel:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def install(self, rt: Any, **kwargs: Any) -> Any:
        return install_otel(
            rt,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **kwargs,
        )

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def tree(self) -> list[tuple[str, str | None]]:
        """(name, parent name) per span in start order; tool spans named by call id."""
        spans = self.spans()
        label = {s.context.span_id: _label(s) for s in spans}
        return [(_label(s), label.get(s.parent.span_id) if s.parent else None) for s in spans]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out: list[Any] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        out.extend(m.data.data_points)
        return out


def _label(span: ReadableSpan) -> str:
    attrs = span.attributes or {}
    if span.name.startswith("execute_tool"):
        return f"{span.name}#{attrs['gen_ai.tool.call.id']!s}"
    if span.name == "invoke_agent":
        return f"invoke_agent#{attrs['gen_ai.agent.id']!s}"
    return span.name


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()


class EchoArgs(BaseModel):
    x: int


def echo_tool(gates: dict[int, asyncio.Event] | None = None) -> Any:
    async def echo(args: EchoArgs, exec: ToolExec) -> str:
        if gates is not None:
            gates[args.x].set()
            await gates[1 - args.x].wait()  # each waits for the other: they overlap
        return f"echo {args.x}"

    return define_tool(
        name="echo", description="echo", parameters=EchoArgs, execute=echo, concurrency_safe=True
    )


def with_usage(chunks: list[Any], usage: TokenUsage) -> list[Any]:
    return [*chunks[:-1], UsageChunk(usage=usage), chunks[-1]]


CHAT = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "mock", "gen_ai.system": "mock"}


def chat_attrs(**extra: Any) -> dict[str, Any]:
    return {
        **CHAT,
        "gen_ai.request.model": "m",
        "gen_ai.conversation.id": "s-1",
        "gen_ai.response.model": "m",
        **extra,
    }


async def test_parallel_tools_and_a_retried_request_give_the_exact_tree(
    h: Harness, otel: Otel
) -> None:
    otel.install(h.rt)
    install_retry(h.rt, base_delay_ms=1, max_delay_ms=1)
    gates = {0: asyncio.Event(), 1: asyncio.Event()}
    h.rt.tools.register(echo_tool(gates))
    agent = await h.agent(
        error_response("overloaded", "busy, retry", retryable=True),
        with_usage(
            tool_calls_response([("c0", "echo", {"x": 0}), ("c1", "echo", {"x": 1})]), USAGE
        ),
        text_response("done", usage=TokenUsage(input_tokens=40, output_tokens=7)),
    )
    agent.followup(u("go"))
    await within(agent.when_idle())
    assert otel.tree() == [
        ("invoke_agent#s-1", None),
        ("chat m", "invoke_agent#s-1"),
        ("chat m", "invoke_agent#s-1"),
        ("execute_tool echo#c0", "invoke_agent#s-1"),
        ("execute_tool echo#c1", "invoke_agent#s-1"),
        ("chat m", "invoke_agent#s-1"),
    ]
    turn, failed, tools_chat, c0, c1, final = otel.spans()
    assert turn.kind == SpanKind.INTERNAL and turn.status.status_code == StatusCode.UNSET
    assert dict(turn.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": "s-1",
        "gen_ai.agent.id": "s-1",
    }
    assert failed.kind == SpanKind.CLIENT
    assert dict(failed.attributes or {}) == {
        **CHAT,
        "gen_ai.request.model": "m",
        "gen_ai.conversation.id": "s-1",
        "gen_ai.response.finish_reasons": ("error",),
        "error.type": "overloaded",
    }
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "busy, retry"
    assert dict(tools_chat.attributes or {}) == chat_attrs(
        **{
            "gen_ai.response.finish_reasons": ("tool-calls",),
            "gen_ai.usage.input_tokens": 15,
            "gen_ai.usage.output_tokens": 5,
            "gen_ai.usage.cache_read.input_tokens": 5,
            "gen_ai.usage.reasoning.output_tokens": 2,
        }
    )
    assert tools_chat.status.status_code == StatusCode.UNSET
    for span, call_id in ((c0, "c0"), (c1, "c1")):
        assert span.kind == SpanKind.INTERNAL
        assert dict(span.attributes or {}) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "echo",
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        assert span.status.status_code == StatusCode.UNSET
    # They ran at the same time: the second started before the first ended.
    assert c0.end_time is not None and c1.start_time is not None
    assert c1.start_time < c0.end_time
    assert dict(final.attributes or {}) == chat_attrs(
        **{
            "gen_ai.response.finish_reasons": ("stop",),
            "gen_ai.usage.input_tokens": 40,
            "gen_ai.usage.output_tokens": 7,
        }
    )
    # All of one trace, the turn's span ending last.
    assert {s.context.trace_id for s in otel.spans()} == {turn.context.trace_id}
    assert all((s.end_time or 0) <= (turn.end_time or 0) for s in otel.spans())

    # Metrics: tokens by type (cached input and reasoning counted in), one duration and one
    # time-to-first-chunk per attempt, the failed attempt's with its error.type.
    base = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "mock"}
    base |= {"gen_ai.system": "mock", "gen_ai.request.model": "m", "gen_ai.response.model": "m"}
    tokens = {
        (p.attributes["gen_ai.token.type"], p.count, p.sum): dict(p.attributes)
        for p in otel.points("gen_ai.client.token.usage")
    }
    assert tokens == {
        ("input", 2, 55): {**base, "gen_ai.token.type": "input"},
        ("output", 2, 12): {**base, "gen_ai.token.type": "output"},
    }
    durations = {
        p.attributes.get("error.type"): (p.count, dict(p.attributes))
        for p in otel.points("gen_ai.client.operation.duration")
    }
    base_failed = {k: v for k, v in base.items() if k != "gen_ai.response.model"}
    assert durations == {
        None: (2, base),
        "overloaded": (1, {**base_failed, "error.type": "overloaded"}),
    }
    first = otel.points("gen_ai.client.operation.time_to_first_chunk")
    # Recorded at the first chunk, before the response is known: one series for all three.
    assert [(p.count, dict(p.attributes)) for p in first] == [(3, base_failed)]
    assert first[0].sum >= 0


async def test_an_error_turn_marks_its_span_and_the_attempt(h: Harness, otel: Otel) -> None:
    otel.install(h.rt)
    agent = await h.agent(error_response("invalid_request", "the request was bad"))
    agent.followup(u("go"))
    await within(agent.when_idle())
    assert otel.tree() == [("invoke_agent#s-1", None), ("chat m", "invoke_agent#s-1")]
    turn, chat = otel.spans()
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.status.description == "the request was bad"
    assert (turn.attributes or {})["error.type"] == "invalid_request"
    assert chat.status.status_code == StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "invalid_request"


async def test_a_cancelled_turn_leaves_status_unset_with_error_type_cancelled(
    h: Harness, otel: Otel
) -> None:
    otel.install(h.rt)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return hang_after([])  # no chunk: the attempt settles with no message

    agent = await h.agent(hang)
    agent.followup(u("go"))
    await within(streaming.wait())
    agent.cancel(CancelCause.user())
    await within(agent.when_idle())
    assert otel.tree() == [("invoke_agent#s-1", None), ("chat m", "invoke_agent#s-1")]
    turn, chat = otel.spans()
    for span in (turn, chat):
        assert span.status.status_code == StatusCode.UNSET
        assert (span.attributes or {})["error.type"] == "cancelled"
    assert (chat.attributes or {})["gen_ai.response.finish_reasons"] == ("aborted",)
    durations = otel.points("gen_ai.client.operation.duration")
    assert [p.attributes.get("error.type") for p in durations] == ["cancelled"]


async def test_a_tool_call_cancelled_while_running_keeps_status_unset(
    h: Harness, otel: Otel
) -> None:
    otel.install(h.rt)
    started = asyncio.Event()

    async def wait(args: Any, exec: ToolExec) -> str:
        started.set()
        await exec.signal.wait()
        return "late"

    h.rt.tools.register(
        define_tool(name="wait", description="w", parameters={"type": "object"}, execute=wait)
    )
    agent = await h.agent(tool_call_response("c1", "wait", {}))
    agent.followup(u("go"))
    await within(started.wait())
    agent.cancel(CancelCause.user())
    await within(agent.when_idle())
    assert otel.tree() == [
        ("invoke_agent#s-1", None),
        ("chat m", "invoke_agent#s-1"),
        ("execute_tool wait#c1", "invoke_agent#s-1"),
    ]
    turn, chat, tool = otel.spans()
    assert tool.status.status_code == StatusCode.UNSET
    assert (tool.attributes or {})["error.type"] == "ABORTED"
    assert chat.status.status_code == StatusCode.UNSET and "error.type" not in (
        chat.attributes or {}
    )
    assert (turn.attributes or {})["error.type"] == "cancelled"


async def test_a_tool_error_result_sets_error_type_to_its_code(h: Harness, otel: Otel) -> None:
    otel.install(h.rt)
    agent = await h.agent(tool_call_response("c1", "nope", {}), text_response("ok"))
    agent.followup(u("go"))
    await within(agent.when_idle())
    tool = next(s for s in otel.spans() if s.name == "execute_tool nope")
    assert (tool.attributes or {})["error.type"] == "UNKNOWN_TOOL"
    assert tool.status.status_code == StatusCode.ERROR


async def test_a_sub_agents_turn_is_a_child_of_the_parents_execute_tool(
    h: Harness, otel: Otel
) -> None:
    otel.install(h.rt)
    install_subagents(h.rt, agent_options=AgentOptions(provider="child", model="c"))
    h.rt.llm.register_adapter(["child"], ScriptedAdapter([text_response("4")]))
    agent = await h.agent(
        tool_call_response("c1", "spawn_agent", {"task": "2+2?"}), text_response("4 it is")
    )
    agent.followup(u("delegate"))
    await within(agent.when_idle())
    tree = otel.tree()
    child = next(label for label, _ in tree if label.startswith("invoke_agent#s-1/"))
    assert tree == [
        ("invoke_agent#s-1", None),
        ("chat m", "invoke_agent#s-1"),
        ("execute_tool spawn_agent#c1", "invoke_agent#s-1"),
        (child, "execute_tool spawn_agent#c1"),
        ("chat c", child),
        ("chat m", "invoke_agent#s-1"),
    ]
    child_span = next(s for s in otel.spans() if _label(s) == child)
    assert (child_span.attributes or {})["gen_ai.conversation.id"] == child.split("#")[1]


async def test_spawn_from_a_custom_tool_nests_under_that_call(h: Harness, otel: Otel) -> None:
    """No ``origin`` in the child's header: the running call is found from the context."""
    from steerloop.subagents import spawn

    otel.install(h.rt)
    h.rt.llm.register_adapter(["child"], ScriptedAdapter([text_response("sub")]))

    async def delegate(args: Any, exec: ToolExec) -> str:
        result = await spawn(
            h.rt,
            exec.agent,  # type: ignore[arg-type]  # a live Agent
            "task",
            agent_options=AgentOptions(provider="child", model="c"),
        )
        return result.answer

    h.rt.tools.register(
        define_tool(
            name="delegate", description="d", parameters={"type": "object"}, execute=delegate
        )
    )
    agent = await h.agent(tool_call_response("c9", "delegate", {}), text_response("done"))
    agent.followup(u("go"))
    await within(agent.when_idle())
    parents = dict(otel.tree())
    child = next(label for label in parents if label.startswith("invoke_agent#s-1/"))
    assert parents[child] == "execute_tool delegate#c9"


async def test_content_is_recorded_only_when_asked_and_secrets_never(
    h: Harness, otel: Otel
) -> None:
    dispose = otel.install(h.rt)
    h.rt.tools.register(echo_tool())
    script = (
        tool_call_response("c1", "echo", f'{{"x": 1, "key": "{SECRET}"}}'),
        text_response(f"your key is {SECRET}"),
    )
    agent = await h.agent(*script)
    agent.followup(u(f"use {SECRET}"))
    await within(agent.when_idle())
    content_keys = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    for span in otel.spans():
        assert not content_keys & set(span.attributes or {})
    dispose()
    otel.exporter.clear()

    otel.install(h.rt, capture_content=True)
    h.adapter.add(*script)
    agent.followup(u(f"use {SECRET}"))
    await within(agent.when_idle())
    seen: set[str] = set()
    for span in otel.spans():
        for key, value in (span.attributes or {}).items():
            assert SECRET not in str(value)
            if key in content_keys:
                seen.add(key)
    assert seen == content_keys
    chat = next(s for s in otel.spans() if s.name == "chat m")
    assert str((chat.attributes or {})["gen_ai.input.messages"]).endswith(
        '{"role":"user","parts":[{"type":"text","content":"use ***"}]}]'
    )
    tool = next(s for s in otel.spans() if s.name == "execute_tool echo")
    assert (tool.attributes or {})["gen_ai.tool.call.arguments"] == '{"x": 1, "key": "***"}'
    assert (tool.attributes or {})["gen_ai.tool.call.result"] == "echo 1"


async def test_dispose_ends_open_spans_and_stops_emitting(h: Harness, otel: Otel) -> None:
    dispose = otel.install(h.rt)
    streaming = asyncio.Event()

    def hang(request: Any) -> Any:
        streaming.set()
        return hang_after([])

    agent = await h.agent(hang, text_response("after"))
    agent.followup(u("go"))
    await within(streaming.wait())
    dispose()
    # Nothing is left open: the turn and its attempt were ended at disposal.
    assert otel.tree() == [("invoke_agent#s-1", None), ("chat m", "invoke_agent#s-1")]
    assert not h.rt.hooks.has("agent/assistant-stream")
    agent.cancel(CancelCause.user())
    await within(agent.when_idle())
    counts = [p.count for p in otel.points("gen_ai.client.operation.duration")]
    agent.followup(u("again"))
    await within(agent.when_idle())
    assert len(otel.spans()) == 2
    assert [p.count for p in otel.points("gen_ai.client.operation.duration")] == counts


async def test_without_an_sdk_no_per_event_listener_is_registered(h: Harness) -> None:
    """With the API's default providers nothing could be recorded, so neither the per-event
    hook nor the stream hook (which makes the loop build a frame per chunk) is listened to;
    only ``agent/status`` is, to notice a provider set later."""
    dispose = install_otel(h.rt)
    seen: list[tuple[bool, bool]] = []
    h.rt.hooks.on(
        "agent/turn-stopping",
        lambda p: seen.append(
            (h.rt.hooks.has("session/event"), h.rt.hooks.has("agent/assistant-stream"))
        ),
    )
    agent = await h.agent(text_response("hi"))
    agent.followup(u("go"))
    await within(agent.when_idle())
    assert seen == [(False, False)]
    assert dispose.turns == {}
    dispose()
    assert not h.rt.hooks.has("agent/status")


LATE_PROVIDER = """
import asyncio, json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from steerloop import AgentOptions, Runtime, user_message
from steerloop.telemetry import install_otel
from steerloop.testing import ScriptedAdapter, text_response

async def main():
    rt = await Runtime.open()
    rt.llm.register_adapter(["mock"], ScriptedAdapter([text_response("a"), text_response("b")]))
    install_otel(rt)
    handle = await rt.agents.create(
        session_id="late", agent_options=AgentOptions(provider="mock", model="m"))
    handle.agent.followup(user_message("before"))
    await handle.agent.when_idle()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    handle.agent.followup(user_message("after"))
    await handle.agent.when_idle()
    await rt.close()
    print(json.dumps([s.name for s in exporter.get_finished_spans()]))

asyncio.run(main())
"""


async def test_a_global_provider_set_after_install_applies_from_the_next_turn(
    tmp_path: Any,
) -> None:
    """In a subprocess, since the global tracer provider can be set only once."""
    import json
    import os
    import sys

    script = tmp_path / "late.py"
    script.write_text(LATE_PROVIDER, encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    out, err = await within(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out) == ["chat m", "invoke_agent"]


async def test_traceparent_links_the_next_turn_only(h: Harness, otel: Otel) -> None:
    otel.install(h.rt)
    agent = await h.agent(text_response("one"), text_response("two"))
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    assert link_next_turn(agent, {"Traceparent": f"00-{trace_id}-{span_id}-01"})
    assert not link_next_turn(agent, {"traceparent": "00-zz-bad-01"})
    assert not link_next_turn(agent, {})
    agent.followup(u("go"))
    await within(agent.when_idle())
    agent.followup(u("again"))
    await within(agent.when_idle())
    first, second = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert [(format(lk.context.trace_id, "032x"), format(lk.context.span_id, "016x"))
            for lk in first.links] == [(trace_id, span_id)]  # fmt: skip
    assert first.links[0].context.is_remote
    assert first.parent is None  # a link, not a parent
    assert list(second.links) == []


async def test_latest_conventions_opt_in_drops_the_v1_36_system_attribute(
    h: Harness, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    otel.install(h.rt)
    agent = await h.agent(text_response("hi"))
    agent.followup(u("go"))
    await within(agent.when_idle())
    chat = next(s for s in otel.spans() if s.name == "chat m")
    assert (chat.attributes or {})["gen_ai.provider.name"] == "mock"
    assert "gen_ai.system" not in (chat.attributes or {})


def test_attribute_names_are_the_conventions_names() -> None:
    assert (names.OPERATION, names.PROVIDER, names.SYSTEM) == (
        ga.GEN_AI_OPERATION_NAME,
        ga.GEN_AI_PROVIDER_NAME,
        ga.GEN_AI_SYSTEM,
    )
    assert (names.CONVERSATION_ID, names.AGENT_ID) == (
        ga.GEN_AI_CONVERSATION_ID,
        ga.GEN_AI_AGENT_ID,
    )
    assert (names.REQUEST_MODEL, names.RESPONSE_MODEL, names.FINISH_REASONS) == (
        ga.GEN_AI_REQUEST_MODEL,
        ga.GEN_AI_RESPONSE_MODEL,
        ga.GEN_AI_RESPONSE_FINISH_REASONS,
    )
    assert (names.INPUT_TOKENS, names.OUTPUT_TOKENS, names.TOKEN_TYPE) == (
        ga.GEN_AI_USAGE_INPUT_TOKENS,
        ga.GEN_AI_USAGE_OUTPUT_TOKENS,
        ga.GEN_AI_TOKEN_TYPE,
    )
    assert (names.CACHE_READ_TOKENS, names.CACHE_CREATION_TOKENS, names.REASONING_TOKENS) == (
        ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    )
    assert (names.TOOL_NAME, names.TOOL_CALL_ID, names.TOOL_TYPE) == (
        ga.GEN_AI_TOOL_NAME,
        ga.GEN_AI_TOOL_CALL_ID,
        ga.GEN_AI_TOOL_TYPE,
    )
    assert (names.TOOL_ARGUMENTS, names.TOOL_RESULT) == (
        ga.GEN_AI_TOOL_CALL_ARGUMENTS,
        ga.GEN_AI_TOOL_CALL_RESULT,
    )
    assert (names.INPUT_MESSAGES, names.OUTPUT_MESSAGES) == (
        ga.GEN_AI_INPUT_MESSAGES,
        ga.GEN_AI_OUTPUT_MESSAGES,
    )
    assert names.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert (names.TOKEN_USAGE, names.OPERATION_DURATION, names.TIME_TO_FIRST_CHUNK) == (
        gm.GEN_AI_CLIENT_TOKEN_USAGE,
        gm.GEN_AI_CLIENT_OPERATION_DURATION,
        gm.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
    )


async def test_a_stream_that_raises_fails_its_attempt_with_the_turns_error_code(
    h: Harness, otel: Otel
) -> None:
    otel.install(h.rt)
    agent = await h.agent(raise_after(text_response("par")[:2], RuntimeError("boom")))
    agent.followup(u("go"))
    await within(agent.when_idle())
    turn, chat = otel.spans()
    for span in (turn, chat):
        assert span.status.status_code == StatusCode.ERROR
        assert (span.attributes or {})["error.type"] == "UNKNOWN"
    # The attempt ended when its stream did, before the turn closed.
    assert (chat.end_time or 0) <= (turn.end_time or 0)
    durations = otel.points("gen_ai.client.operation.duration")
    assert [(p.count, p.attributes.get("error.type")) for p in durations] == [(1, "UNKNOWN")]


def test_the_public_surface_is_api_md_s() -> None:
    """``install_otel(rt, tracer_provider=None, meter_provider=None, capture_content=False)``."""
    import inspect

    import steerloop.telemetry as telemetry

    assert list(telemetry.__all__) == sorted(telemetry.__all__)
    assert {"install_otel", "link_next_turn"} <= set(telemetry.__all__)
    params = inspect.signature(telemetry.install_otel).parameters
    assert [(p.name, p.default) for p in params.values()] == [
        ("rt", inspect.Parameter.empty),
        ("tracer_provider", None),
        ("meter_provider", None),
        ("capture_content", False),
    ]


async def test_a_disposed_agent_leaves_no_state_behind(h: Harness, otel: Otel) -> None:
    telemetry = otel.install(h.rt)
    handle = await h.rt.agents.create(
        session_id="s-2", agent_options=AgentOptions(provider="mock", model="m")
    )
    h.adapter.add(text_response("hi"))
    handle.agent.followup(u("go"))
    await within(handle.agent.when_idle())
    assert telemetry.models == {"s-2": ("mock", "m")} and telemetry.turns == {}
    await handle.dispose()
    assert telemetry.models == {}


@pytest.mark.parametrize(
    "header",
    [
        {"parent_session": 5, "origin": "tool"},
        {"parent_session": "s-1", "origin": {"call_id": ["c1"]}},
        {"parent_session": "gone", "origin": {"call_id": "c1"}},
    ],
)
async def test_a_hostile_session_header_gives_a_root_turn(
    h: Harness, otel: Otel, header: dict[str, Any]
) -> None:
    """Stored header fields of the wrong kind or naming nothing live are ignored."""
    otel.install(h.rt)

    def setup(scope: Any) -> None:
        scope.agent.session.header.update(header)

    agent = await h.agent(text_response("hi"), session_id="s-x", setup=setup)
    agent.followup(u("go"))
    await within(agent.when_idle())
    assert otel.tree() == [("invoke_agent#s-x", None), ("chat m", "invoke_agent#s-x")]
