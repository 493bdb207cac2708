"""The tests' one support module: the scripted harness, the log notation, traced tools,
fault injection and the small script entries the agent tests share.

``compact(session)`` renders the log in the notation of CONTRACTS.md, e.g.
``["ins(nt,u1)", "T+1", "claim(nt,u1)", "S+1.1", "sys", "user(u1)", "hdr(initial)", "ctx",
"msg", "S-1.1", "T-1:completed"]``; messages are labelled by their first text block;
approvals are ``ask(c1)`` and ``decide(c1,allow)``.

``Bench.tool(name, ...)`` defines a tool whose body appends ``begin:<call_id>`` and
``end:<call_id>`` to ``bench.trace``, sets ``bench.started[call_id]`` on entry and, when
``bench.gates`` holds an event for the call id, waits for it before finishing. Hook
listeners and session observers can append to the same trace so tests compare one order.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from steerloop import AgentOptions, Runtime, Session, SessionEvent, define_tool, user_message
from steerloop.llm._types import GenerateRequest
from steerloop.messages import TextBlock, UserMessage
from steerloop.testing import HANG, ScriptedAdapter
from steerloop.tools import Tool, ToolExec

SETTLE_TIMEOUT = 5.0


class Harness:
    """A runtime with a scripted adapter registered for provider ``mock``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.adapter = ScriptedAdapter()
        rt.llm.register_adapter(["mock"], self.adapter)

    async def agent(self, *script: Any, session_id: str = "s-1", **kwargs: Any) -> Any:
        self.adapter.add(*script)
        options = kwargs.pop("agent_options", AgentOptions(provider="mock", model="m"))
        handle = await self.rt.agents.create(session_id=session_id, agent_options=options, **kwargs)
        return handle.agent


async def settle(agent: Any, timeout: float = SETTLE_TIMEOUT) -> None:
    """``await agent.when_idle()`` with a timeout so a hang fails."""
    await asyncio.wait_for(agent.when_idle(), timeout)


async def within(awaitable: Awaitable[Any], timeout: float = SETTLE_TIMEOUT) -> Any:
    return await asyncio.wait_for(awaitable, timeout)


def label(message: Any) -> str:
    for block in message.content:
        if isinstance(block, TextBlock):
            return block.text
    return str(message.id)


def _short(target: str) -> str:
    return "nt" if target == "next-turn" else "ns"


def render(event: SessionEvent, queues: dict[str, list[Any]] | None = None) -> list[str]:
    """One event in CONTRACTS.md notation; ``queues`` (the folded inbox) names removals."""
    d = event.data
    t = event.type
    if t == "agent/inbox/spliced":
        queues = queues if queues is not None else {"next-turn": [], "next-step": []}
        queue = queues[d.target]
        removed = queue[d.start : d.start + d.removed_count]
        queue[d.start : d.start + d.removed_count] = list(d.inserted)
        verb = "drop" if d.outcome == "canceled" else "claim"
        out = [f"{verb}({_short(d.target)},{label(m)})" for m in removed]
        out += [f"ins({_short(d.target)},{label(m)})" for m in d.inserted]
        return out
    if t == "turn/start":
        return [f"T+{d.turn}"]
    if t == "turn/end":
        return [f"T-{d.turn}:{d.reason.kind}"]
    if t == "step/start":
        return [f"S+{d.turn}.{d.step}"]
    if t == "step/end":
        return [f"S-{d.turn}.{d.step}"]
    if t == "system/message":
        return ["sys"]
    if t == "user/message":
        return [f"user({label(d)})"]
    if t == "request/header":
        return [f"hdr({d.reason})"]
    if t == "request/context":
        return ["ctx"]
    if t == "assistant/message":
        return ["msg(interrupted)" if d.interrupted else "msg"]
    if t == "assistant/attempt":
        return ["attempt"]
    if t == "tool/call":
        return [f"call({d.call_id})"]
    if t == "tool/result":
        code = f",{d.error.code}" if d.error is not None else ""
        return [f"result({d.message.call_id}{code})"]
    if t == "tool/approval-requested":
        return [f"ask({d.call_id})"]
    if t == "tool/approval-decided":
        return [f"decide({d.call_id},{d.decision})"]
    if t == "tool/deferred":
        return [f"defer({d.call_id})"]
    return [t]


def compact(session: Session, *, only: Sequence[str] | None = None) -> list[str]:
    """The log in CONTRACTS.md notation; ``only`` keeps the items starting with a prefix."""
    queues: dict[str, list[Any]] = {"next-turn": [], "next-step": []}
    out = [item for event in session.events for item in render(event, queues)]
    if only is not None:
        out = [item for item in out if item.startswith(tuple(only))]
    return out


def types(session: Session) -> list[str]:
    return [e.type for e in session.events]


def events_of(session: Session, type: str) -> list[SessionEvent]:
    return [e for e in session.events if e.type == type]


def gate() -> asyncio.Event:
    return asyncio.Event()


Recorder = Callable[..., None]


def texts(messages: Sequence[Any]) -> list[str]:
    return [f"{m.role}:{label(m)}" for m in messages]


def u(text: str) -> UserMessage:
    return user_message(text)


@asynccontextmanager
async def open_harness(**options: Any) -> AsyncIterator[Harness]:
    """A ``Harness`` over a runtime opened with ``options`` (e.g. ``store="memory://"`` or
    ``max_parallel_tool_calls``), closed within ``SETTLE_TIMEOUT`` afterwards."""
    runtime = await Runtime.open(**options)
    try:
        yield Harness(runtime)
    finally:
        await asyncio.wait_for(runtime.close(), SETTLE_TIMEOUT)


