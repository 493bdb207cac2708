"""The hook bus: named hooks, each with one fixed mode.

* **emit** — every listener in registration order; failures are logged and contained.
  A listener that returns an awaitable has it run as a task the bus tracks.
* **serial** — awaited one after another; the first non-``None`` return stops the rest.
* **waterfall** — the last-registered listener runs first and receives ``next``; the
  runtime's default ends the chain.

Registrations return a ``Disposer``. A listener registered with ``owner`` only receives
that agent's payloads (an agent's scope registers its listeners that way): every payload
says whose it is in its ``owner`` attribute (``HookPayload``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, overload

__all__ = [
    "AnyHook",
    "Disposer",
    "EmitHook",
    "EmitListener",
    "HookBus",
    "HookMode",
    "HookPayload",
    "SerialHook",
    "SerialListener",
    "WaterfallHook",
    "WaterfallListener",
]

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")
# A payload being emitted: every payload type has ``owner`` (read when a listener is scoped).
E = TypeVar("E", bound="HookPayload")
HookMode = Literal["emit", "serial", "waterfall"]
_log = logging.getLogger("steerloop")


class HookPayload(Protocol):
    """What every hook payload carries: the id of the agent it belongs to (an agent and its
    session share the id), or ``None`` for a payload of no agent."""

    @property
    def owner(self) -> str | None: ...


class _Handle(str):
    """A hook's name carrying its mode (the runtime class of every typed handle)."""

    mode: HookMode = "emit"


if TYPE_CHECKING:
    # To a type checker a handle is *not* a ``str``: a listener that does not fit the handle's
    # overload of ``HookBus.on`` must not fall through to the plain-name overload, which takes
    # any callable. At run time a handle is its name (``_Handle``), so it goes wherever a
    # name goes and ``rt.hooks.on("agent/status", ...)`` stays the same registration.

    class _TypedHandle:
        mode: HookMode

        def __init__(self, name: str) -> None: ...
        def __str__(self) -> str: ...

    class EmitHook(_TypedHandle, Generic[P]):
        """A typed handle of a notification hook: its listeners take the payload ``P``."""

    class SerialHook(_TypedHandle, Generic[P, R]):
        """A typed handle of a serial hook: ``listener(P)`` returns ``R`` or ``None``."""

    class WaterfallHook(_TypedHandle, Generic[P, R]):
        """A typed handle of a waterfall hook: ``listener(P, next)`` returns ``R``."""

    HookName = str | _TypedHandle
    AnyHook = EmitHook[Any] | SerialHook[Any, Any] | WaterfallHook[Any, Any]
else:

    class EmitHook(_Handle, Generic[P]):
        """A typed handle of a notification hook: its listeners take the payload ``P``.

        It is the hook's name (a ``str``), so it goes wherever a name goes; the type
        parameters let ``HookBus.on`` check a listener against the hook's payload and result.
        """

        mode = "emit"

    class SerialHook(_Handle, Generic[P, R]):
        """A typed handle of a serial hook: ``listener(P)`` returns ``R`` or ``None``."""

        mode = "serial"

    class WaterfallHook(_Handle, Generic[P, R]):
        """A typed handle of a waterfall hook: ``listener(P, next)`` returns ``R``."""

        mode = "waterfall"

    HookName = str
    AnyHook = _Handle


EmitListener = Callable[[P], Awaitable[None] | None]
"""A listener of an ``EmitHook[P]``."""
SerialListener = Callable[[P], Awaitable[R | None] | R | None]
"""A listener of a ``SerialHook[P, R]``: ``None`` is no opinion."""
WaterfallListener = Callable[[P, Callable[[], Awaitable[R]]], Awaitable[R]]
"""A listener of a ``WaterfallHook[P, R]``: it gets the payload and ``next``."""


