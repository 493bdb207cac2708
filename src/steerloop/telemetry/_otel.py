"""OpenTelemetry spans and metrics for turns, model attempts and tool calls.

A plugin on the public hooks only: ``session/event`` gives the durable boundaries (turn,
settled attempt, tool call and result) and ``agent/assistant-stream`` the live edges of
each attempt (its start and first chunk). Every span gets an explicit parent: the turn's
``invoke_agent`` span is the parent of its ``chat`` and ``execute_tool`` spans, and a
sub-agent's turn finds the parent's ``execute_tool`` span through the child's session
header (``parent_session`` + ``origin.call_id``, written by ``spawn_agent``), falling back
to the tool call running in the context that opened the child's turn.

Cost: until a tracer or meter provider is configured (explicitly or globally) only
``agent/status`` is listened to, so an application without an SDK pays nothing per step;
a provider set later applies from the next turn that starts. ``agent/assistant-stream``
is listened to only while a recorded turn is open, since its listeners make the loop build
a frame per chunk.

An attempt whose stream ended without a finish (it raised, or the turn was cancelled)
keeps its span pending until the turn ends, whose reason says which it was; the span's
end time is still the moment the stream ended.
"""

from __future__ import annotations

import contextvars
import os
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
)

from .. import Runtime
from .. import hooks as h
from ..hooks import (
    INBOX_CLAIMED,
    AgentPayload,
    AgentRef,
    ClaimedPayload,
    Disposer,
    SessionEventPayload,
    StatusPayload,
    StreamFramePayload,
)
from ..session import Session
from ..session.events import SessionEvent
from ._content import input_messages, output_messages, redacted, text_of
from ._metrics import ClientMetrics, Tokens
from ._trace import span_context_of, step_trace, turn_trace

__all__ = ["Telemetry", "install_otel", "link_next_turn"]

# Attribute names of the GenAI semantic conventions (copied as names only; the
# conventions package is a test dependency, not a runtime one).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the v1.36 name of PROVIDER, kept unless the latest is opted in
CONVERSATION_ID = "gen_ai.conversation.id"
AGENT_ID = "gen_ai.agent.id"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

CANCELLED = "cancelled"
"""``error.type`` of a cancelled turn or attempt (the span status stays unset)."""
OTHER = "_OTHER"
OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST = "gen_ai_latest_experimental"
_CANCEL_CODES = frozenset({"ABORTED", "ABORTED_BEFORE_DISPATCH"})

try:  # the API's stand-in until the application sets a meter provider
    from opentelemetry.metrics._internal import _ProxyMeterProvider as _Unset
except ImportError:  # pragma: no cover - another API layout: treat every provider as live

    class _Unset:  # type: ignore[no-redef]
        pass


_pending_links: weakref.WeakKeyDictionary[Session, SpanContext] = weakref.WeakKeyDictionary()


def link_next_turn(agent: AgentRef, headers: Mapping[str, str]) -> bool:
    """Link ``agent``'s next ``invoke_agent`` span to the W3C trace context in ``headers``.

    Returns whether the headers carried a valid context (an invalid or absent one is
    ignored). A server continuing the caller's trace uses ``continue_trace`` instead, which
    makes the turn a child of the caller's span.
    """
    span_context = span_context_of(headers)
    if span_context is None:
        return False
    _pending_links[agent.session] = span_context
    return True


class _Chat:
    """One attempt: its span, timing and settled outcome."""

    __slots__ = (
        "attrs",
        "elapsed",
        "end_ns",
        "first",
        "last",
        "outcome",
        "span",
        "start",
        "tokens",
    )

    def __init__(self, span: Span, attrs: dict[str, Any]) -> None:
        self.span = span
        self.attrs = attrs  # the metric attributes
        self.start = time.perf_counter()
        self.first = False
        self.last = self.start  # when the latest chunk came
        self.tokens: Tokens | None = None
        self.outcome: tuple[str, Any] | None = None
        self.end_ns: int | None = None  # when the stream ended (the span's end)
        self.elapsed: float | None = None  # seconds from start to the stream's end