def reason_of(agent: Any, turn: int = 1) -> Any:
    """The ``turn/end`` reason of ``turn``."""
    return next(e.data.reason for e in events_of(agent.session, "turn/end") if e.data.turn == turn)


def last_reason(agent: Any) -> Any:
    """The reason of the last ``turn/end``."""
    return events_of(agent.session, "turn/end")[-1].data.reason


def hanging() -> tuple[asyncio.Event, Any]:
    """A script entry that hangs like ``HANG`` and sets an event once its request arrived."""
    started = asyncio.Event()

    def entry(request: GenerateRequest) -> Any:
        started.set()
        return HANG

    return started, entry


class Stuck:
    """A tool body that ignores its signal and waits for a gate (a slow abort)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, args: Any, exec: Any) -> str:
        self.entered.set()
        await self.release.wait()
        return "late"


Body = Callable[[Any, ToolExec], Awaitable[Any]]


class Bench:
    """Shared trace, per-call gates and start events for test tools."""

    def __init__(self) -> None:
        self.trace: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.started: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.execs: dict[str, ToolExec] = {}
        self.args: dict[str, Any] = {}

    def gate(self, *call_ids: str) -> None:
        """Make the bodies of ``call_ids`` wait until ``release``."""
        for call_id in call_ids:
            self.gates[call_id] = asyncio.Event()

    def release(self, *call_ids: str) -> None:
        for call_id in call_ids:
            self.gates[call_id].set()

    async def wait_started(self, *call_ids: str) -> None:
        for call_id in call_ids:
            await asyncio.wait_for(self.started[call_id].wait(), SETTLE_TIMEOUT)

    def tool(
        self,
        name: str,
        *,
        safe: bool | Callable[[Any], bool] = False,
        parameters: Any = None,
        then: Body | None = None,
        timeout: float | None = None,
        durable_dispatch: bool | None = None,
        reconcile: Any = None,
    ) -> Tool:
        """A traced tool; ``then(args, exec)`` (after the gate) produces the result."""

        async def execute(args: Any, exec: ToolExec) -> Any:
            self.trace.append(f"begin:{exec.call_id}")
            self.execs[exec.call_id] = exec
            self.args[exec.call_id] = args
            self.started[exec.call_id].set()
            gate = self.gates.get(exec.call_id)
            if gate is not None:
                await gate.wait()
            try:
                if then is not None:
                    return await then(args, exec)
                return f"r-{exec.call_id}"
            finally:
                self.trace.append(f"end:{exec.call_id}")

        return define_tool(
            name=name,
            description=f"test tool {name}",
            parameters=parameters if parameters is not None else {"type": "object"},
            execute=execute,
            concurrency_safe=safe,
            timeout=timeout,
            durable_dispatch=durable_dispatch,
            reconcile=reconcile,
        )


async def yield_loop(times: int = 20) -> None:
    """Let every ready task run a few times (no wall-clock sleeping)."""
    for _ in range(times):
        await asyncio.sleep(0)


async def kill_after_first_line(script: Path, *args: str, timeout: float = 20.0) -> list[str]:
    """Run ``python SCRIPT ARGS…`` until its first line of output (a child that exits before
    printing one fails with its stderr), SIGKILL it and wait for its end, each bounded by
    ``timeout``; the words of that line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        await proc.wait()
        raise AssertionError(f"the child exited: {(await proc.stderr.read()).decode()}")
    proc.send_signal(signal.SIGKILL)
    await asyncio.wait_for(proc.wait(), timeout)
    assert proc.returncode == -signal.SIGKILL
    return line.decode().split()


class Fault(Exception):
    """An injected failure of the session's own append."""


def fail_append(
    session: Session,
    match: Callable[[str, Any], bool],
    *,
    times: int = 1,
    on_fail: Callable[[], None] | None = None,
) -> list[str]:
    """Make ``session.append`` raise ``Fault`` for the first ``times`` matching appends.

    Returns a list that records one description per injected failure. The one place that
    wraps ``Session.append``: when its signature changes, only this changes.
    """
    original = session.append
    fired: list[str] = []

    def append(*args: Any, **kwargs: Any) -> Any:
        # append(record) names its type in record.TYPE; append(type, data) passes both.
        type, data = (args[0].TYPE, args[0]) if len(args) == 1 else args
        if len(fired) < times and match(type, data):
            fired.append(f"{type}:{_call_id(data)}")
            if on_fail is not None:
                on_fail()
            raise Fault(f"injected failure appending {type} for {_call_id(data)}")
        return original(*args, **kwargs)

    session.append = append  # type: ignore[method-assign]
    return fired


def _call_id(data: Any) -> str | None:
    call_id = getattr(data, "call_id", None)
    if call_id is not None:
        return str(call_id)
    message = getattr(data, "message", None)
    return getattr(message, "call_id", None)


def on_event(call_id: str, type: str) -> Callable[[str, Any], bool]:
    """Matcher for ``fail_append``: the ``type`` event of ``call_id``."""
    return lambda t, data: t == type and _call_id(data) == call_id


def results_by_call(session: Session) -> Mapping[str, list[Any]]:
    out: defaultdict[str, list[Any]] = defaultdict(list)
    for event in session.events:
        if event.type == "tool/result":
            out[event.data.message.call_id].append(event)
    return out


def fail_append_of(agent: Any, event_type: str) -> None:
    """The store rejects every append of ``event_type`` with ``OSError("store rejected …")``."""
    original = agent.session.append

    def append(first: Any, *args: Any, **kwargs: Any) -> Any:
        # append(record) names its type in record.TYPE; append(type, data) passes the name.
        type = getattr(first, "TYPE", first)
        if type == event_type:
            raise OSError(f"store rejected {type}")
        return original(first, *args, **kwargs)

    agent.session.append = append
