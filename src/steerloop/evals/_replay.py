"""``replay``: run a recorded session's turns again with another model or prompt.

The recorded session is forked before ``from_turn`` (or, from the first turn, a new session
is made), so the original is never written. Then, turn by turn, the recorded input is fed
again with its timing, through the runtime's public mechanisms only:

- the messages that reached the model at a turn's first step open the turn (the inbox verbs:
  the first claim takes every next-step message and one follow-up, as it did);
- a message that reached it at step ``s > 1`` is injected while step ``s - 1`` is entered
  (``agent/pre-step``), so that step ``s`` claims it; if the new turn stops before, it is
  injected when the turn would stop (``agent/turn-stopping``) and reaches the next step;
- a person's cancel that ended the recorded turn after step ``s`` cancels the new turn once
  its step ``s`` has answered (its first tool call, the next pre-step, or the stop);
- the runtime-context snapshot and other pre-step additions are the recorded ones;
- tool calls are answered by stand-ins (``_tools``), approvals as recorded.
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .. import CancelCause, Runtime
from .. import hooks as h
from ..agent import Agent, AgentHandle, AgentOptions, AgentScope, PreStepDecision
from ..errors import SessionPersistenceNotFoundError
from ..hooks import ApprovalHookPayload, PreStepPayload, ToolHookPayload, TurnStoppingPayload
from ..prompt import RUNTIME_CONTEXT_PLUGIN
from ..session import SessionEvent
from ..session.events import InboxSpliced
from ..tools import ToolDecision
from ._compare import compare_turn, totals_of
from ._recording import Input, Log, Turn, read_log
from ._records import CancelReplay, TurnRun
from ._report import ReplayReport
from ._tools import ToolAnswers

__all__ = ["Progress", "Score", "replay"]

Score = Callable[[TurnRun, TurnRun], float | Awaitable[float]]
#: ``progress(turns done, turns in all)``: once before the first turn, then after each.
Progress = Callable[[int, int], object]
#: The order of the replay's prompt section: after every other section.
_LAST = 2**31
_MAX_ID = 128


async def replay(
    rt: Runtime,
    session_id: str,
    *,
    agent_options: AgentOptions,
    from_turn: int = 1,
    system_prompt: str | None = None,
    tools: Literal["recorded", "live"] = "recorded",
    allow_side_effects: bool = False,
    score: Score | None = None,
    progress: Progress | None = None,
) -> ReplayReport:
    """Run ``session_id``'s turns from ``from_turn`` on again with ``agent_options``.

    Args:
        rt: the runtime whose store (or live sessions) holds the session, and whose adapters
            serve ``agent_options``.
        session_id: the recorded session; it is read, never written.
        agent_options: the model the turns run with now.
        from_turn: the first turn to run again; the ones before are the new session's history.
        system_prompt: the system prompt to run with; ``None`` keeps the recorded one.
        tools: ``"recorded"``: a call the recording did not make is answered
            ``NOT_RECORDED``; ``"live"``: such a call runs the runtime's tool when it only
            reads (``concurrency_safe``).
        allow_side_effects: with ``tools="live"``, run every unrecorded call.
        score: ``score(recorded_turn, new_turn) -> float`` (may be async), kept per turn.
        progress: ``progress(done, total)`` before the first turn and after each.

    Raises:
        ValueError: a bad argument, or no turn ``from_turn`` in the session.
        SessionPersistenceNotFoundError: the session is neither live nor stored.
        RuntimeError: ``from_turn > 1`` on a runtime without a store (forking needs one).
    """
    if isinstance(from_turn, bool) or not isinstance(from_turn, int) or from_turn < 1:
        raise ValueError(f"from_turn must be an integer >= 1, not {from_turn!r}")
    if tools not in ("recorded", "live"):
        raise ValueError(f"tools must be 'recorded' or 'live', not {tools!r}")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ValueError("system_prompt must be a string or None")
    if not isinstance(agent_options, AgentOptions):
        raise ValueError("agent_options must be an AgentOptions")
    agent_options.validate()
    events = await _recorded_events(rt, session_id)
    log = read_log(events)
    turns = [t for t in log.turns if t.number >= from_turn]
    if not turns:
        numbers = [t.number for t in log.turns]
        raise ValueError(
            f"session {session_id!r} has no closed turn {from_turn} (its turns: {_span(numbers)})"
        )
    run = _Replay(rt, log, turns, _cut(events, turns[0]), tools, allow_side_effects, system_prompt)
    handle = await run.open(session_id, agent_options)
    if progress is not None:
        progress(0, len(turns))
    try:
        for done, turn in enumerate(turns, start=1):
            await run.turn(turn)
            if progress is not None:
                progress(done, len(turns))
        new_events = tuple(handle.agent.session.events)
    finally:
        await handle.dispose()
    return await run.report(session_id, handle.agent.id, new_events, agent_options, score)


async def _recorded_events(rt: Runtime, session_id: str) -> Sequence[SessionEvent]:
    live = rt.sessions.get(session_id)
    if live is not None:
        return tuple(live.events)
    store = rt.sessions.persistence
    if store is None:
        raise SessionPersistenceNotFoundError(
            f"session {session_id!r} is not live and the runtime has no store"
        )
    return await store.load(session_id)


def _cut(events: Sequence[SessionEvent], first: Turn) -> int:
    """The last seq the new session inherits: before ``first`` and the insertions that
    queued its input (``0``: nothing, the new session starts empty)."""
    cut = first.start_seq - 1
    while cut >= 1:
        data = events[cut - 1].data
        if not (isinstance(data, InboxSpliced) and data.inserted and not data.removed_count):
            break
        cut -= 1
    return cut


def _span(numbers: Sequence[int]) -> str:
    return f"{numbers[0]}..{numbers[-1]}" if numbers else "none"


def _new_id(session_id: str) -> str:
    suffix = f".replay-{secrets.token_hex(4)}"
    return session_id[: _MAX_ID - len(suffix)] + suffix


@dataclass(slots=True)
class _TurnState:
    """A recorded turn while its replay runs."""

    recorded: Turn
    pending: list[Input]  # inputs of later steps not injected yet
    step: int = 0  # the latest step the new turn entered
    cancel: CancelReplay | None = None
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    def take(self, upto: int | None = None) -> list[Input]:
        due = [i for i in self.pending if upto is None or i.step <= upto]
        self.pending = [i for i in self.pending if i not in due]
        return due

    def cancel_due(self, answered_steps: int) -> bool:
        """Whether the recorded cancel is due once ``answered_steps`` steps have answered."""
        step = self.recorded.cancel_step
        return step is not None and not self.cancelled and step <= answered_steps


class _Replay:
    """The replay agent's setup, its listeners, and the turn-by-turn feed."""

    def __init__(
        self,
        rt: Runtime,
        log: Log,
        turns: list[Turn],
        cut: int,
        tools: Literal["recorded", "live"],
        allow_side_effects: bool,
        system_prompt: str | None,
    ) -> None:
        self.rt = rt
        self.log = log
        self.turns = turns
        self.system_prompt = system_prompt
        self.tools: Literal["recorded", "live"] = tools
        self.by_new_turn: dict[int, _TurnState] = {}
        self.new_turn_of: dict[int, int] = {}  # recorded turn -> new turn
        self.answers = ToolAnswers(
            self._recorded_turn, mode=tools, allow_side_effects=allow_side_effects
        )
        self.notes: list[str] = []
        self._agent: Agent | None = None
        self._cut = cut

    @property
    def agent(self) -> Agent:
        assert self._agent is not None, "the replay agent is made by open()"
        return self._agent

    def _recorded_turn(self, new_turn: int) -> Turn | None:
        state = self.by_new_turn.get(new_turn)
        return state.recorded if state is not None else None

    # --- the new session and its agent ---------------------------------------------------

    async def open(self, session_id: str, options: AgentOptions) -> AgentHandle:
        """Fork before the first replayed turn (or start afresh) and build the agent."""
        new_id = _new_id(session_id)
        if self._cut < 1:
            return await self.rt.agents.create(
                session_id=new_id, agent_options=options, setup=self._setup
            )
        if self.rt.sessions.persistence is None:
            raise RuntimeError(
                "a replay from a later turn forks the session, which needs a store: open the "
                "runtime with store=..."
            )
        await self.rt.sessions.fork(session_id, self._cut, new_id)
        handle = await self.rt.agents.resume(
            resume_session_id=new_id, agent_options=options, setup=self._setup
        )
        if handle.agent.inbox.has_pending:
            # Input queued before the cut for later turns: it is fed again at its own time.
            handle.agent.inbox.clear()
        return handle

    async def _setup(self, scope: AgentScope) -> None:
        agent = self._agent = scope.agent
        await self._prompt(scope)
        visible = self.rt.tools.list(agent.id)
        self.answers.register(scope, visible, self.log.tool_schemas, self.log.concurrent)
        scope.hooks.on(h.PRE_STEP, self._pre_step)
        scope.hooks.on(h.TURN_STOPPING, self._turn_stopping)
        scope.hooks.on(h.TOOLS_PRE_EXECUTE, self._pre_execute)
        scope.hooks.on(h.TOOLS_APPROVAL_REQUESTED, self._approval_requested)

    async def _prompt(self, scope: AgentScope) -> None:
        """Make the agent's system prompt the wanted one, after what the runtime adds."""
        first = self.turns[0].number
        wanted = (
            self.system_prompt
            if self.system_prompt is not None
            else self.log.system_prompts.get(first, "")
        )
        base = await self.rt.system_prompt.assemble(scope.agent)
        if wanted == base:
            return
        section = wanted
        if base and wanted.startswith(base + "\n\n"):
            section = wanted[len(base) + 2 :]
        elif base:
            self.notes.append(
                "the runtime's persona and prompt sections come before the replayed system "
                "prompt (a runtime opened for the replay has none)"
            )
        if section:
            scope.system_prompt.add_section("replay", section, order=_LAST)

    # --- feeding a turn ----------------------------------------------------------------

    async def turn(self, recorded: Turn) -> None:
        """Open the new turn with the recorded opening input and wait until it is over."""
        agent = self.agent
        opening = [i for i in recorded.inputs if i.step <= 1]
        if not opening:
            self.notes.append(f"turn {recorded.number}: no recorded input opened it; not run")
            return
        await agent.when_idle()
        number = agent.session.last_turn + 1
        self.by_new_turn[number] = _TurnState(recorded, [i for i in recorded.inputs if i.step > 1])
        for item in opening[:-1]:
            agent.send(item.message, item.target, False)
        agent.send(opening[-1].message, opening[-1].target, True)
        if agent.session.last_turn != number:
            raise RuntimeError(f"replay: turn {recorded.number} did not open")
        self.new_turn_of[recorded.number] = number
        await agent.when_idle()
        if agent.inbox.has_pending:
            agent.inbox.clear()  # input the new turn never took (it ended first)

    def _cancel(self, state: _TurnState, after_step: int) -> None:
        state.cancelled = True
        state.cancel = CancelReplay(
            recorded_step=state.recorded.cancel_step or 0, replayed_step=after_step
        )
        self.agent.cancel(CancelCause.user())

    async def _pre_step(
        self, payload: PreStepPayload, next_: Callable[[], Awaitable[PreStepDecision]]
    ) -> PreStepDecision:
        state = self.by_new_turn.get(payload.turn)
        if state is None:
            return await next_()
        if state.cancel_due(payload.step - 1):
            self._cancel(state, payload.step - 1)
            return PreStepDecision.enter(payload.messages)  # the loop sees the abort next
        decision = await next_()
        if decision.kind != "enter" or (payload.step == 1 and not decision.messages):
            return decision
        state.step = payload.step
        messages = [m for m in decision.messages if m.source.plugin != RUNTIME_CONTEXT_PLUGIN]
        messages += state.recorded.extras.get(payload.step, ())
        for item in state.take(upto=payload.step + 1):
            self.agent.inject(item.message)  # claimed by the next step
        return PreStepDecision.enter(messages, decision.starts_request_series)

    async def _turn_stopping(self, payload: TurnStoppingPayload) -> None:
        state = self.by_new_turn.get(payload.turn)
        if state is None:
            return
        if state.pending:
            # Fewer steps than recorded: the earliest pending input reaches the next step
            # (later ones keep their distance: the pre-steps that follow deliver them).
            for item in state.take(upto=min(i.step for i in state.pending)):
                self.agent.inject(item.message)
        elif state.cancel_due(state.step):
            self._cancel(state, state.step)

    def _pre_execute(self, payload: ToolHookPayload) -> ToolDecision | None:
        exec = payload.exec
        state = self.by_new_turn.get(exec.turn)
        if state is not None and state.cancel_due(exec.step):
            self._cancel(state, exec.step)
            return None
        return self.answers.pre_execute(exec, self.rt.tools.get(exec.name, self.agent.id))

    def _approval_requested(self, payload: ApprovalHookPayload) -> None:
        self.answers.on_approval(self.agent, payload)

    # --- the report --------------------------------------------------------------------

    async def report(
        self,
        session_id: str,
        new_id: str,
        events: Sequence[SessionEvent],
        options: AgentOptions,
        score: Score | None,
    ) -> ReplayReport:
        new_log = read_log(events, after=self._cut)
        reports = []
        for recorded in self.turns:
            number = self.new_turn_of.get(recorded.number)
            new = new_log.turn(number) if number is not None else None
            state = self.by_new_turn.get(number or 0)
            cancel = None
            if recorded.cancel_step is not None:
                cancel = (state.cancel if state is not None else None) or CancelReplay(
                    recorded_step=recorded.cancel_step, replayed_step=None
                )
            turn = compare_turn(
                recorded,
                new,
                matcher=self.answers.matcher,
                answered=self.answers.answered,
                cancel=cancel,
            )
            if score is not None and turn.new is not None:
                turn = replace(turn, score=await _call_score(score, turn.recorded, turn.new))
            reports.append(turn)
        answers = self.answers
        totals = totals_of(
            reports,
            tool_executions=answers.tool_executions,
            not_recorded=answers.not_recorded,
            approvals_replayed=answers.approvals_replayed,
            approvals_denied=answers.approvals_denied,
        )
        ran = [t.new.model for t in reports if t.new is not None and t.new.model]
        return ReplayReport(
            session_id=session_id,
            replay_session_id=new_id,
            recorded_model=next((t.model for t in self.turns if t.model), None),
            model=ran[0] if ran else f"{options.provider}/{options.model}",
            from_turn=self.turns[0].number,
            tools=self.tools,
            system_prompt=self.system_prompt,
            turns=tuple(reports),
            totals=totals,
            notes=tuple(self.notes),
        )


async def _call_score(score: Score, recorded: TurnRun, new: TurnRun) -> float:
    value: Any = score(recorded, new)
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"score must return a number, not {value!r}")
    return float(value)
