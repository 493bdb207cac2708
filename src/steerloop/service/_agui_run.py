"""``POST /v1/agui``: one AG-UI run over a session (the thread), from the durable log.

``start_run`` validates the input, reconciles it with the log (``_agui_input``), queues what
is new as the session's commands, and returns the run's SSE items: ``RUN_STARTED``, a
``MESSAGES_SNAPSHOT`` when the thread existed, ``STATE_SNAPSHOT``, then the projection
(``_agui``) of the turn the run follows until that turn ends (``RUN_FINISHED`` with outcome
success or cancelled, or ``RUN_ERROR``) or waits for the client (``RUN_FINISHED`` with
outcome interrupt, naming each waiting approval, client tool call and input request).

Which turn a run follows: the turn running when the request came (a second run on a
running thread attaches to it, opening its current step first), else the turn that takes
the run's first new message. A run whose messages are still queued when the followed
turn ends goes on with the next turn. A run with nothing new on an idle thread ends at once.

A client that disconnects cancels nothing: the turn goes on and stays in the log; the next
run on the thread shows where it is (its snapshot, then the rest).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ag_ui.core import BaseEvent, Interrupt, Message, UserMessage

from ..messages import DEFAULT_LIMITS, AttachmentLimits, Block, block_to_json
from ..session import fold_state
from ._agui import AguiRun, encode
from ._agui_input import Plan, parse_request, plan_input, view_of
from ._agui_inputs import input_interrupt
from ._agui_interrupts import approval_interrupt, client_interrupt
from ._agui_media import snapshot_content, upgrade_binary_parts
from ._agui_messages import messages_snapshot
from ._api import ApiError, Host, check_session_id
from ._content import with_blob_urls
from ._source import FeedReader, FeedSource

__all__ = ["Pages", "start_run"]

Pages = Callable[
    [FeedSource, FeedReader, int, int], AsyncIterator[tuple[str, int, int, dict[str, Any]]]
]
"""The service's feed loop (``_sse.pages``): events, frames, ``caught-up`` marks."""


async def start_run(
    host: Host,
    source: FeedSource,
    pages: Pages,
    body: Mapping[str, Any],
    limits: AttachmentLimits = DEFAULT_LIMITS,
) -> AsyncGenerator[dict[str, Any]]:
    """Queue what ``body`` (a ``RunAgentInput``) adds to its thread; the run's SSE items.

    Raises:
        ApiError: 422 for a body that is not a valid input or does not fit the thread,
            and the host's errors (429, 503).
    """
    request = parse_request(upgrade_binary_parts(body))
    session_id = request.thread_id
    check_session_id(session_id)
    existed = await host.exists(session_id)
    if not existed:
        try:
            await host.create(session_id, host.profile(None), None, None)
        except ValueError as exc:
            raise ApiError(422, "invalid_body", str(exc)) from None
    events = await host.log_events(session_id)
    stored = [e.to_json() for e in events]
    cursor = events[-1].seq if events else 0
    state = fold_state(events)
    plan = plan_input(request, view_of(stored), state, limits)
    status = await host.status_of(session_id)
    await _submit(host, session_id, plan, status)
    snapshot: list[Message] = []
    if existed:
        snapshot = messages_snapshot(stored, session_id)
        snapshot += [
            UserMessage(id=i, content=_shown(session_id, content)) for i, content in plan.messages
        ]
    run = AguiRun(session_id, request.run_id, request.parent_run_id)
    follow = _Follow(stored, plan)
    if plan.state is not None:
        state = plan.state  # the client's: the delta the owner writes is already applied
    preamble = run.snapshot(snapshot, state)
    return _stream(source, pages, session_id, cursor, run, follow, preamble)


async def _submit(host: Host, session_id: str, plan: Plan, status: str) -> None:
    """Queue the plan's commands in order: tools, state, decisions, results, messages."""
    if plan.tools or status != "unloaded":
        await host.command(session_id, "client_tools", {"tools": plan.tools})
    if plan.state is not None:
        await host.command(session_id, "state", {"state": plan.state})
    for call_id, decision, reason in plan.decisions:
        try:  # the one decision path: as POST /v1/sessions/{id}/approvals/{call}
            await host.submit_approval(session_id, call_id, decision, reason)
        except ApiError as exc:
            if exc.status not in (404, 409):  # decided meanwhile: the first one stands
                raise
    for input_id, action, content in plan.inputs:
        try:  # the one answer path: as POST /v1/sessions/{id}/inputs/{input_id}
            await host.submit_input(session_id, input_id, action, content)
        except ApiError as exc:
            if exc.status not in (404, 409):  # answered or closed meanwhile: nothing to do
                raise
    for result in plan.results:
        await host.command(session_id, "client_result", result)
    running = status == "running" or bool(plan.answered)
    for message_id, text in plan.messages:
        await host.send(session_id, "steer" if running else "followup", text, message_id, None)


def _shown(session_id: str, content: str | tuple[Block, ...]) -> Any:
    """A message this run sent, as the snapshot shows it (its images by their blob URL)."""
    if isinstance(content, str):
        return content
    stored = [block_to_json(b) for b in content]
    return snapshot_content(session_id, stored) or "".join(
        b["text"] for b in stored if b.get("type") == "text"
    )


