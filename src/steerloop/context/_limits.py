"""``install_limits``: per-turn and per-session usage limits on the public hooks.

Before each step's request (``agent/pre-step``) a limit that the step would exceed rejects
it with the limit's name as the reason, so the turn ends ``blocked`` with
``turn/end.reason.detail`` naming it. Before each tool dispatch (``tools/pre-execute``) a
call beyond ``max_tool_calls_per_turn`` is denied (``DENIED``, not run) and the next
pre-step ends the turn.

Token limits count what providers reported (``assistant/message.usage``, a summary's
``context/compacted.usage`` and an MCP server's sample's ``mcp/sampled.usage``: input, cache
reads and writes, output, reasoning) and add the
estimated input of the request about to be sent (``estimate_tokens``): a request is refused
when spent + its estimated input would exceed the limit.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .. import hooks as h
from ..hooks import AgentPayload, Disposer, PreStepDecision, PreStepPayload, ToolHookPayload
from ..llm import TokenUsage
from ..session import Session
from ..session.events import AssistantMessageEvent, ContextCompacted, MCPSampled, TurnStart
from ..tools import ToolDecision
from ._compaction import _positive
from ._estimate import estimate_tokens

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["install_limits", "session_usage"]


def _total(usage: TokenUsage) -> int:
    return (
        usage.input_tokens
        + usage.output_tokens
        + (usage.cache_read_tokens or 0)
        + (usage.cache_write_tokens or 0)
        + (usage.reasoning_tokens or 0)
    )


class _Spent:
    """Reported tokens of one session, folded incrementally: in all and in its latest turn."""

    __slots__ = ("scanned", "session_total", "turn", "turn_total")

    def __init__(self) -> None:
        self.scanned = 0
        self.session_total = 0
        self.turn = 0
        self.turn_total = 0

    def update(self, session: Session) -> None:
        events = session.events
        for index in range(self.scanned, len(events)):
            data = events[index].data
            if isinstance(data, TurnStart):
                self.turn, self.turn_total = data.turn, 0
            elif (
                isinstance(data, AssistantMessageEvent | ContextCompacted | MCPSampled)
                and data.usage is not None
            ):
                spent = _total(data.usage)
                self.session_total += spent
                self.turn_total += spent
        self.scanned = len(events)


_spent: weakref.WeakKeyDictionary[Session, _Spent] = weakref.WeakKeyDictionary()


def session_usage(session: Session) -> tuple[int, int]:
    """``(tokens of the session, tokens of its latest turn)`` as providers reported them."""
    spent = _spent.get(session)
    if spent is None:
        spent = _spent[session] = _Spent()
    spent.update(session)
    return spent.session_total, spent.turn_total


def install_limits(
    rt: Runtime,
    *,
    max_steps_per_turn: int | None = None,
    max_tool_calls_per_turn: int | None = None,
    max_tokens_per_turn: int | None = None,
    max_session_tokens: int | None = None,
) -> Disposer:
    """End a turn ``blocked`` before it exceeds a limit; ``None`` leaves a limit off.

    Returns:
        A ``Disposer`` removing the limits.

    Raises:
        ValueError: a limit that is not a positive integer.
    """
    _positive("max_steps_per_turn", max_steps_per_turn)
    _positive("max_tool_calls_per_turn", max_tool_calls_per_turn)
    _positive("max_tokens_per_turn", max_tokens_per_turn)
    _positive("max_session_tokens", max_session_tokens)
    # Tool calls let through in each agent's current turn: agent id -> (turn, count, over).
    calls: dict[str, tuple[int, int, bool]] = {}

    async def pre_step(
        payload: PreStepPayload, next_: Callable[[], Awaitable[PreStepDecision]]
    ) -> PreStepDecision:
        # Checks that need no decision run first, so a refused step costs no other listener
        # (a compaction's summary) anything.
        if max_steps_per_turn is not None and payload.step > max_steps_per_turn:
            return PreStepDecision.reject("max_steps_per_turn")
        if max_tool_calls_per_turn is not None:
            turn, _count, over = calls.get(str(payload.agent.id), (0, 0, False))
            if over and turn == payload.turn:
                return PreStepDecision.reject("max_tool_calls_per_turn")
        decision = await next_()
        if decision.kind != "enter" or (not decision.messages and payload.step == 1):
            return decision
        if max_tokens_per_turn is None and max_session_tokens is None:
            return decision
        session = payload.agent.session
        session_total, turn_total = session_usage(session)
        upcoming = estimate_tokens(session, decision.messages)
        if max_tokens_per_turn is not None and turn_total + upcoming > max_tokens_per_turn:
            return PreStepDecision.reject("max_tokens_per_turn")
        if max_session_tokens is not None and session_total + upcoming > max_session_tokens:
            return PreStepDecision.reject("max_session_tokens")
        return decision

    def pre_execute(payload: ToolHookPayload) -> ToolDecision | None:
        exec = payload.exec
        if max_tool_calls_per_turn is None or exec.agent is None:
            return None
        key = str(exec.agent.id)
        turn, count, over = calls.get(key, (exec.turn, 0, False))
        if turn != exec.turn:
            count, over = 0, False
        if count >= max_tool_calls_per_turn:
            calls[key] = (exec.turn, count, True)
            return ToolDecision.deny(
                f"max_tool_calls_per_turn ({max_tool_calls_per_turn}) reached: this call was "
                "not run"
            )
        calls[key] = (exec.turn, count + 1, over)
        return None

    def forget(payload: AgentPayload) -> None:
        calls.pop(str(payload.agent.id), None)

    disposers = [rt.hooks.on(h.PRE_STEP, pre_step), rt.hooks.on(h.AGENT_DISPOSED, forget)]
    if max_tool_calls_per_turn is not None:
        disposers.append(rt.hooks.on(h.TOOLS_PRE_EXECUTE, pre_execute))

    def dispose() -> None:
        for disposer in disposers:
            disposer()

    return Disposer(dispose)
