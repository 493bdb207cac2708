"""HookBus: emit / serial / waterfall modes, disposers, scopes."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from steerloop import hooks
from steerloop.hooks import (
    HANDLES,
    Disposer,
    EmitHook,
    HookBus,
    SerialHook,
    SessionEventPayload,
    ToolHookPayload,
    WaterfallHook,
)

# The runtime's handles, typed loosely: these tests drive the bus with stand-in payloads.
CREATED: EmitHook[Any] = hooks.AGENT_CREATED
ERROR: EmitHook[Any] = hooks.AGENT_ERROR
POST_EXECUTE: WaterfallHook[Any, Any] = hooks.TOOLS_POST_EXECUTE
PRE_EXECUTE: SerialHook[Any, Any] = hooks.TOOLS_PRE_EXECUTE
PRE_STEP: WaterfallHook[Any, Any] = hooks.PRE_STEP
REQUEST: WaterfallHook[Any, Any] = hooks.REQUEST
REQUEST_ERROR: WaterfallHook[Any, Any] = hooks.REQUEST_ERROR
SESSION_EVENT: EmitHook[Any] = hooks.SESSION_EVENT
STATUS: EmitHook[Any] = hooks.STATUS
TOOLS_RESULT: EmitHook[Any] = hooks.TOOLS_RESULT
TURN_STOPPING: SerialHook[Any, Any] = hooks.TURN_STOPPING


@dataclass(frozen=True)
class _Unowned:
    """A payload of no agent (``HookPayload``): only unscoped listeners receive it."""

    owner: None = None


def _agent_payload(agent_id: str, **fields: Any) -> SimpleNamespace:
    return SimpleNamespace(agent=SimpleNamespace(id=agent_id), owner=agent_id, **fields)


def test_every_documented_hook_has_its_mode() -> None:
    """The modes of API.md's hook list are fixed by the runtime."""
    bus = HookBus(HANDLES)
    emit = [
        "agent/created", "agent/disposed", "agent/status", "agent/error",
        "agent/session-start", "agent/inbox/inserted", "agent/inbox/claimed",
        "agent/inbox/discarded", "agent/assistant-stream", "session/event", "tools/result",
        "runtime/closing",  # awaited by Runtime.close(); plugins release what they hold
        "tools/approval-requested",  # a held call's request is durable: answerers decide
    ]  # fmt: skip
    waterfall = ["agent/pre-step", "agent/request", "agent/request-error", "tools/post-execute"]
    serial = ["agent/turn-stopping", "tools/pre-execute", "agent/compact"]
    for name in emit:
        assert bus.mode(name) == "emit", name
    for name in waterfall:
        assert bus.mode(name) == "waterfall", name
    for name in serial:
        assert bus.mode(name) == "serial", name
    assert {str(handle) for handle in HANDLES} == {*emit, *waterfall, *serial}


def test_unknown_hook_name_raises_value_error() -> None:
    """Registering on a hook name the runtime does not know raises ``ValueError``."""
    bus = HookBus(HANDLES)
    with pytest.raises(ValueError, match="unknown hook"):
        bus.on("agent/nope", lambda p: None)
    with pytest.raises(ValueError):
        bus.mode("agent/nope")


def test_non_callable_listener_raises_value_error() -> None:
    """A listener must be callable."""
    with pytest.raises(ValueError):
        HookBus(HANDLES).on("agent/status", "not callable")  # type: ignore[call-overload]


def test_define_plugin_hook_and_conflicting_mode() -> None:
    """A plugin hook is declared by its handle (again with the same mode is fine); a handle of
    another mode for a known name raises."""
    bus = HookBus(HANDLES)
    thing: SerialHook[_Unowned, str] = SerialHook("plugin/thing")
    bus.define(thing)
    bus.define(SerialHook("plugin/thing"))
    assert bus.mode("plugin/thing") == "serial"
    with pytest.raises(ValueError):
        bus.define(EmitHook("plugin/thing"))
    with pytest.raises(ValueError):
        bus.define(SerialHook("agent/status"))


def test_a_bus_knows_only_the_hooks_it_was_given() -> None:
    """The bus has no list of its own: a hook is known from its handle."""
    assert HookBus().has("agent/status") is False
    with pytest.raises(ValueError, match="unknown hook"):
        HookBus().on("agent/status", lambda p: None)
    assert HookBus(HANDLES).mode(hooks.TOOLS_POST_EXECUTE) == "waterfall"