class Disposer:
    """Undoes one registration; calling it again is a no-op."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn: Callable[[], None] | None = fn

    def __call__(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn()


class _Entry:
    __slots__ = ("fn", "owner")

    def __init__(self, fn: Callable[..., Any], owner: str | None) -> None:
        self.fn = fn
        self.owner = owner


class HookBus:
    """Named hooks with fixed modes (see the module docstring).

    The bus knows the hooks whose handles it was built with and those ``define`` adds: a
    hook's one declaration is its handle, which carries its name and mode. Listeners register
    by handle or by name; emission goes through the handle, which types payload and result.
    """

    def __init__(self, hooks: Iterable[AnyHook] = ()) -> None:
        self._listeners: dict[HookName, list[_Entry]] = {}
        # Names with at least one owner-scoped listener: only their emissions read the
        # payload's owner and filter. Kept by ``_set``, the one writer of ``_listeners``.
        self._scoped: set[HookName] = set()
        self._modes: dict[str, HookMode] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        for hook in hooks:
            self.define(hook)

    def define(self, hook: AnyHook) -> None:
        """Declare a hook by its handle; redefining a name with another mode raises
        ``ValueError``."""
        name, mode = str(hook), hook.mode
        existing = self._modes.get(name)
        if existing is not None and existing != mode:
            raise ValueError(f"hook {name!r} already has mode {existing!r}")
        self._modes[name] = mode

    def mode(self, name: HookName) -> HookMode:
        try:
            return self._modes[str(name)]
        except KeyError:
            raise ValueError(f"unknown hook {name!r}") from None

    @overload
    def on(
        self,
        name: EmitHook[P],
        listener: EmitListener[P],
        *,
        owner: str | None = None,
    ) -> Disposer: ...
    @overload
    def on(
        self,
        name: SerialHook[P, R],
        listener: SerialListener[P, R],
        *,
        owner: str | None = None,
    ) -> Disposer: ...
    @overload
    def on(
        self,
        name: WaterfallHook[P, R],
        listener: WaterfallListener[P, R],
        *,
        owner: str | None = None,
    ) -> Disposer: ...
    @overload
    def on(
        self, name: str, listener: Callable[..., Any], *, owner: str | None = None
    ) -> Disposer: ...
    def on(
        self, name: HookName, listener: Callable[..., Any], *, owner: str | None = None
    ) -> Disposer:
        """Register ``listener`` for ``name`` (a handle or its string name); returns its
        disposer."""
        self.mode(name)
        if not callable(listener):
            raise ValueError("listener must be callable")
        entry = _Entry(listener, owner)
        # Copy-on-write: an emission in progress keeps iterating its own snapshot.
        self._set(name, [*self._listeners.get(name, ()), entry])

        def dispose() -> None:
            self._set(name, [e for e in self._listeners.get(name, ()) if e is not entry])

        return Disposer(dispose)

    def has(self, name: HookName) -> bool:
        return bool(self._listeners.get(name))

    def _set(self, name: HookName, entries: list[_Entry]) -> None:
        self._listeners[name] = entries
        if any(e.owner is not None for e in entries):
            self._scoped.add(name)
        else:
            self._scoped.discard(name)

    def _select(self, name: HookName, payload: HookPayload) -> list[_Entry]:
        entries = self._listeners.get(name)
        if not entries:
            return []
        if name not in self._scoped:
            return entries
        owner = payload.owner
        return [e for e in entries if e.owner is None or e.owner == owner]

    def emit(self, hook: EmitHook[E], payload: E) -> None:
        """Notify every listener; failures are logged, awaitables run as tracked tasks."""
        for entry in self._select(hook, payload):
            try:
                result = entry.fn(payload)
            except Exception:
                _log.exception("listener of %s raised", hook)
                continue
            if result is not None and inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._settled(hook))

    def _settled(self, name: HookName) -> Callable[[asyncio.Future[Any]], None]:
        def done(task: asyncio.Future[Any]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                _log.error("listener of %s failed", name, exc_info=task.exception())

        return done

    async def emit_awaited(self, hook: EmitHook[E], payload: E) -> None:
        """Await every listener in order; the first failure propagates."""
        for entry in self._select(hook, payload):
            result = entry.fn(payload)
            if result is not None and inspect.isawaitable(result):
                await result

    async def serial(self, hook: SerialHook[E, R], payload: E) -> R | None:
        """Await listeners in order; return the first non-``None`` result."""
        for entry in self._select(hook, payload):
            result = entry.fn(payload)
            if result is not None and inspect.isawaitable(result):
                result = await result
            if result is not None:
                return result  # type: ignore[no-any-return]
        return None

    async def waterfall(
        self, hook: WaterfallHook[E, R], payload: E, default: Callable[[], Awaitable[R]]
    ) -> R:
        """Run the chain, last-registered first, ending in ``default``."""
        entries = self._select(hook, payload)
        if not entries:
            return await default()

        async def call(i: int) -> Any:
            if i < 0:
                return await default()

            async def next_() -> Any:
                return await call(i - 1)

            result = entries[i].fn(payload, next_)
            if result is not None and inspect.isawaitable(result):
                result = await result
            return result

        return await call(len(entries) - 1)  # type: ignore[no-any-return]

    async def drain(self) -> None:
        """Wait for awaitables returned by emit listeners."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