class _Turn:
    __slots__ = ("chats", "ctx", "pending", "provider", "span", "tools")

    def __init__(self, span: Span, provider: bool) -> None:
        self.span = span
        self.provider = provider  # gen_ai.provider.name is set on the span
        self.ctx = trace.set_span_in_context(span)
        self.chats: dict[str, _Chat] = {}  # attempt id -> open attempt
        self.pending: list[_Chat] = []  # ended streams whose outcome the turn end decides
        self.tools: dict[str, Span] = {}  # call id -> open call


class Telemetry:
    """An installed telemetry plugin; calling it disposes it (see ``install_otel``)."""

    def __init__(
        self,
        rt: Runtime,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: metrics.MeterProvider | None,
        capture_content: bool,
    ) -> None:
        self.tracer = trace.get_tracer("steerloop.telemetry", tracer_provider=tracer_provider)
        meter = metrics.get_meter("steerloop.telemetry", meter_provider=meter_provider)
        self.capture = capture_content
        opt_in = {s.strip() for s in os.environ.get(OPT_IN_ENV, "").split(",")}
        self.legacy = LATEST not in opt_in
        self.metrics = ClientMetrics(meter, legacy=self.legacy)
        self.turns: dict[str, _Turn] = {}  # session (= agent) id -> open turn
        self.models: dict[str, tuple[str, str]] = {}  # session id -> (provider, model)
        # The tool call whose body runs in this context: (agent id, call id).
        self.running: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
            "steerloop_otel_tool", default=None
        )
        self.handlers: dict[str, Callable[[Session, SessionEvent], None]] = {
            "turn/start": self._turn_start,
            "turn/end": self._turn_end,
            "request/context": self._request_context,
            "assistant/message": self._settled,
            "assistant/attempt": self._settled,
            "tool/call": self._tool_call,
            "tool/result": self._tool_result,
        }
        self.hooks = rt.hooks
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.disposers: list[Disposer] = []
        # Registered only while a recorded turn is open: with no listener the loop builds no
        # frames at all.
        self.frames: Disposer | None = None
        # With neither provider configured nothing could be recorded: listen per event only
        # once one is (checked whenever an agent starts running), so an application without
        # an SDK pays two calls per busy period, not several per step.
        self.watch: Disposer | None = None
        if self._configured():
            self._go_live()
        else:
            self.watch = rt.hooks.on(h.STATUS, self._on_status)

    def _configured(self) -> bool:
        provider = self.tracer_provider or trace.get_tracer_provider()
        unset = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        return not isinstance(provider, unset) or self._metrics_live()

    def _go_live(self) -> None:
        self.disposers += [
            self.hooks.on(h.SESSION_EVENT, self._on_event),
            self.hooks.on(h.AGENT_DISPOSED, self._on_disposed),
            self.hooks.on(INBOX_CLAIMED, self._on_claimed),
        ]

    def _on_status(self, payload: StatusPayload) -> None:
        # "running" is reported before the turn/start it leads to is written.
        if self.watch is not None and payload.status == "running" and self._configured():
            self.watch()
            self.watch = None
            self._go_live()

    # --- disposal ---------------------------------------------------------------------

    def __call__(self) -> None:
        """Stop emitting; spans still open are ended now so none is left half-open."""
        disposers, self.disposers = self.disposers, []
        if self.watch is not None:
            disposers.append(self.watch)
            self.watch = None
        for dispose in disposers:
            dispose()
        self._unwatch_frames()
        turns, self.turns = self.turns, {}
        for turn in turns.values():
            for chat in (*turn.pending, *turn.chats.values()):
                chat.span.end(end_time=chat.end_ns)
            for span in turn.tools.values():
                span.end()
            turn.span.end()
        self.models.clear()

    # --- routing ----------------------------------------------------------------------

    def _on_event(self, payload: SessionEventPayload) -> None:
        event = payload.event
        handler = self.handlers.get(event.type)
        if handler is not None:
            handler(payload.session, event)

    def _on_disposed(self, payload: AgentPayload) -> None:
        self.models.pop(payload.agent.id, None)

    def _on_frame(self, payload: StreamFramePayload) -> None:
        frame = payload.frame
        turn = self.turns.get(payload.agent.id)
        if turn is None:
            return
        kind = frame.kind
        if kind == "chunk":
            chat = turn.chats.get(frame.attempt_id)
            if chat is not None:
                now = time.perf_counter()
                self.metrics.chunk(chat.attrs, not chat.first, now - chat.last)
                chat.first = True
                chat.last = now
        elif kind == "start":
            self._chat_start(turn, payload.agent, frame.attempt_id)
        elif kind == "end":
            chat = turn.chats.pop(frame.attempt_id, None)
            if chat is not None:
                chat.end_ns = time.time_ns()
                chat.elapsed = time.perf_counter() - chat.start
                if chat.outcome is None:
                    turn.pending.append(chat)
                else:
                    self._chat_end(chat)

    # --- turns ------------------------------------------------------------------------

    def _turn_start(self, session: Session, event: SessionEvent) -> None:
        previous = self.turns.pop(session.id, None)
        if previous is not None:  # a turn/end we never saw (installed mid-turn): close it
            self._close_turn(previous, None)
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            CONVERSATION_ID: session.id,
            AGENT_ID: session.id,
        }
        name = _agent_name(session)
        if name is not None:
            attributes[AGENT_NAME] = name
        provider = self._known_provider(session)
        if provider:
            attributes[PROVIDER] = provider
        # The caller of a message this turn takes in is its parent (a sub-agent's turn
        # keeps its spawning call as parent; the caller is then a link).
        caller, links = turn_trace(session)
        context = self._parent_of(session)
        if caller is not None:
            if context is None:
                context = trace.set_span_in_context(NonRecordingSpan(caller))
            else:
                links.insert(0, caller)
        link = _pending_links.pop(session, None)
        if link is not None and link not in links:
            links.append(link)
        span = self.tracer.start_span(
            f"invoke_agent {name}" if name is not None else "invoke_agent",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=[Link(lk) for lk in links] or None,
        )
        if not span.is_recording() and not self._metrics_live():
            return  # nothing would be recorded: track nothing for this turn
        self.turns[session.id] = _Turn(span, bool(provider))
        if self.frames is None:
            self.frames = self.hooks.on(h.ASSISTANT_STREAM, self._on_frame)

    def _metrics_live(self) -> bool:
        provider = self.meter_provider or metrics.get_meter_provider()
        # The API's default before the application sets a provider, or the explicit no-op.
        return not isinstance(provider, (metrics.NoOpMeterProvider, _Unset))

    def _unwatch_frames(self) -> None:
        frames, self.frames = self.frames, None
        if frames is not None:
            frames()

    def _parent_of(self, session: Session) -> Context | None:
        """The sub-agent's initiating tool call, else ``None`` (the caller's context)."""
        header = getattr(session, "header", None)
        parent_id = header.get("parent_session") if isinstance(header, dict) else None
        running = self.running.get()
        if isinstance(parent_id, str):
            parent = self.turns.get(parent_id)
            if parent is not None:
                origin = header.get("origin") if isinstance(header, dict) else None
                call_id = origin.get("call_id") if isinstance(origin, dict) else None
                span = parent.tools.get(call_id) if isinstance(call_id, str) else None
                if span is None and running is not None and running[0] == parent_id:
                    span = parent.tools.get(running[1])
                return trace.set_span_in_context(span or parent.span)
        if running is not None:
            turn = self.turns.get(running[0])
            span = turn.tools.get(running[1]) if turn is not None else None
            if span is not None:
                return trace.set_span_in_context(span)
        return None

    def _turn_end(self, session: Session, event: SessionEvent) -> None:
        turn = self.turns.pop(session.id, None)
        if turn is not None:
            self._close_turn(turn, event.data.reason)
            if not self.turns:
                self._unwatch_frames()

    def _close_turn(self, turn: _Turn, reason: Any) -> None:
        kind = getattr(reason, "kind", None)
        error = getattr(reason, "error", None)
        if kind == "aborted":
            outcome: tuple[str, Any] = ("cancelled", None)
        elif kind == "error" and error is not None:
            outcome = ("error", error)
        else:
            outcome = ("error", None)
        for chat in (*turn.pending, *turn.chats.values()):
            chat.outcome = outcome
            if chat.end_ns is None:
                chat.end_ns = time.time_ns()
            self._chat_end(chat)
        for span in turn.tools.values():
            # A call with no result: only a cancelled or failed step leaves one.
            span.set_attribute(ERROR_TYPE, CANCELLED if kind == "aborted" else OTHER)
            span.end()
        span = turn.span
        if kind == "aborted":
            span.set_attribute(ERROR_TYPE, CANCELLED)
        elif kind == "error":
            code = getattr(error, "code", None) or OTHER
            span.set_attribute(ERROR_TYPE, code)
            message = getattr(error, "message", None)
            span.set_status(Status(StatusCode.ERROR, redacted(message) if message else None))
        span.end()

    # --- attempts ---------------------------------------------------------------------

    def _request_context(self, session: Session, event: SessionEvent) -> None:
        data = event.data
        self.models[session.id] = (data.provider, data.model)
        turn = self.turns.get(session.id)
        if turn is not None and not turn.provider and data.provider:
            # A new session's first turn learns its provider with its first request.
            turn.span.set_attribute(PROVIDER, data.provider)
            turn.provider = True

    def _known_provider(self, session: Session) -> str:
        return self._model_of(session)[0]

    def _on_claimed(self, payload: ClaimedPayload) -> None:
        # A traced message a running turn took in at a step boundary (a steer): its caller
        # becomes a link of that turn (its parent was fixed at its start).
        agent = payload.agent
        span_context = step_trace(agent.session, payload.message.id)
        turn = self.turns.get(agent.id)
        if span_context is not None and turn is not None:
            turn.span.add_link(span_context)

    def _model_of(self, session: Session) -> tuple[str, str]:
        known = self.models.get(session.id)
        if known is None:
            # A resumed session whose route is unchanged logs no new request/context.
            known = ("", "")
            for event in reversed(session.events):
                if event.type == "request/context":
                    known = (event.data.provider, event.data.model)
                    break
            self.models[session.id] = known
        return known

    def _chat_start(self, turn: _Turn, agent: AgentRef, attempt_id: str) -> None:
        session = agent.session
        provider, model = self._model_of(session)
        attrs: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: model,
        }
        if self.legacy:
            attrs[SYSTEM] = provider
        span_attrs = dict(attrs)
        span_attrs[CONVERSATION_ID] = session.id
        if self.capture:
            span_attrs[INPUT_MESSAGES] = input_messages(session.derive_messages())
        span = self.tracer.start_span(
            f"chat {model}", context=turn.ctx, kind=SpanKind.CLIENT, attributes=span_attrs
        )
        turn.chats[attempt_id] = _Chat(span, attrs)

    def _settled(self, session: Session, event: SessionEvent) -> None:
        turn = self.turns.get(session.id)
        if turn is None or not turn.chats:
            return
        # Attempts of one agent never overlap: the open one is the one settling.
        chat = next(reversed(turn.chats.values()))
        data = event.data
        usage = getattr(data, "usage", None)
        finish = None
        for record in data.stream:
            chunk = record.chunk
            if chunk.kind == "finish":
                finish = chunk.reason
            elif chunk.kind == "usage" and usage is None:
                usage = chunk.usage
        span = chat.span
        message = event.type == "assistant/message"
        if message and data.message.source.model:
            chat.attrs[RESPONSE_MODEL] = data.message.source.model
            span.set_attribute(RESPONSE_MODEL, data.message.source.model)
        if usage is not None:
            self._usage(chat, usage)
        if message:
            if data.interrupted:
                chat.outcome = ("cancelled", None)
                return
            reason = finish.kind if finish is not None else "stop"
            span.set_attribute(FINISH_REASONS, (reason,))
            if self.capture:
                span.set_attribute(OUTPUT_MESSAGES, output_messages(data.message, reason))
            chat.outcome = ("ok", None)
        elif finish is not None and finish.kind in ("error", "aborted"):
            span.set_attribute(FINISH_REASONS, (finish.kind,))
            chat.outcome = ("error", finish.failure)
        # else: the stream raised or was cancelled; the turn's end decides which.

    def _usage(self, chat: _Chat, usage: Any) -> None:
        cache_read = usage.cache_read_tokens or 0
        cache_write = usage.cache_write_tokens or 0
        reasoning = usage.reasoning_tokens or 0
        # The conventions count cached input within input tokens and reasoning within output.
        input_tokens = usage.input_tokens + cache_read + cache_write
        output_tokens = usage.output_tokens + reasoning
        span = chat.span
        span.set_attribute(INPUT_TOKENS, input_tokens)
        span.set_attribute(OUTPUT_TOKENS, output_tokens)
        if usage.cache_read_tokens is not None:
            span.set_attribute(CACHE_READ_TOKENS, cache_read)
        if usage.cache_write_tokens is not None:
            span.set_attribute(CACHE_CREATION_TOKENS, cache_write)
        if usage.reasoning_tokens is not None:
            span.set_attribute(REASONING_TOKENS, reasoning)
        chat.tokens = Tokens(
            input_tokens,
            output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
        )
        self.metrics.settled_usage(chat.attrs, chat.tokens)

    def _chat_end(self, chat: _Chat) -> None:
        kind, failure = chat.outcome or ("error", None)
        span = chat.span
        attrs = chat.attrs
        if kind == "cancelled":
            span.set_attribute(FINISH_REASONS, ("aborted",))
            span.set_attribute(ERROR_TYPE, CANCELLED)
            attrs[ERROR_TYPE] = CANCELLED
        elif kind == "error":
            code = getattr(failure, "code", None) or OTHER
            message = getattr(failure, "message", None)
            span.set_attribute(ERROR_TYPE, code)
            span.set_status(Status(StatusCode.ERROR, redacted(message) if message else None))
            attrs[ERROR_TYPE] = code
        elapsed = chat.elapsed if chat.elapsed is not None else time.perf_counter() - chat.start
        self.metrics.ended(attrs, elapsed, chat.tokens)
        span.end(end_time=chat.end_ns)

    # --- tool calls -------------------------------------------------------------------

    def _tool_call(self, session: Session, event: SessionEvent) -> None:
        turn = self.turns.get(session.id)
        if turn is None:
            return
        data = event.data
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: data.name,
            TOOL_CALL_ID: data.call_id,
            TOOL_TYPE: "function",
        }
        if self.capture:
            attributes[TOOL_ARGUMENTS] = redacted(data.arguments)
        turn.tools[data.call_id] = self.tracer.start_span(
            f"execute_tool {data.name}",
            context=turn.ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        # The body's task copies this context when created right after (or the body runs
        # inline in it): a sub-agent turn it opens can find this call.
        self.running.set((session.id, data.call_id))

    def _tool_result(self, session: Session, event: SessionEvent) -> None:
        turn = self.turns.get(session.id)
        if turn is None:
            return
        data = event.data
        span = turn.tools.pop(data.message.call_id, None)
        if span is None:
            return
        if self.capture:
            span.set_attribute(TOOL_RESULT, redacted(text_of(data.message.content)))
        error = data.error
        if data.message.is_error:
            code = error.code if error is not None else OTHER
            span.set_attribute(ERROR_TYPE, code)
            if code not in _CANCEL_CODES:
                span.set_status(Status(StatusCode.ERROR))
        span.end()
        self.running.set(None)


def install_otel(
    rt: Runtime,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    capture_content: bool = False,
) -> Telemetry:
    """Emit OpenTelemetry spans and metrics for ``rt``'s agents (GenAI conventions).

    Args:
        rt: the runtime.
        tracer_provider: default the global one (a no-op until the application sets one).
        meter_provider: default the global one.
        capture_content: record prompts, completions, tool arguments and results (always
            with secret-shaped text redacted).

    Returns:
        ``dispose``: call it to stop emitting.
    """
    return Telemetry(rt, tracer_provider, meter_provider, capture_content)


def _agent_name(session: Session) -> str | None:
    """The agent's name: the service profile that built the session (its header's
    ``origin.profile``), when there is one."""
    header = getattr(session, "header", None)
    origin = header.get("origin") if isinstance(header, dict) else None
    name = origin.get("profile") if isinstance(origin, dict) else None
    return name if isinstance(name, str) and name else None
