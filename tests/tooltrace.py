"""Test tools that record begin/end traces, gates per call id, and fault injection.

``Bench.tool(name, ...)`` defines a tool whose body appends ``begin:<call_id>`` and
``end:<call_id>`` to ``bench.trace``, sets ``bench.started[call_id]`` on entry and, when
``bench.gates`` holds an event for the call id, waits for it before finishing. Hook
listeners and session observers can append to the same trace so tests compare one order.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from steerloop import Runtime, Session, define_tool
from steerloop.tools import Tool, ToolExec

from .conftest import SETTLE_TIMEOUT, Harness

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
        )


async def yield_loop(times: int = 20) -> None:
    """Let every ready task run a few times (no wall-clock sleeping)."""
    for _ in range(times):
        await asyncio.sleep(0)


@asynccontextmanager
async def harness(**options: Any) -> AsyncIterator[Harness]:
    """A Harness over a runtime opened with ``options`` (e.g. ``max_parallel_tool_calls``)."""
    runtime = await Runtime.open(**options)
    try:
        yield Harness(runtime)
    finally:
        await asyncio.wait_for(runtime.close(), SETTLE_TIMEOUT)


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

    Returns a list that records one description per injected failure.
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