def test_emit_calls_listeners_in_registration_order() -> None:
    """emit: every listener is called with the payload, in registration order."""
    bus = HookBus(HANDLES)
    calls: list[tuple[str, object]] = []
    payload = _Unowned()
    bus.on("agent/status", lambda p: calls.append(("a", p)))
    bus.on("agent/status", lambda p: calls.append(("b", p)))
    bus.on("agent/status", lambda p: calls.append(("c", p)))
    bus.emit(STATUS, payload)
    assert calls == [("a", payload), ("b", payload), ("c", payload)]


def test_emit_with_no_listeners_is_a_no_op() -> None:
    """Emitting a hook nobody listens to does nothing."""
    bus = HookBus(HANDLES)
    assert not bus.has("agent/status")
    bus.emit(STATUS, _Unowned())


def test_emit_contains_a_raising_listener(caplog: pytest.LogCaptureFixture) -> None:
    """C7.3-12: a raising emit listener is logged and does not stop the others."""
    bus = HookBus(HANDLES)
    calls: list[str] = []

    def boom(_: object) -> None:
        raise RuntimeError("status boom")

    bus.on("agent/status", lambda p: calls.append("a"))
    bus.on("agent/status", boom)
    bus.on("agent/status", lambda p: calls.append("c"))
    with caplog.at_level(logging.ERROR, logger="steerloop"):
        bus.emit(STATUS, _Unowned())
    assert calls == ["a", "c"]
    failures = [r for r in caplog.records if r.exc_info and "status boom" in str(r.exc_info[1])]
    assert len(failures) == 1
    assert "agent/status" in failures[0].getMessage()


async def test_emit_runs_awaitables_and_logs_their_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """C7.3-12: an awaitable returned by an emit listener is run; its failure is logged."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    gate = asyncio.Event()

    async def ok(_: object) -> None:
        await gate.wait()
        calls.append("ok")

    async def bad(_: object) -> None:
        await gate.wait()
        raise RuntimeError("async boom")

    bus.on("session/event", ok)
    bus.on("session/event", bad)
    bus.on("session/event", lambda p: calls.append("sync"))
    with caplog.at_level(logging.ERROR, logger="steerloop"):
        bus.emit(SESSION_EVENT, _Unowned())
        assert calls == ["sync"]  # emit itself does not wait
        gate.set()
        await asyncio.wait_for(bus.drain(), 1)
    assert calls == ["sync", "ok"]
    failures = [r for r in caplog.records if r.exc_info and "async boom" in str(r.exc_info[1])]
    assert len(failures) == 1


async def test_emit_awaited_awaits_in_order_and_propagates() -> None:
    """emit_awaited (agent/created) awaits each listener in order; a failure propagates."""
    bus = HookBus(HANDLES)
    calls: list[str] = []

    async def first(_: object) -> None:
        await asyncio.sleep(0)
        calls.append("first")

    def second(_: object) -> None:
        calls.append("second")
        raise RuntimeError("veto")

    bus.on("agent/created", first)
    bus.on("agent/created", second)
    bus.on("agent/created", lambda p: calls.append("third"))
    with pytest.raises(RuntimeError, match="veto"):
        await bus.emit_awaited(CREATED, _Unowned())
    assert calls == ["first", "second"]


async def test_serial_bails_on_first_non_none() -> None:
    """serial: listeners run one after another; the first non-``None`` result stops the rest."""
    bus = HookBus(HANDLES)
    calls: list[str] = []

    async def none_async(_: object) -> None:
        await asyncio.sleep(0)
        calls.append("a")

    def none_sync(_: object) -> None:
        calls.append("b")

    async def value(_: object) -> str:
        calls.append("c")
        return "stop"

    bus.on("agent/turn-stopping", none_async)
    bus.on("agent/turn-stopping", none_sync)
    bus.on("agent/turn-stopping", value)
    bus.on("agent/turn-stopping", lambda p: calls.append("d"))
    assert await bus.serial(TURN_STOPPING, _Unowned()) == "stop"
    assert calls == ["a", "b", "c"]


async def test_serial_returns_none_when_nobody_bails() -> None:
    """serial: with only ``None`` results (or no listeners) the result is ``None``."""
    bus = HookBus(HANDLES)
    assert await bus.serial(PRE_EXECUTE, _Unowned()) is None
    bus.on("tools/pre-execute", lambda p: None)
    assert await bus.serial(PRE_EXECUTE, _Unowned()) is None


async def test_serial_false_is_a_result() -> None:
    """serial: only ``None`` means "no opinion"; a falsy value bails too."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    bus.on("tools/pre-execute", lambda p: False)
    bus.on("tools/pre-execute", lambda p: calls.append("later"))
    assert await bus.serial(PRE_EXECUTE, _Unowned()) is False
    assert calls == []


