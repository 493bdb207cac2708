"""One admitted step: attempts (request → stream → settlement) and the tool group (§7.6–7.7)."""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

from .._cancel import escapes
from .._ids import new_id
from ..errors import AbortedError, LlmError
from ..llm._assembler import BlockAssembler
from ..llm._runtime import PreparedCall
from ..llm._types import CallConfig, GenerateRequest, LlmFailure, ToolSchema
from ..llm.chunks import StreamChunk
from ..messages import (
    AssistantMessage,
    MessageSource,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    UserMessage,
)
from ..session._events import (
    AssistantAttempt,
    AssistantMessageEvent,
    Replace,
    RequestContext,
    RequestHeader,
    StepBoundary,
    StreamRecord,
    SystemMessageEvent,
)
from ._decisions import (
    RequestErrorAction,
    RequestErrorPayload,
    RequestPayload,
    StreamFrame,
    StreamFramePayload,
)
from ._recovery import ToolCallTracker
from ._scheduler import ToolScheduler

if TYPE_CHECKING:
    from ._agent import Agent
    from ._driver import TurnState

__all__ = ["StepOutcome", "StepRunner"]

StepOutcome = Literal["completed", "max-tokens"] | None
_RETRY = object()
# Frame revisions are process-local: one counter per runtime, never persisted (C7.6-19).
_revisions: weakref.WeakKeyDictionary[Any, itertools.count[int]] = weakref.WeakKeyDictionary()


def _revision_counter(runtime: Any) -> itertools.count[int]:
    counter = _revisions.get(runtime)
    if counter is None:
        counter = _revisions[runtime] = itertools.count(1)
    return counter


