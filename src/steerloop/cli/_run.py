"""``steerloop run``: one turn, rendered or streamed as JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import hooks as h
from .._cancel import CancelCause
from .._runtime import Runtime
from ..agent._agent import Agent
from ..agent._decisions import StreamFrame, StreamFramePayload
from ..agent._factory import AgentScope
from ..errors import InputError
from ..llm.chunks import chunk_to_json
from ..messages import FileBlock, ImageBlock
from ..session._events import SessionEvent
from ..session._input_events import InputRequest
from ..session._session import SessionEventPayload
from ..tools._define import ToolExec
from ._attach import with_attachments
from ._inputs import INPUT_BY, answer_line, describe_request, prompt_label
from ._render import EventRenderer
from ._session_setup import LiveOptions, open_live
from ._settings import Settings

__all__ = ["event_line", "frame_line", "run_once"]

_SETTLING = ("assistant/message", "assistant/attempt")


def event_line(event: SessionEvent, *, full: bool) -> dict[str, Any]:
    """A session event as a JSON line. Unless ``full``, a settling event's ``stream`` (every
    raw chunk of the attempt, already sent live as frames) becomes its count and its
    ``finish`` record."""
    out: dict[str, Any] = event.to_json()
    if not full and out.get("type") in _SETTLING:
        data = dict(out["data"])
        stream = data.pop("stream", [])
        data["stream_records"] = len(stream)
        # The finish record says why the attempt ended (the failure of a retried request).
        if stream and stream[-1].get("chunk", {}).get("kind") == "finish":
            data["finish"] = stream[-1]["chunk"]
        out["data"] = data
    return out


def frame_line(frame: StreamFrame) -> dict[str, Any]:
    """A live ``agent/assistant-stream`` frame as a JSON line (no ``seq``: not stored)."""
    body: dict[str, Any] = {"kind": frame.kind, "attempt_id": frame.attempt_id}
    body["revision"] = frame.revision
    for name in ("turn", "step", "index", "time", "outcome"):
        value = getattr(frame, name)
        if value is not None:
            body[name] = value
    if frame.chunk is not None:
        body["chunk"] = chunk_to_json(frame.chunk)
    return {"type": "agent/assistant-stream", "frame": body}


def _write(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def _ask_on_terminal(exec: ToolExec) -> bool:
    prompt = f"allow {exec.name}({exec.raw_arguments})? [y/N] "
    answer = await asyncio.to_thread(input, prompt)
    return answer.strip().lower() in ("y", "yes")


async def _answer_on_terminal(agent: Agent, request: InputRequest) -> None:
    """Ask ``request`` on the terminal (stderr, then stdin) until an answer is taken; without
    a terminal there is nobody to ask, so it is answered ``cancel`` at once."""
    if not sys.stdin.isatty():
        sys.stderr.write(f"{describe_request(request)}\n  (no terminal: answered cancel)\n")
        with contextlib.suppress(InputError):
            agent.answer_input(request.id, "cancel", by=INPUT_BY)
        return
    sys.stderr.write(describe_request(request) + "\n")
    while any(r.id == request.id for r in agent.pending_inputs):
        line = await asyncio.to_thread(input, prompt_label(request))
        refused = answer_line(agent, request, line)
        if refused is None:
            return
        sys.stderr.write(f"error: {refused}\n")


async def run_once(
    settings: Settings,
    prompt: str,
    *,
    model: str | None,
    session_id: str | None,
    options: LiveOptions,
    json_lines: bool,
    console: Console,
    goal: str | None = None,
    full: bool = False,
    output_schema: dict[str, Any] | None = None,
    attachments: Sequence[ImageBlock | FileBlock] = (),
) -> str:
    """Run ``prompt`` as one turn, then pursue ``goal`` if given; returns the outcome kind.

    With ``json_lines``, every session event and every live stream frame is written to
    stdout as one JSON line the moment it happens. With ``output_schema`` the turn's answer
    must match it; the validated JSON is printed on stdout as the last line.
    """
    renderer = EventRenderer(console)
    agents: list[Agent] = []  # the run's agent, once open
    asking: set[asyncio.Task[None]] = set()

    def show(payload: SessionEventPayload) -> None:
        if json_lines:
            _write(event_line(payload.event, full=full))
        else:
            renderer.render(payload.event)
        if payload.event.type == "input/requested" and agents:
            # A server asks during a call: the person at the terminal answers.
            task = asyncio.ensure_future(_answer_on_terminal(agents[0], payload.event.data))
            asking.add(task)
            task.add_done_callback(asking.discard)

    def show_frame(payload: StreamFramePayload) -> None:
        _write(frame_line(payload.frame))

    def setup(scope: AgentScope) -> None:
        scope.hooks.on(h.SESSION_EVENT, show)
        if json_lines:
            scope.hooks.on(h.ASSISTANT_STREAM, show_frame)

    async with AsyncExitStack() as stack:
        live = await open_live(
            stack,
            settings,
            model=model,
            session_id=session_id,
            options=options,
            ask=_ask_on_terminal,
            workspace=Path.cwd(),
            setup=setup,
        )
        agent = live.agent
        agents.append(agent)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, agent.cancel, CancelCause.user())
        goal_kind: str | None = None
        try:
            first_new = len(agent.session.events)
            message = with_attachments(prompt, attachments)
            if output_schema is not None:
                result = await agent.run(message, output_type=output_schema)
                if result.turn is not None and result.kind == "completed":
                    sys.stdout.write(json.dumps(result.output, ensure_ascii=False) + "\n")
                    sys.stdout.flush()
            elif prompt or attachments:
                agent.followup(message)
            if goal is None:
                await agent.when_idle()
            else:
                goal_kind = await _pursue_goal(live.rt, agent, goal)
            await agent.session.flush()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        ends = [e for e in agent.session.events[first_new:] if e.type == "turn/end"]
        if not json_lines:
            console.print(f"[dim]session {agent.id} · {live.provider}/{live.model}[/dim]")
        if goal_kind is not None:
            return goal_kind
        return ends[-1].data.reason.kind if ends else "error"


async def _pursue_goal(rt: Runtime, agent: Agent, objective: str) -> str | None:
    """Make ``objective`` the session's goal and let the goal-round driver run it until it
    is complete, blocked or paused; returns the matching outcome kind (``None`` otherwise)."""
    from ..goals import install_goals

    driver = install_goals(rt)
    goal = driver.goal_of(agent)
    current = goal.current
    if current is not None and current.phase not in ("complete", "cleared"):
        goal.clear(goal.revision)  # --goal replaces whatever goal the session had
    goal.create(objective, expected_revision=goal.revision)
    await driver.when_settled(agent)
    phase = goal.current.phase if goal.current is not None else None
    return {"complete": "completed", "blocked": "blocked", "paused": "aborted"}.get(phase or "")