async def test_waterfall_last_registered_first_with_next() -> None:
    """waterfall: the last-registered listener runs first; ``next()`` runs the rest, then the
    default."""
    bus = HookBus(HANDLES)
    trace: list[str] = []

    async def first(payload: object, next_: Any) -> str:
        trace.append("first>")
        out = await next_()
        trace.append("first<")
        return f"first({out})"

    async def second(payload: object, next_: Any) -> str:
        trace.append("second>")
        out = await next_()
        trace.append("second<")
        return f"second({out})"

    async def default() -> str:
        trace.append("default")
        return "d"

    bus.on("agent/request", first)
    bus.on("agent/request", second)
    assert await bus.waterfall(REQUEST, _Unowned(), default) == "second(first(d))"
    assert trace == ["second>", "first>", "default", "first<", "second<"]


async def test_waterfall_without_next_short_circuits() -> None:
    """waterfall: a listener that returns without calling ``next`` skips the rest and the
    default."""
    bus = HookBus(HANDLES)
    trace: list[str] = []

    async def inner(payload: object, next_: Any) -> str:
        trace.append("inner")
        return await next_()  # type: ignore[no-any-return]

    async def outer(payload: object, next_: Any) -> str:
        trace.append("outer")
        return "mine"

    async def default() -> str:
        trace.append("default")
        return "d"

    bus.on("agent/pre-step", inner)
    bus.on("agent/pre-step", outer)
    assert await bus.waterfall(PRE_STEP, _Unowned(), default) == "mine"
    assert trace == ["outer"]


async def test_waterfall_with_no_listeners_runs_the_default() -> None:
    """waterfall: no listeners → the runtime's default result."""
    bus = HookBus(HANDLES)

    async def default() -> int:
        return 42

    assert await bus.waterfall(POST_EXECUTE, _Unowned(), default) == 42


async def test_waterfall_accepts_sync_listeners() -> None:
    """waterfall: a sync listener may return ``next()``'s awaitable or a plain value."""
    bus = HookBus(HANDLES)

    async def default() -> str:
        return "d"

    bus.on("agent/request-error", lambda p, next_: next_())
    assert await bus.waterfall(REQUEST_ERROR, _Unowned(), default) == "d"
    bus.on("agent/request-error", lambda p, next_: "plain")
    assert await bus.waterfall(REQUEST_ERROR, _Unowned(), default) == "plain"


def test_disposer_is_idempotent() -> None:
    """A Disposer undoes its registration once; calling it again is a no-op."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    dispose_a = bus.on("agent/status", lambda p: calls.append("a"))
    bus.on("agent/status", lambda p: calls.append("b"))
    assert isinstance(dispose_a, Disposer)
    dispose_a()
    dispose_a()
    bus.emit(STATUS, _Unowned())
    assert calls == ["b"]


def test_disposing_the_same_listener_registered_twice_removes_one() -> None:
    """Each registration has its own disposer, even for the same function."""
    bus = HookBus(HANDLES)
    calls: list[object] = []
    first = bus.on("agent/status", calls.append)
    bus.on("agent/status", calls.append)
    first()
    first()
    payload = _Unowned()
    bus.emit(STATUS, payload)
    assert calls == [payload]


def test_disposing_during_emission_does_not_disturb_it() -> None:
    """Disposing (or adding) listeners during an emission leaves the emission in progress
    unchanged (it runs over a snapshot); the next emission sees the change."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    disposers: dict[str, Disposer] = {}

    def a(_: object) -> None:
        calls.append("a")
        disposers["a"]()
        disposers["b"]()
        bus.on("agent/status", lambda p: calls.append("late"))

    disposers["a"] = bus.on("agent/status", a)
    disposers["b"] = bus.on("agent/status", lambda p: calls.append("b"))
    bus.on("agent/status", lambda p: calls.append("c"))
    bus.emit(STATUS, _Unowned())
    assert calls == ["a", "b", "c"]
    calls.clear()
    bus.emit(STATUS, _Unowned())
    assert calls == ["c", "late"]