class StepRunner:
    """Runs one step of a turn; returns ``completed``, ``max-tokens`` or ``None`` (owes)."""

    def __init__(self, agent: Agent, state: TurnState) -> None:
        self.agent = agent
        self.rt = agent.runtime
        self.session = agent.session
        self.state = state
        self.turn = state.turn
        self.step = state.step
        self.signal = state.signal

    async def run(
        self, messages: Sequence[UserMessage], prompt: str, starts_series: bool
    ) -> StepOutcome:
        boundary = StepBoundary(turn=self.turn, step=self.step)
        self.session.append("step/start", boundary)
        tracker = ToolCallTracker(self.session)
        failure: BaseException | None = None
        try:
            self.signal.throw_if_aborted()
            first = True
            while True:
                outcome = await self._attempt(first, messages, prompt, starts_series)
                if outcome is not _RETRY:
                    return outcome  # type: ignore[no-any-return]
                first = False
        except BaseException as exc:
            # Every exit closes the step: a host exception (Ctrl-C, exit, cancellation of
            # the driver task) answers the open calls too before it goes on.
            failure = exc
            if not self.signal.aborted:
                self.state.failed_in_step = True
            try:
                tracker.recover(self.turn, self.step)
            except Exception as repair_exc:
                failure = BaseExceptionGroup("step failed and recovery failed", [exc, repair_exc])
                raise failure from None
            raise
        finally:
            tracker.close()
            try:
                self.session.append("step/end", boundary)
            except Exception as end_exc:
                if failure is None:
                    raise
                failure.add_note(f"step/end could not be written: {end_exc!r}")

    # --- one attempt -----------------------------------------------------------------

    async def _attempt(
        self, first: bool, messages: Sequence[UserMessage], prompt: str, starts_series: bool
    ) -> Any:
        agent, rt, signal = self.agent, self.rt, self.signal
        if rt.hooks.has("agent/request"):

            async def default_config() -> CallConfig:
                return self._default_config()

            config = await rt.hooks.waterfall(
                "agent/request", RequestPayload(agent, self.turn, self.step, signal), default_config
            )
        else:
            # No listener: the chain is its default; build no payload, await no coroutine.
            config = self._default_config()
        signal.throw_if_aborted()
        if not isinstance(config, CallConfig):
            raise TypeError(f"agent/request must return a CallConfig, not {config!r}")
        prepared = await rt.llm.prepare_call(config, signal)
        signal.throw_if_aborted()
        # A pre-step series declaration belongs to the step's first request, not its retries.
        series = starts_series and first
        self._project_system_prompt(prompt, prepared, series)
        if first:
            for message in messages:
                self.session.append("user/message", message, surface_op="append")
        request = self._build_request(prepared, series)
        signal.throw_if_aborted()
        return await self._stream(prepared, request)

    def _default_config(self) -> CallConfig:
        header = self.session.latest("request/header")
        agent = self.agent
        if not agent._requested or header is None:
            return agent.options.call_config()
        cached = agent._header_config
        if cached is None or cached[0] != header.seq:
            cached = agent._header_config = (
                header.seq,
                CallConfig.from_json(header.data.header.get("config", {})),
            )
        return cached[1]

    def _project_system_prompt(
        self, prompt: str, prepared: PreparedCall, starts_series: bool
    ) -> None:
        session = self.session
        nodes = session.system_nodes()
        content = (TextBlock(prompt),) if prompt else ()

        def event(text_content: tuple[TextBlock, ...]) -> SystemMessageEvent:
            return SystemMessageEvent(
                turn=self.turn,
                step=self.step,
                message=SystemMessage(id=new_id("msg"), content=text_content),
            )

        if not nodes:
            if session.latest("system/message") is None:
                session.append("system/message", event(content), surface_op="append")
            return
        active = [s for s in nodes if session.event(s).data.message.content]
        if prepared.reads_in_history_system and not starts_series:
            current = session.event(active[-1]).data.message.content if active else ()
            if current == content:
                return
            if content and active:
                session.append("system/message", event(content), surface_op="append")
                return
        # Normalise: the head node carries the prompt and no other system node is active, so
        # derive_messages() holds at most one system message, at index 0 (C7.6-4/5).
        head = nodes[0]
        if session.event(head).data.message.content != content:
            session.append(
                "system/message",
                event(content),
                surface_op=Replace(head, head),
                source_event_seqs=(head,),
            )
        for seq in active:
            if seq != head:
                session.append(
                    "system/message",
                    event(()),
                    surface_op=Replace(seq, seq),
                    source_event_seqs=(seq,),
                )

    def _build_request(self, prepared: PreparedCall, starts_series: bool) -> GenerateRequest:
        agent, session = self.agent, self.session
        config = prepared.config
        tools = self.rt.tools.schemas(agent.id)
        header = _header(agent, config, prepared.adapter_defaults, tools)
        latest = session.latest("request/header")
        reason: str | None = None
        series = starts_series or session.surface_replaced != agent._replaced_at_request
        if not agent._requested:
            reason = "initial" if latest is None else "resume"
        elif latest is None or (latest.data.header is not header and latest.data.header != header):
            reason = "change"
        elif series:
            reason = "series"
        if reason is not None:
            session.append(
                "request/header",
                RequestHeader(header=header, reason=reason, starts_series=series),  # type: ignore[arg-type]
            )
        context = RequestContext(
            provider=prepared.provider,
            model=prepared.model,
            context_window=prepared.context_window,
            system_prompt_update="in-history" if prepared.reads_in_history_system else None,
        )
        latest_ctx = session.latest("request/context")
        if latest_ctx is None or latest_ctx.data != context:
            session.append("request/context", context)
        agent._requested = True
        agent._replaced_at_request = session.surface_replaced
        return GenerateRequest(
            provider=prepared.provider,
            model=prepared.model,
            messages=session.derived_tuple(),
            tools=tools,
            max_tokens=config.max_tokens,
            reasoning_effort=config.reasoning_effort,
            session_id=session.id,
            signal=self.signal,
            config=config,
        )

    # --- streaming -------------------------------------------------------------------

    async def _stream(self, prepared: PreparedCall, request: GenerateRequest) -> Any:
        iterator = prepared.open_stream(request)
        live = _LiveFrames(self.agent, new_id("att"))
        live.start(self.turn, self.step)
        assembler = BlockAssembler()
        records: list[StreamRecord] = []
        clock = self.rt.clock
        signal = self.signal
        raised: Exception | None = None
        try:
            # The signal is checked before every fetch and before handling what a fetch
            # returned, so after an abort no further chunk is consumed (C7.6-12).
            while not signal.aborted:
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                if signal.aborted:
                    break
                if not isinstance(chunk, _CHUNK_TYPES):
                    # Recording it would put a value in the log that cannot be stored.
                    raise LlmError(
                        LlmFailure(
                            message=f"the adapter yielded {_brief(chunk)}, not a stream chunk",
                            code="BAD_RESPONSE",
                        )
                    )
                record = StreamRecord(clock(), chunk)
                records.append(record)
                assembler.push(chunk)
                live.chunk(record)
        except BaseException as exc:
            if escapes(exc):
                raise
            raised = exc if isinstance(exc, Exception) else _stream_failure(exc)
        finally:
            await _aclose(iterator)
        if signal.aborted:
            return self._settle_aborted(prepared, live, assembler, records)
        if raised is not None:
            self._settle_attempt(live, records, raised)
            raise raised
        reason = assembler.reason
        if reason.kind in ("error", "aborted"):
            failure = _failure_of_finish(reason.failure, reason.kind)
            self._settle_attempt(live, records, LlmError(failure))
            return await self._offer_failure(prepared, failure)
        return await self._settle_message(prepared, live, assembler, records)

    def _settle(self, live: _LiveFrames, type: str, data: Any, *, surface: bool = False) -> Any:
        """Append the settling event of an attempt and close its live frames."""
        try:
            event = self.session.append(type, data, surface_op="append" if surface else None)
        except BaseException:
            live.end(None, None)
            raise
        live.end(event.type, event.seq)
        return event

    def _settle_aborted(
        self,
        prepared: PreparedCall,
        live: _LiveFrames,
        assembler: BlockAssembler,
        records: list[StreamRecord],
    ) -> Any:
        prefix = assembler.safe_prefix()
        if prefix:
            message = self._assistant(prefix, assembler, prepared)
            self._settle(
                live,
                "assistant/message",
                AssistantMessageEvent(
                    turn=self.turn,
                    step=self.step,
                    message=message,
                    stream=tuple(records),
                    usage=assembler.usage,
                    interrupted=True,
                ),
                surface=True,
            )
        else:
            self._settle(
                live,
                "assistant/attempt",
                AssistantAttempt(turn=self.turn, step=self.step, stream=tuple(records)),
            )
        raise AbortedError(self.signal.reason)

    def _settle_attempt(
        self, live: _LiveFrames, records: list[StreamRecord], original: Exception
    ) -> None:
        """Settle a failed stream as ``assistant/attempt`` (C7.7-12 when that fails too)."""
        try:
            self._settle(
                live,
                "assistant/attempt",
                AssistantAttempt(turn=self.turn, step=self.step, stream=tuple(records)),
            )
        except Exception as append_exc:
            raise ExceptionGroup(
                "settling the failed attempt failed", [original, append_exc]
            ) from None

    async def _offer_failure(self, prepared: PreparedCall, failure: LlmFailure) -> Any:
        async def terminal() -> RequestErrorAction | None:
            return None

        action = await self.rt.hooks.waterfall(
            "agent/request-error",
            RequestErrorPayload(
                self.agent,
                self.turn,
                self.step,
                prepared.provider,
                failure,
                prepared.retry_policy,
                self.signal,
            ),
            terminal,
        )
        self.signal.throw_if_aborted()
        if isinstance(action, RequestErrorAction):
            return _RETRY
        raise LlmError(failure)

    @staticmethod
    def _assistant(
        blocks: tuple[Any, ...], assembler: BlockAssembler, prepared: PreparedCall
    ) -> AssistantMessage:
        return AssistantMessage(
            id=new_id("msg"),
            content=blocks,
            source=MessageSource(
                kind="model",
                provider=prepared.provider,
                model=prepared.model,
                replay_state=assembler.replay_state,
            ),
        )

    async def _settle_message(
        self,
        prepared: PreparedCall,
        live: _LiveFrames,
        assembler: BlockAssembler,
        records: list[StreamRecord],
    ) -> StepOutcome:
        kind = assembler.reason.kind
        blocks = assembler.blocks()
        if kind == "max-tokens":
            blocks = tuple(b for b in blocks if not isinstance(b, ToolCallBlock))
        message = self._assistant(blocks, assembler, prepared)
        self._settle(
            live,
            "assistant/message",
            AssistantMessageEvent(
                turn=self.turn,
                step=self.step,
                message=message,
                stream=tuple(records),
                usage=assembler.usage,
            ),
            surface=True,
        )
        if kind == "max-tokens":
            return "max-tokens"
        calls = message.tool_calls
        if not calls:
            return "completed"
        scheduler = ToolScheduler(self.agent, self.turn, self.step, self.signal)
        concluded = await scheduler.run(calls)
        return "completed" if concluded else None