class _Follow:
    """Which turn the run follows and what in it waits for the client."""

    def __init__(self, stored: Sequence[Mapping[str, Any]], plan: Plan) -> None:
        self.turn: int | None = None  # the open turn at the cursor, if any
        self.step: int | None = None
        self.want = {i for i, _ in plan.messages}  # our messages not yet in a turn
        self.answered = plan.answered
        self.idle_end = not plan.messages and not plan.answered
        self.started: set[str] = set()  # calls with a tool/call
        self.closed: set[str] = set()  # calls with a tool/result
        self.waiting: dict[str, Interrupt] = {}
        self.input_calls: dict[str, str] = {}  # a waiting input's id -> the call it holds
        for event in stored:
            self.see(event)
            kind, data = event.get("type"), event.get("data") or {}
            if kind == "turn/start":
                self.turn, self.step = data.get("turn"), None
            elif kind == "turn/end":
                self.turn = self.step = None
            elif kind == "step/start":
                self.step = data.get("step")
            elif kind == "step/end":
                self.step = None

    def see(self, event: Mapping[str, Any]) -> None:
        kind, data = event.get("type"), event.get("data") or {}
        if kind == "tool/call":
            self.started.add(str(data.get("call_id")))
        elif kind == "tool/result":
            call_id = str((data.get("message") or {}).get("call_id"))
            self.closed.add(call_id)
            self.waiting.pop(call_id, None)
            for input_id in [i for i, c in self.input_calls.items() if c == call_id]:
                self.waiting.pop(input_id, None)
        elif kind == "tool/approval-requested":
            self.waiting[str(data.get("call_id"))] = approval_interrupt(data)
        elif kind == "tool/approval-decided":
            self.waiting.pop(str(data.get("call_id")), None)
        elif kind == "tool/deferred":
            self.waiting[str(data.get("call_id"))] = client_interrupt(data)
        elif kind == "input/requested":
            self.waiting[str(data.get("id"))] = input_interrupt(data)
            self.input_calls[str(data.get("id"))] = str(data.get("call_id"))
        elif kind == "input/answered":
            self.waiting.pop(str(data.get("id")), None)
        elif kind == "user/message":
            self.want.discard(str(data.get("id")))

    def interrupts(self) -> list[Interrupt]:
        """The open interrupts, when every started call of the turn waits for the client
        (nothing runs that could still change what the run should report)."""
        blocking = {c: i for c, i in self.waiting.items() if c not in self.answered}
        running = self.started - self.closed
        # A call waiting for an input is held by it: the interrupt names the input.
        held = set(blocking) | {self.input_calls[i] for i in blocking if i in self.input_calls}
        if blocking and running <= held:
            return list(blocking.values())
        return []


def _item(at: str | None, event: BaseEvent) -> dict[str, Any]:
    item = {"data": encode(event)}
    if at is not None:
        item["id"] = at  # the steerloop cursor; AG-UI clients ignore it
    return item


def _opening(
    run: AguiRun, follow: _Follow, preamble: list[BaseEvent], cursor: int
) -> tuple[list[dict[str, Any]], bool]:
    """The run's first items (started, the preamble, the open step's frames so far) and
    whether the run is already over (the agent is idle: nothing to follow)."""
    items = [_item(None, run.started()), *(_item(None, event) for event in preamble)]
    if follow.turn is not None and follow.step is not None:
        items += [_item(str(cursor), event) for event in run.open_step(follow.turn, follow.step)]
    elif follow.turn is None and follow.idle_end:
        items += [_item(str(cursor), event) for event in run.finish()]
        return items, True
    return items, False


async def _stream(
    source: FeedSource,
    pages: Pages,
    session_id: str,
    cursor: int,
    run: AguiRun,
    follow: _Follow,
    preamble: list[BaseEvent],
) -> AsyncGenerator[dict[str, Any]]:
    opening, finished = _opening(run, follow, preamble, cursor)
    for item in opening:
        yield item
    if finished:
        return
    tracked = follow.turn
    reader = source.subscribe(session_id)  # before the first read: no wake-up is missed
    try:
        async for kind, at, number, body in pages(source, reader, cursor, 0):
            if kind == "caught-up":
                interrupts = follow.interrupts() if tracked is not None else []
                if interrupts:
                    for event in run.finish("interrupt", interrupts):
                        yield _item(str(at), event)
                    return
                continue
            if kind == "frame":
                if tracked is not None and body.get("turn") == tracked:
                    for event in run.frame(body):
                        yield _item(f"{at}:{number}", event)
                continue
            body = with_blob_urls(session_id, body)  # the inbox's CUSTOM events name blobs too
            follow.see(body)
            etype, data = body.get("type"), body.get("data") or {}
            if etype == "turn/start" and tracked is None:
                tracked = data.get("turn")
            if etype == "state/changed" or (tracked is not None and etype != "turn/end"):
                for event in run.event(body):
                    yield _item(str(at), event)
            elif etype == "turn/end" and data.get("turn") == tracked:
                reason = (data.get("reason") or {}).get("kind")
                if follow.want and reason not in ("aborted", "error"):
                    tracked = None  # our messages wait for the next turn: follow it
                    continue
                for event in run.end_event(body):
                    yield _item(str(at), event)
                return
            elif (
                etype == "agent/inbox/spliced"
                and data.get("outcome") == "canceled"
                and tracked is None
                and follow.want
            ):
                for event in run.finish("cancelled"):  # our messages were dropped
                    yield _item(str(at), event)
                return
    finally:
        reader.close()
