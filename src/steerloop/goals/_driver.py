"""The goal-round driver: continues an armed goal round by round, on the public hooks only.

Design note.

*When a round starts.* On ``agent/status(idle)`` (and when a goal becomes armed) the driver
checks the agent's goal: active, armed, rounds left, no round of its own in flight. If the
cap is used up it blocks the goal (``ROUND_CAP_REACHED``). Otherwise it makes the goal
durable (``await session.flush()``), then re-checks — same revision, still armed, the agent
idle and ``inbox.has_pending`` false — and only then queues one goal-round prompt (a
``user/message`` with ``source.kind == "goal"``) with ``followup`` from host context
(``without_initiator``). Human input therefore always goes first: a round is never queued
while anything waits in the inbox, and a human message that arrives during a round is
served by the next turn, before the next round is considered.

*When a round counts.* Only when its message is admitted: the ``user/message`` event of
that message id appends a ``goal/change{action: "round"}`` right after it. A round message
that is claimed but not admitted (a cancel or a pre-step reject before ``step/start``) does
not count.

*How a round ends.* The ``turn/end`` of the turn that claimed the round message decides:
``aborted`` (any cause but ``disposed``, and not while unloading) pauses the goal so it
does not restart by itself; ``error`` blocks it (``ROUND_FAILED``); ``blocked`` (a pre-step
reject) blocks it (``ROUND_REJECTED``). A round prompt removed from the inbox before it was
claimed disarms the goal.

*Stale prompts.* A pre-step filter drops goal-round messages that are not the round the
driver is waiting for (e.g. a prompt still queued in a log from an earlier process), and a
resumed session's pending goal prompts are removed from its inbox at ``session-start``.

*Unloading* disarms every goal, removes queued round prompts, cancels running rounds with
``CancelCause.parent()``, waits for those agents and for its own checks to be quiet, then
undoes its hooks and tools.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import CancelCause
from .. import hooks as h
from ..agent import live_agent
from ..hooks import (
    AgentPayload,
    ClaimedPayload,
    Disposer,
    InboxMessagePayload,
    PreStepDecision,
    PreStepPayload,
    SessionEventPayload,
    SessionStartPayload,
    StatusPayload,
)
from ..messages import MessageSource, TextBlock, UserMessage, user_message
from ._domain import SessionGoal
from ._model import Goal
from ._tools import goal_tools

if TYPE_CHECKING:
    from .. import Runtime
    from ..agent import Agent

__all__ = [
    "GOAL_PLUGIN",
    "ROUND_CAP_REACHED",
    "ROUND_FAILED",
    "ROUND_REJECTED",
    "GoalDriver",
    "default_prompt",
    "install_goals",
]

GOAL_PLUGIN = "steerloop/goals"
ROUND_CAP_REACHED = "ROUND_CAP_REACHED"
ROUND_FAILED = "ROUND_FAILED"
ROUND_REJECTED = "ROUND_REJECTED"

_log = logging.getLogger("steerloop.goals")

RenderPrompt = Callable[[Goal, int], str | Sequence[TextBlock]]


def default_prompt(goal: Goal, round_number: int) -> list[TextBlock]:
    """The goal-round prompt: a headline naming the round, then what to do."""
    return [
        TextBlock(f"goal round {round_number}/{goal.round_cap}: {goal.objective}"),
        TextBlock(
            "Continue working toward this goal. When it is achieved, call complete_goal "
            f"with revision {goal.revision} and your evidence. If you cannot make progress, "
            f"call block_goal with revision {goal.revision} and the reason."
        ),
    ]


@dataclass(slots=True)
class _Round:
    """A goal-round prompt this driver queued and has not seen finish."""

    message_id: str
    number: int
    turn: int | None = None


class GoalDriver:
    """Continues armed goals of live agents round by round. Build it with ``install_goals``."""

    def __init__(self, rt: Runtime, *, prompt: RenderPrompt | None = None) -> None:
        self._rt = rt
        self._render = prompt or default_prompt
        self._goals: dict[str, SessionGoal] = {}
        self._rounds: dict[str, _Round] = {}
        self._wanted: set[str] = set()
        self._checks: dict[str, asyncio.Task[None]] = {}
        self._disposers: list[Disposer] = []
        self._unloading = False
        self._unloaded: asyncio.Future[None] | None = None

    # --- public ----------------------------------------------------------------------

    def goal_of(self, agent: Agent) -> SessionGoal:
        """The goal domain of a live agent's session (replayed from its log on first use).

        Raises:
            GoalLogError: the log's ``goal/change`` records are malformed.
        """
        goal = self._goals.get(agent.id)
        if goal is None or goal.session is not agent.session:
            goal = self._goals[agent.id] = SessionGoal(agent.session)
            goal.subscribe(lambda g, action: self._changed(agent, g, action))
        return goal

    async def when_settled(self, agent: Agent) -> None:
        """Return once ``agent`` is idle and the driver has nothing more to start for it."""
        while True:
            await agent.when_idle()
            check = self._checks.get(agent.id)
            if check is None:
                if agent.status == "idle":
                    return
                continue
            await asyncio.shield(check)

    async def unload(self) -> None:
        """Disarm every goal, cancel running rounds (cause ``parent``), wait for quiescence,
        then remove the driver's hooks and tools. Idempotent."""
        if self._unloaded is None:
            self._unloaded = asyncio.ensure_future(self._unload())
        await asyncio.shield(self._unloaded)

    # --- installation ----------------------------------------------------------------

    def _install(self, tools: bool) -> None:
        hooks = self._rt.hooks
        self._disposers += [
            hooks.on(h.AGENT_CREATED, self._on_created),
            hooks.on(h.SESSION_START, self._on_session_start),
            hooks.on(h.AGENT_DISPOSED, self._on_disposed),
            hooks.on(h.STATUS, self._on_status),
            hooks.on(h.INBOX_CLAIMED, self._on_claimed),
            hooks.on(h.INBOX_DISCARDED, self._on_discarded),
            hooks.on(h.PRE_STEP, self._pre_step),
            hooks.on(h.SESSION_EVENT, self._on_event),
        ]
        if tools:
            self._disposers += [self._rt.tools.register(tool) for tool in goal_tools(self.goal_of)]

    async def _unload(self) -> None:
        self._unloading = True
        for goal in self._goals.values():
            goal.disarm()
        waiting: list[Agent] = []
        for agent_id, round_ in list(self._rounds.items()):
            agent = self._rt.agents.get(agent_id)
            if agent is None:
                continue
            if round_.turn is None:
                agent.inbox.remove(round_.message_id)
            else:
                agent.cancel(CancelCause.parent(), keep_inbox=True)
            waiting.append(agent)
        checks = list(self._checks.values())
        if checks:
            await asyncio.gather(*checks, return_exceptions=True)
        for agent in waiting:
            await agent.when_idle()
        self._rounds.clear()
        for disposer in reversed(self._disposers):
            disposer()
        self._disposers.clear()

    # --- hook listeners --------------------------------------------------------------

    def _on_created(self, payload: AgentPayload) -> None:
        # Replayed here so a log with a corrupt goal/change is refused before publication.
        self.goal_of(live_agent(payload.agent, "the goal driver"))

    def _on_session_start(self, payload: SessionStartPayload) -> None:
        if payload.source != "resume":
            return
        agent = live_agent(payload.agent, "the goal driver")
        for message in (*agent.inbox.next_step, *agent.inbox.next_turn):
            if message.source.kind == "goal":  # a round prompt of an earlier process
                agent.inbox.remove(message.id)

    def _on_disposed(self, payload: AgentPayload) -> None:
        agent_id = payload.agent.id
        goal = self._goals.get(agent_id)
        if goal is not None and goal.session is payload.agent.session:
            del self._goals[agent_id]
        self._rounds.pop(agent_id, None)

    def _on_status(self, payload: StatusPayload) -> None:
        if payload.status == "idle":
            self._schedule(live_agent(payload.agent, "the goal driver"))

    def _on_claimed(self, payload: ClaimedPayload) -> None:
        round_ = self._rounds.get(payload.agent.id)
        if round_ is not None and round_.message_id == payload.message.id:
            round_.turn = payload.turn

    def _on_discarded(self, payload: InboxMessagePayload) -> None:
        agent = payload.agent
        round_ = self._rounds.get(agent.id)
        if round_ is not None and round_.message_id == payload.message.id:
            del self._rounds[agent.id]
            goal = self._goals.get(agent.id)
            if goal is not None:
                goal.disarm()

    async def _pre_step(
        self, payload: PreStepPayload, next_: Callable[[], Awaitable[PreStepDecision]]
    ) -> PreStepDecision:
        decision = await next_()
        if not isinstance(decision, PreStepDecision) or decision.kind != "enter":
            return decision
        round_ = self._rounds.get(payload.agent.id)
        expected = round_.message_id if round_ is not None else None
        kept = [m for m in decision.messages if m.source.kind != "goal" or m.id == expected]
        if len(kept) == len(decision.messages):
            return decision
        return PreStepDecision.enter(kept, decision.starts_request_series)

    def _on_event(self, payload: SessionEventPayload) -> None:
        event = payload.event
        if event.type not in ("user/message", "turn/end"):
            return
        agent_id = payload.session.id
        round_ = self._rounds.get(agent_id)
        goal = self._goals.get(agent_id)
        if round_ is None or goal is None or goal.session is not payload.session:
            return
        if event.type == "user/message":
            current = goal.current
            if (
                event.data.id == round_.message_id
                and current is not None
                and current.phase == "active"
                and current.rounds_started < current.round_cap
            ):
                goal.record_round()  # admitted: the round counts
            return
        if round_.turn != event.data.turn:
            return
        del self._rounds[agent_id]
        reason = event.data.reason
        current = goal.current
        if current is None or current.phase != "active":
            return
        if reason.kind == "aborted":
            cause = reason.reason
            if not self._unloading and (cause is None or cause.kind != "disposed"):
                goal.pause(current.revision)
        elif reason.kind == "error":
            message = reason.error.message if reason.error is not None else "unknown error"
            explanation = f"goal round {round_.number} failed: {message}"
            goal.block(current.revision, ROUND_FAILED, explanation)
        elif reason.kind == "blocked":
            goal.block(
                current.revision,
                ROUND_REJECTED,
                f"goal round {round_.number} was rejected before it started",
            )

    def _changed(self, agent: Agent, goal: SessionGoal, action: str) -> None:
        if goal.armed and action in ("create", "resume", "edit"):
            self._schedule(agent)

    # --- the round check -------------------------------------------------------------

    def _schedule(self, agent: Agent) -> None:
        if self._unloading or agent.id not in self._goals:
            return
        self._wanted.add(agent.id)
        if agent.id in self._checks:
            return  # the running check loops once more
        with self._rt.agents.without_initiator():
            task = asyncio.get_running_loop().create_task(self._check_loop(agent))
        self._checks[agent.id] = task

    async def _check_loop(self, agent: Agent) -> None:
        try:
            while agent.id in self._wanted and not self._unloading:
                self._wanted.discard(agent.id)
                try:
                    await self._check(agent)
                except Exception:
                    _log.exception("goal round check for %s failed", agent.id)
        finally:
            self._wanted.discard(agent.id)
            del self._checks[agent.id]

    def _eligible(self, agent: Agent, goal: SessionGoal) -> Goal | None:
        current = goal.current
        if (
            self._unloading
            or current is None
            or not goal.armed
            or agent.id in self._rounds
            or self._rt.agents.get(agent.id) is not agent
            or self._goals.get(agent.id) is not goal
        ):
            return None
        return current

    async def _check(self, agent: Agent) -> None:
        goal = self._goals.get(agent.id)
        if goal is None:
            return
        current = self._eligible(agent, goal)
        if current is None:
            return
        if current.rounds_started >= current.round_cap:
            goal.block(
                current.revision,
                ROUND_CAP_REACHED,
                f"the goal used all {current.round_cap} rounds without being completed",
            )
            return
        revision = current.revision
        await agent.session.flush()  # the goal that governs the round is durable first
        current = self._eligible(agent, goal)
        if (
            current is None
            or current.revision != revision
            or current.rounds_started >= current.round_cap
            or agent.status != "idle"
            or agent.inbox.has_pending
        ):
            return  # changed meanwhile; the next idle or arming checks again
        number = current.rounds_started + 1
        message = _round_message(current, number, self._render(current, number))
        self._rounds[agent.id] = _Round(message.id, number)
        with self._rt.agents.without_initiator():
            try:
                agent.followup(message)
            except Exception:
                self._rounds.pop(agent.id, None)
                raise


def _round_message(goal: Goal, number: int, content: str | Sequence[TextBlock]) -> UserMessage:
    return user_message(
        content if isinstance(content, str) else list(content),
        source=MessageSource(
            kind="goal",
            plugin=GOAL_PLUGIN,
            extra={"revision": goal.revision, "round": number, "cap": goal.round_cap},
        ),
    )


def install_goals(
    rt: Runtime, *, tools: bool = True, prompt: RenderPrompt | None = None
) -> GoalDriver:
    """Install the goal-round driver (and, with ``tools``, the model's goal tools) on ``rt``.

    ``await driver.unload()`` undoes it.
    """
    driver = GoalDriver(rt, prompt=prompt)
    for agent in rt.agents.list():  # agents that are already live: replay (strict) first
        driver.goal_of(agent)
    driver._install(tools)
    return driver