async def test_disposing_during_serial_does_not_disturb_it() -> None:
    """The serial chain in progress keeps its snapshot when a listener disposes another."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    disposers: dict[str, Disposer] = {}

    def a(_: object) -> None:
        calls.append("a")
        disposers["a"]()

    disposers["a"] = bus.on("agent/turn-stopping", a)
    bus.on("agent/turn-stopping", lambda p: calls.append("b"))
    assert await bus.serial(TURN_STOPPING, _Unowned()) is None
    assert calls == ["a", "b"]


def test_hook_scope_filters_by_owner() -> None:
    """Listeners registered through a scope only receive their own agent's payloads; global
    listeners receive everything."""
    bus = HookBus(HANDLES)
    calls: list[tuple[str, str]] = []
    bus.on("agent/status", lambda p: calls.append(("scoped", p.agent.id)), owner="a1")
    bus.on("agent/status", lambda p: calls.append(("global", p.agent.id)))
    bus.emit(STATUS, _agent_payload("a1"))
    bus.emit(STATUS, _agent_payload("a2"))
    assert calls == [("scoped", "a1"), ("global", "a1"), ("global", "a2")]


def test_hook_scope_owner_from_session_and_exec_payloads() -> None:
    """A payload's owner is explicit: ``session/event``'s is its session's id, ``tools/*``'s
    its exec's agent's; a scope matches on it."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    bus.on("session/event", lambda p: calls.append(f"session:{p.session.id}"), owner="a1")
    bus.on("tools/result", lambda p: calls.append(f"tool:{p.exec.agent.id}"), owner="a1")
    for sid in ("a1", "a2"):
        session: Any = SimpleNamespace(id=sid)
        exec: Any = SimpleNamespace(agent=SimpleNamespace(id=sid))
        event = SessionEventPayload(session, exec)
        tool = ToolHookPayload(exec)
        assert (event.owner, tool.owner) == (sid, sid)
        bus.emit(SESSION_EVENT, event)
        bus.emit(TOOLS_RESULT, tool)
    assert calls == ["session:a1", "tool:a1"]


def test_hook_scope_disposers_unwind_together() -> None:
    """The scope records a disposer per registration; running them all unregisters them."""
    bus = HookBus(HANDLES)
    calls: list[str] = []
    disposers: list[Disposer] = [
        bus.on("agent/status", lambda p: calls.append("x"), owner="a1"),
        bus.on("agent/error", lambda p: calls.append("y"), owner="a1"),
    ]
    for dispose in disposers:
        dispose()
    bus.emit(STATUS, _agent_payload("a1"))
    bus.emit(ERROR, _agent_payload("a1"))
    assert calls == []
    assert not bus.has("agent/status")


async def test_scoped_waterfall_skips_other_agents_listeners() -> None:
    """A scoped waterfall listener is not part of another agent's chain."""
    bus = HookBus(HANDLES)
    bus.on("agent/request", lambda p, next_: "a1-only", owner="a1")

    async def default() -> str:
        return "d"

    assert await bus.waterfall(REQUEST, _agent_payload("a1"), default) == "a1-only"
    assert await bus.waterfall(REQUEST, _agent_payload("a2"), default) == "d"


def test_owner_is_read_only_while_a_scoped_listener_is_registered() -> None:
    """Emissions of a hook without scoped listeners never read the payload's owner: once the
    last scoped listener is disposed, the bus is back to handing every payload over as is."""

    class Counting:
        reads = 0

        @property
        def owner(self) -> str:
            Counting.reads += 1
            return "a1"

    bus = HookBus(HANDLES)
    calls: list[str] = []
    bus.on("agent/status", lambda p: calls.append("all"))
    dispose = bus.on("agent/status", lambda p: calls.append("a1"), owner="a1")
    bus.on("agent/status", lambda p: calls.append("a2"), owner="a2")()
    bus.emit(STATUS, Counting())
    assert (calls, Counting.reads) == (["all", "a1"], 1)
    dispose()
    calls.clear()
    bus.emit(STATUS, Counting())
    assert (calls, Counting.reads) == (["all"], 1)