def _header(
    agent: Agent, config: CallConfig, defaults: Mapping[str, Any], tools: tuple[ToolSchema, ...]
) -> dict[str, Any]:
    """The ``request/header`` body; the same dict while config, defaults and tools are unchanged.

    ``config`` and ``tools`` are compared by identity (the header config and the registry's
    schemas are cached objects), so a steady step rebuilds nothing.
    """
    cached = agent._header_body
    if cached is not None and cached[0] is config and cached[2] is tools and cached[1] == defaults:
        return cached[3]
    header: dict[str, Any] = {"config": config.to_json()}
    if defaults:
        header["adapter_defaults"] = dict(defaults)
    if tools:
        header["tools"] = [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools
        ]
    agent._header_body = (config, dict(defaults), tools, header)
    return header


class _LiveFrames:
    """Emits ``agent/assistant-stream`` frames; a no-op without listeners."""

    __slots__ = ("agent", "attempt_id", "hooks", "index", "on", "revisions")

    def __init__(self, agent: Agent, attempt_id: str) -> None:
        self.agent = agent
        self.hooks = agent.runtime.hooks
        self.revisions = _revision_counter(agent.runtime)
        self.attempt_id = attempt_id
        self.on = self.hooks.has("agent/assistant-stream")
        self.index = 0

    def _emit(self, frame: StreamFrame) -> None:
        self.hooks.emit("agent/assistant-stream", StreamFramePayload(self.agent, frame))

    def start(self, turn: int, step: int) -> None:
        if self.on:
            self._emit(
                StreamFrame(
                    kind="start",
                    attempt_id=self.attempt_id,
                    revision=next(self.revisions),
                    turn=turn,
                    step=step,
                )
            )

    def chunk(self, record: StreamRecord) -> None:
        if self.on:
            self._emit(
                StreamFrame(
                    kind="chunk",
                    attempt_id=self.attempt_id,
                    revision=next(self.revisions),
                    index=self.index,
                    time=record.time,
                    chunk=record.chunk,
                )
            )
        self.index += 1

    def end(self, event_type: str | None, seq: int | None) -> None:
        if self.on:
            outcome: dict[str, Any] = (
                {"kind": "committed", "event_type": event_type, "seq": seq}
                if seq is not None
                else {"kind": "abandoned"}
            )
            self._emit(
                StreamFrame(
                    kind="end",
                    attempt_id=self.attempt_id,
                    revision=next(self.revisions),
                    index=self.index,
                    outcome=outcome,
                )
            )


_CHUNK_TYPES = get_args(StreamChunk)


def _brief(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:200]}{'…' if len(text) > 200 else ''}"


def _stream_failure(exc: BaseException) -> LlmError:
    """An adapter stream that raised a non-``Exception`` (e.g. ``GeneratorExit``) failed."""
    text = str(exc)
    name = type(exc).__name__
    error = LlmError(
        LlmFailure(
            message=f"the adapter stream raised {name}: {text}"
            if text
            else f"the adapter stream raised {name}",
            code="UNKNOWN",
        )
    )
    error.__cause__ = exc
    return error


def _failure_of_finish(failure: LlmFailure | None, kind: str) -> LlmFailure:
    if failure is not None:
        return failure
    return LlmFailure(
        message=f"the provider ended the stream with {kind}",
        code="ABORTED" if kind == "aborted" else "UNKNOWN",
    )


async def _aclose(iterator: AsyncIterator[StreamChunk]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
