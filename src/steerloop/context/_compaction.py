"""``install_compaction``: durable context compaction on the public hooks.

Automatic compaction is an ``agent/pre-step`` listener: once the other listeners decided what
the step enters, it estimates the request (``estimate_tokens`` + the entering messages) and,
above ``max_context_tokens``, writes one ``context/compacted`` before the step opens. At that
boundary no tool group runs and the step's own messages are not in the log yet, so neither
can be cut. ``agent.compact()`` reaches the same code through ``agent/compact``, inside a
maintenance job.

A ``summarize`` compaction asks the agent's model for a recap with a signal of its own,
linked to the turn's (or the maintenance job's), so a cancel stops it; the request is capped
at the smallest of the compaction's budget, ``_SUMMARY_MAX_TOKENS`` and the agent's own output
cap. A summary that fails, or a recap that would not shrink the context (``CompactionError``
``not-smaller``), writes nothing: the history stays as it was, the failure goes to
``context/compaction-failed`` and the turn goes on (a manual ``compact()`` raises it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from .. import AbortController, AbortSignal
from .. import hooks as h
from ..agent import Agent, live_agent
from ..errors import CompactionError, LlmError
from ..hooks import CompactPayload, Disposer, OfAgent, PreStepDecision, PreStepPayload
from ..llm import CallConfig, GenerateRequest, LlmFailure, TokenUsage
from ..messages import SystemMessage, TextBlock, UserMessage
from ..session.events import ContextCompacted, Replace, SessionEvent
from ._estimate import estimate_message_tokens, estimate_tokens, tokens_per_char
from ._plan import Plan, bounded, plan_cut, transcript, window_note

if TYPE_CHECKING:
    from .. import Runtime
    from ..hooks import AgentRef

__all__ = [
    "COMPACTION_FAILED",
    "CompactionFailed",
    "CompactionStrategy",
    "install_compaction",
]

CompactionStrategy = Literal["drop-tool-results", "window", "summarize"]

#: The most a summary request may produce, whatever the budget: a recap, not a rewrite.
_SUMMARY_MAX_TOKENS = 4_096
#: Characters of each tool result the summarizer sees.
_SUMMARY_TOOL_CHARS = 1_000
_SUMMARIZER_PROMPT = (
    "You compact a conversation between a user and an AI assistant that uses tools. Write a "
    "summary the assistant can continue from: the user's goals and constraints, decisions "
    "made, facts learned from tool results (paths, names, numbers), work done and work still "
    "open. Be concise and concrete; do not invent anything."
)


@dataclass(frozen=True, slots=True)
class CompactionFailed(OfAgent):
    """Payload of ``context/compaction-failed``: a summary failed; the history is unchanged."""

    agent: Agent
    strategy: str
    error: BaseException


COMPACTION_FAILED: h.EmitHook[CompactionFailed] = h.EmitHook("context/compaction-failed")
"""A summary failed and the history is unchanged: the turn goes on."""


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def install_compaction(
    rt: Runtime,
    *,
    max_context_tokens: int | None = None,
    keep_recent_tokens: int | None = None,
    strategy: CompactionStrategy = "summarize",
) -> Disposer:
    """Compact an agent's history before a request would exceed ``max_context_tokens``.

    Args:
        rt: the runtime whose agents are compacted.
        max_context_tokens: the bound on a request's estimated input; ``None`` uses the
            context window of the request's model (which must then be known).
        keep_recent_tokens: the newest history kept verbatim; a quarter of the bound when
            ``None``.
        strategy: ``"summarize"`` (the agent's model writes a recap), ``"drop-tool-results"``
            (the conversation as text, tool results as one-line stubs) or ``"window"`` (a
            note of what was left out).

    Returns:
        A ``Disposer`` removing the policy.

    Raises:
        ValueError: a non-positive bound, ``keep_recent_tokens >= max_context_tokens``, or an
            unknown strategy.
    """
    _positive("max_context_tokens", max_context_tokens)
    _positive("keep_recent_tokens", keep_recent_tokens)
    if (
        max_context_tokens is not None
        and keep_recent_tokens is not None
        and keep_recent_tokens >= max_context_tokens
    ):
        raise ValueError(
            f"keep_recent_tokens ({keep_recent_tokens}) must be below max_context_tokens "
            f"({max_context_tokens})"
        )
    if strategy not in get_args(CompactionStrategy):
        raise ValueError(
            f"strategy must be one of {get_args(CompactionStrategy)}, not {strategy!r}"
        )
    rt.hooks.define(COMPACTION_FAILED)
    policy = _Policy(rt, max_context_tokens, keep_recent_tokens, strategy)
    dispose_step = rt.hooks.on(h.PRE_STEP, policy.pre_step)
    dispose_compact = rt.hooks.on(h.AGENT_COMPACT, policy.on_compact)

    def dispose() -> None:
        dispose_step()
        dispose_compact()

    return Disposer(dispose)


class _Policy:
    def __init__(
        self,
        rt: Runtime,
        max_context_tokens: int | None,
        keep_recent_tokens: int | None,
        strategy: CompactionStrategy,
    ) -> None:
        self.rt = rt
        self.max_context_tokens = max_context_tokens
        self.keep_recent_tokens = keep_recent_tokens
        self.strategy = strategy
        # agent id -> the turn whose automatic summary failed: not asked again in that turn,
        # so a provider that keeps failing costs one summary request per turn, not per step.
        self.failed_turn: dict[str, int] = {}

    async def pre_step(
        self, payload: PreStepPayload, next_: Callable[[], Awaitable[PreStepDecision]]
    ) -> PreStepDecision:
        decision = await next_()
        # Only before a request: a reject sends none, and an empty first step ends the turn.
        if decision.kind != "enter" or (not decision.messages and payload.step == 1):
            return decision
        agent = _agent(payload.agent)
        if self.failed_turn.get(agent.id) == payload.turn:
            return decision
        bound, keep = await self.bounds(agent, payload.signal)
        if estimate_tokens(agent.session, decision.messages) <= bound:
            return decision
        # A failed summary is reported and writes nothing: the request goes out unchanged.
        await self.compact(agent, payload.signal, bound, keep, raise_failure=False)
        return decision

    async def on_compact(self, payload: CompactPayload) -> SessionEvent | None:
        agent = _agent(payload.agent)
        bound, keep = await self.bounds(agent, payload.signal)
        return await self.compact(agent, payload.signal, bound, keep, raise_failure=True)

    async def bounds(self, agent: Agent, signal: AbortSignal) -> tuple[int, int]:
        """``(max_context_tokens, keep_recent_tokens)`` for ``agent``'s current route."""
        bound = self.max_context_tokens
        if bound is None:
            config = current_config(agent)
            prepared = await self.rt.llm.prepare_call(config, signal)
            bound = prepared.context_window
            if bound is None:
                raise ValueError(
                    f"the context window of {config.provider}/{config.model} is unknown: "
                    "pass max_context_tokens to install_compaction"
                )
        keep = self.keep_recent_tokens if self.keep_recent_tokens is not None else bound // 4
        if keep >= bound:
            raise ValueError(
                f"keep_recent_tokens ({keep}) must be below the context bound ({bound})"
            )
        return bound, keep

    async def compact(
        self, agent: Agent, signal: AbortSignal, bound: int, keep: int, *, raise_failure: bool
    ) -> SessionEvent | None:
        """Write one ``context/compacted`` for ``agent``, or nothing when nothing is old enough."""
        session = agent.session
        plan = plan_cut(session, keep)
        if plan is None:
            return None
        before = estimate_tokens(session)
        # What the summary may take: half of what the kept part leaves of the bound.
        budget = max((bound - keep) // 2, 64)
        usage: TokenUsage | None = None
        try:
            if self.strategy == "window":
                text = window_note(session, plan.upto_seq)
            elif self.strategy == "drop-tool-results":
                whole = transcript(session, plan.nodes, tool_result_chars=None)
                text = bounded(whole, session, budget)
            else:
                text, usage = await self._summarize(agent, plan, signal, budget)
                text = bounded(text, session, budget)
            summary = (TextBlock(text),)
            ratio = tokens_per_char(session)
            after = (
                before
                - plan.tokens
                + estimate_message_tokens([UserMessage(id="summary", content=summary)], ratio)
            )
            # The model's recap can come out longer than what it replaces; the other
            # strategies are bounded notes the caller asked for, kept even on a tiny history.
            if self.strategy == "summarize" and after >= before:
                raise CompactionError(
                    "not-smaller",
                    f"the {self.strategy} summary would not shrink the context "
                    f"(~{before} → ~{after} tokens): the history is kept as it was",
                )
        except Exception as exc:
            signal.throw_if_aborted()  # a cancel is the turn's outcome, not a failure
            self.rt.hooks.emit(COMPACTION_FAILED, CompactionFailed(agent, self.strategy, exc))
            if raise_failure:
                raise
            self.failed_turn[agent.id] = session.last_turn
            return None
        return session.append(
            ContextCompacted(
                upto_seq=plan.upto_seq,
                summary=summary,
                strategy=self.strategy,
                tokens_before=before,
                tokens_after=max(after, 0),
                usage=usage,
            ),
            surface_op=Replace(plan.nodes[0], plan.upto_seq),
            source_event_seqs=plan.nodes,
        )

    async def _summarize(
        self, agent: Agent, plan: Plan, parent: AbortSignal, budget: int
    ) -> tuple[str, TokenUsage | None]:
        """Ask the agent's model for a recap of the compacted range (not a session event)."""
        controller = AbortController()
        unlink = parent.add_listener(controller.abort)
        signal = controller.signal
        try:
            config = current_config(agent)
            prepared = await self.rt.llm.prepare_call(config, signal)
            # The agent's own cap (its options', else the model's configured default) bounds
            # the summary too; so do the compaction's budget and the summary's own cap.
            own = config.max_tokens or prepared.adapter_defaults.get("max_tokens")
            caps = [budget, _SUMMARY_MAX_TOKENS, *([own] if isinstance(own, int) else [])]
            max_tokens = min(caps)
            config = config.replace(max_tokens=max_tokens)
            text = transcript(agent.session, plan.nodes, tool_result_chars=_SUMMARY_TOOL_CHARS)
            request = GenerateRequest(
                provider=prepared.provider,
                model=prepared.model,
                messages=(
                    SystemMessage(id="compaction-prompt", content=(TextBlock(_SUMMARIZER_PROMPT),)),
                    UserMessage(
                        id="compaction-request",
                        content=(
                            TextBlock(
                                f"{text}\n\n---\nSummarize the conversation above in at most "
                                f"about {budget * 3 // 4} words."
                            ),
                        ),
                    ),
                ),
                max_tokens=max_tokens,
                reasoning_effort=config.reasoning_effort,
                session_id=agent.session.id,
                signal=signal,
                config=config,
            )
            assembler = await prepared.collect(request)
            signal.throw_if_aborted()
            reason = assembler.reason
            if reason.kind in ("error", "aborted"):
                ended = f"the summary request ended {reason.kind}"
                raise LlmError(reason.failure or LlmFailure(message=ended, code="UNKNOWN"))
            summary = "\n".join(
                b.text for b in assembler.blocks() if isinstance(b, TextBlock)
            ).strip()
            if not summary:
                raise LlmError(
                    LlmFailure(message="the model returned an empty summary", code="EMPTY_SUMMARY")
                )
            return summary, assembler.usage
        finally:
            unlink()


def current_config(agent: Agent) -> CallConfig:
    """The route of the agent's next request: the last logged header's, else its options'."""
    header = agent.session.latest("request/header")
    if header is not None:
        config = header.data.header.get("config")
        if isinstance(config, dict):
            return CallConfig.from_json(config)
    return agent.options.call_config()


def _agent(agent: AgentRef) -> Agent:
    """The live ``Agent`` behind a hook payload (compaction needs its services and session)."""
    return live_agent(agent, "compaction")
