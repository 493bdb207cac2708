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
from steerloop.telemetry import _metrics as metric_names
from steerloop.telemetry import _otel as names
from steerloop.telemetry import continue_trace, install_otel, link_next_turn
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
        "gen_ai.provider.name": "mock",  # learnt with the first request of a new session
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

    # The current names (semantic-conventions-genai): the same durations and first chunks,
    # a gap per later chunk, token counters by modality and per-operation histograms, the
    # failed attempt counted with 0 tokens.
    assert {
        p.attributes.get("error.type"): (p.count, dict(p.attributes))
        for p in otel.points("gen_ai.client.inference.duration")
    } == durations
    assert [
        (p.count, dict(p.attributes))
        for p in otel.points("gen_ai.client.inference.time_to_first_chunk")
    ] == [(3, base_failed)]
    gaps = otel.points("gen_ai.client.inference.time_per_output_chunk")
    assert [dict(p.attributes) for p in gaps] == [base_failed] and gaps[0].count >= 1
    counted = {**base, "gen_ai.token.modality": "unknown"}
    sums = {
        name: sorted(
            ((p.value, dict(p.attributes)) for p in otel.points(name)), key=lambda x: -x[0]
        )
        for name in (
            "gen_ai.client.inference.usage.input_tokens",
            "gen_ai.client.inference.usage.output_tokens",
            "gen_ai.client.inference.usage.cache_read.input_tokens",
            "gen_ai.client.inference.usage.cache_write.input_tokens",
            "gen_ai.client.inference.usage.reasoning.output_tokens",
        )
    }
    unanswered = {k: v for k, v in counted.items() if k != "gen_ai.response.model"}
    assert sums == {
        "gen_ai.client.inference.usage.input_tokens": [(55, counted), (0, unanswered)],
        "gen_ai.client.inference.usage.output_tokens": [(12, counted), (0, unanswered)],
        "gen_ai.client.inference.usage.cache_read.input_tokens": [(5, counted)],
        "gen_ai.client.inference.usage.cache_write.input_tokens": [],
        "gen_ai.client.inference.usage.reasoning.output_tokens": [(2, counted)],
    }
    per_operation = {
        name: sorted((p.count, p.sum, p.attributes.get("error.type")) for p in otel.points(name))
        for name in (
            "gen_ai.client.inference.operation.input_tokens",
            "gen_ai.client.inference.operation.output_tokens",
        )
    }
    assert per_operation == {
        "gen_ai.client.inference.operation.input_tokens": [(1, 0, "overloaded"), (2, 55, None)],
        "gen_ai.client.inference.operation.output_tokens": [(1, 0, "overloaded"), (2, 12, None)],
    }


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
    # Only the current metric names: the v1.36 ones are not emitted any more.
    assert otel.points("gen_ai.client.inference.duration")
    for legacy in (
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.token.usage",
    ):
        assert otel.points(legacy) == []


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
    assert (names.INPUT_TOKENS, names.OUTPUT_TOKENS) == (
        ga.GEN_AI_USAGE_INPUT_TOKENS,
        ga.GEN_AI_USAGE_OUTPUT_TOKENS,
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
    assert names.AGENT_NAME == ga.GEN_AI_AGENT_NAME
    # The v1.36 metric names the installed conventions package still carries (kept unless
    # the latest conventions are opted into).
    assert (
        metric_names.LEGACY_TOKEN_USAGE,
        metric_names.LEGACY_OPERATION_DURATION,
        metric_names.LEGACY_TIME_TO_FIRST_CHUNK,
        metric_names.TOKEN_TYPE,
    ) == (
        gm.GEN_AI_CLIENT_TOKEN_USAGE,
        gm.GEN_AI_CLIENT_OPERATION_DURATION,
        gm.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
        ga.GEN_AI_TOKEN_TYPE,
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


# --- the caller's trace continued (issue 25) ----------------------------------------------------

CALLER_A = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
CALLER_B = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


def waiting_tool(release: asyncio.Event) -> Any:
    """A tool ``wait`` whose calls return once ``release`` is set (a turn held open)."""

    async def wait_tool(args: Any, exec: ToolExec) -> str:
        await release.wait()
        return "ok"

    return define_tool(
        name="wait", description="waits", parameters={"type": "object"}, execute=wait_tool
    )


def traceparent(caller: tuple[str, str]) -> dict[str, str]:
    return {"traceparent": f"00-{caller[0]}-{caller[1]}-01"}


def ids_of(context: Any) -> tuple[str, str]:
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


async def test_the_turn_a_traced_message_causes_is_a_child_of_the_caller(
    h: Harness, otel: Otel
) -> None:
    """The turn that takes in a traced followup starts as a child of the caller's span (its
    trace is the caller's); a later turn caused by an untraced message keeps a link to it;
    a traced followup queued while a turn runs parents the turn that takes it in, which
    links back to the earlier caller."""
    otel.install(h.rt)
    release = asyncio.Event()
    h.rt.tools.register(waiting_tool(release))
    agent = await h.agent(
        text_response("one"),
        tool_call_response("c1", "wait", {}),
        text_response("two"),
        text_response("three"),
    )
    first = u("first")
    assert continue_trace(agent, traceparent(CALLER_A), first.id)
    assert not continue_trace(agent, {"traceparent": "00-zz-bad-01"}, "nope")
    agent.followup(first)
    await within(agent.when_idle())
    agent.followup(u("second"))  # untraced; its turn waits in the tool
    await within(asyncio.sleep(0))
    third = u("third")
    assert continue_trace(agent, traceparent(CALLER_B), third.id)
    agent.followup(third)  # queued behind the running turn: the turn after it takes it in
    release.set()
    await within(agent.when_idle())
    turns = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert len(turns) == 3
    one, two, three = turns
    assert one.parent is not None and one.parent.is_remote
    assert ids_of(one.parent) == CALLER_A and ids_of(one.context)[0] == CALLER_A[0]
    assert [ids_of(lk.context) for lk in one.links] == []
    assert two.parent is None and ids_of(two.context)[0] != CALLER_A[0]
    assert [ids_of(lk.context) for lk in two.links] == [CALLER_A]  # later turns keep a link
    assert three.parent is not None and ids_of(three.parent) == CALLER_B
    assert [ids_of(lk.context) for lk in three.links] == [CALLER_A]
    # The agent's own spans of a caused turn are in the caller's trace.
    in_a = [s for s in otel.spans() if ids_of(s.context)[0] == CALLER_A[0]]
    assert [s.name for s in in_a] == ["invoke_agent", "chat m"]


async def test_a_traced_steer_into_a_running_turn_links_it(h: Harness, otel: Otel) -> None:
    """A traced message a running turn takes in at its next step (a steer) cannot re-parent
    that turn: it becomes a link of it, and the session's next turn links to it too."""
    otel.install(h.rt)
    release = asyncio.Event()
    h.rt.tools.register(waiting_tool(release))
    agent = await h.agent(
        tool_call_response("c1", "wait", {}), text_response("steered"), text_response("next")
    )
    agent.followup(u("go"))
    await within(asyncio.sleep(0))
    steer = u("steer")
    assert continue_trace(agent, traceparent(CALLER_B), steer.id)
    agent.steer(steer)
    release.set()
    await within(agent.when_idle())
    agent.followup(u("later"))
    await within(agent.when_idle())
    running, later = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert running.parent is None
    assert [ids_of(lk.context) for lk in running.links] == [CALLER_B]
    assert [ids_of(lk.context) for lk in later.links] == [CALLER_B]


async def test_invoke_agent_names_the_agent_and_its_provider(h: Harness, otel: Otel) -> None:
    """A session built from a service profile (header ``origin.profile``) names its agent:
    span ``invoke_agent NAME`` with ``gen_ai.agent.name``; a resumed turn of a known route
    carries ``gen_ai.provider.name`` from its start."""
    otel.install(h.rt)

    def setup(scope: Any) -> None:
        scope.agent.session.header["origin"] = {"kind": "service", "profile": "helper"}

    agent = await h.agent(text_response("one"), text_response("two"), setup=setup)
    agent.followup(u("a"))
    await within(agent.when_idle())
    agent.followup(u("b"))
    await within(agent.when_idle())
    turns = [s for s in otel.spans() if s.name.startswith("invoke_agent")]
    assert [s.name for s in turns] == ["invoke_agent helper", "invoke_agent helper"]
    for span in turns:
        assert (span.attributes or {})["gen_ai.agent.name"] == "helper"
        assert (span.attributes or {})["gen_ai.provider.name"] == "mock"
