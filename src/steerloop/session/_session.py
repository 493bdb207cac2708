"""The event-sourced session: an append-only log and the model-visible surface it folds to."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from .._hooks import EmitHook, HookBus
from .._ids import Clock, default_clock
from .._owned import RuntimeOwned
from ..errors import SessionCorruptError, SessionPersistenceNotFoundError, SessionStorageError
from ..messages import Message, check_json
from ._blobs import StoredBlob, blob_seq, with_blob_data
from ._codec import KNOWN_TYPES
from ._encode import encode
from ._events import (
    SURFACE_TYPES,
    EventRecord,
    Replace,
    SessionEndSeed,
    SessionEvent,
    SurfaceOp,
    TurnStart,
    compaction_op_ok,
    surface_message,
)
from ._repair import RepairEvent, plan_repair

__all__ = [
    "SESSION_EVENT",
    "EventSink",
    "Session",
    "SessionEventPayload",
]

R = TypeVar("R", bound=EventRecord)
JsonPayload = dict[str, Any] | list[Any] | str | int | float | bool | None
"""A plain payload of a type without a record (a plugin's own event type)."""
_NO_DATA: Any = object()


@dataclass(frozen=True, slots=True)
class SessionEventPayload:
    """Payload of the ``session/event`` hook."""

    session: Session
    event: SessionEvent

    @property
    def owner(self) -> str:
        """The session's id, which is its agent's (``HookPayload``)."""
        return self.session.id


SESSION_EVENT: EmitHook[SessionEventPayload] = EmitHook("session/event")


class EventSink:
    """Where appended events go to become durable; the in-memory sink keeps nothing."""

    def write(self, event: SessionEvent) -> None:
        """Hand one event over, synchronously and in seq order."""

    async def flush(self) -> None:
        """Return once every event written so far is durable."""

    async def fence(self) -> None:
        """The barrier before a side effect: return once every event written so far is
        durable under a write lease this process still holds; raise otherwise.

        Where a lease can be taken over (PostgreSQL) the commit confirms it (a fenced
        commit); a failed fence fails the writer for good.
        """
        await self.flush()

    def lease_valid(self) -> bool:
        """Whether a tool may start now without a fence: the writer has not failed and its
        lease cannot have expired. Synchronous and cheap (checked before every tool start)."""
        return True

    async def close(self) -> None:
        """Flush and release the write handle."""

    def publish(self) -> None:
        """The session was published: store what was buffered, then store every later write.

        Until this is called a persistent sink buffers writes, so a creation that rolls
        back (``discard``) leaves no stored artifact (C7.2-19).
        """

    async def discard(self) -> None:
        """Release the write handle of a session that was never published; store nothing."""

    def set_header(self, header: Mapping[str, Any]) -> None:
        """The session header (EVENTS.md §2.7) to store when a fresh session is published."""

    async def read_blob(self, hash: str) -> StoredBlob:
        """The bytes of blob ``hash`` from the store behind this sink.

        Raises:
            SessionPersistenceNotFoundError: the store keeps no such blob (a sink without a
                store keeps none).
            SessionCorruptError: the stored blob is not what was stored.
        """
        raise SessionPersistenceNotFoundError(f"blob {hash} is not stored (no store)")


class _EventsView(Sequence[SessionEvent]):
    __slots__ = ("_events",)

    def __init__(self, events: list[SessionEvent]) -> None:
        self._events = events

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[SessionEvent]: ...
    def __getitem__(self, index: int | slice) -> SessionEvent | Sequence[SessionEvent]:
        return self._events[index]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[SessionEvent]:
        return iter(self._events)

    def __repr__(self) -> str:
        return f"<events {len(self._events)}>"


Observer = Callable[[SessionEvent], None]


class Session(metaclass=RuntimeOwned):
    """An append-only log of ``SessionEvent``s with an incrementally folded surface."""

    owned_hint = "an agent's is `agent.session`; live ones are in `rt.sessions`"

    def __init__(
        self,
        id: str,
        *,
        hooks: HookBus | None = None,
        clock: Clock = default_clock,
        seed: Sequence[SessionEvent] = (),
        sink: EventSink | None = None,
        header: dict[str, Any] | None = None,
        inherited_seed: bool = False,
        repair: bool = True,
        close_seed: bool = True,
    ) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError("session id must be a non-empty string")
        self.id = id
        self.header: dict[str, Any] = dict(header or {})
        self._hooks = hooks or HookBus((SESSION_EVENT,))
        self._clock = clock
        self._sink = sink or EventSink()
        self._events: list[SessionEvent] = []
        self._view = _EventsView(self._events)
        self._surface: list[int] = []
        self._projected: dict[int, Message | None] = {}
        # Surface folding is incremental (G-3): appends extend these, only a Replace rebuilds.
        self._derived_list: list[Message] = []
        self._derived: tuple[Message, ...] | None = ()
        self._system_nodes: list[int] = []
        self._latest: dict[str, SessionEvent] = {}
        self._observers: list[Observer] = []
        self._sealed: str | None = None
        self._blob_cache: OrderedDict[str, StoredBlob] = OrderedDict()
        self.last_turn = 0
        self.surface_replaced = 0
        for event in seed:
            self._fold(event)
        if close_seed:
            self.close_seed(plan_repair(seed) if repair else (), inherited=inherited_seed)

    # --- reading ---------------------------------------------------------------------

    @property
    def events(self) -> Sequence[SessionEvent]:
        return self._view

    @property
    def next_seq(self) -> int:
        return len(self._events) + 1

    @overload
    def latest(self, type: type[R], /) -> R | None: ...
    @overload
    def latest(self, type: str, /) -> SessionEvent | None: ...
    def latest(self, type: type[R] | str, /) -> R | SessionEvent | None:
        """The payload of the most recent event of a record's type (``latest(TurnStart)``);
        given a type name, the most recent event itself."""
        if isinstance(type, str):
            return self._latest.get(type)
        event = self._latest.get(type.TYPE)
        if event is None:
            return None
        data = event.data
        # A plain-JSON payload appended under a record's type name is not that record.
        return data if isinstance(data, type) else None

    def surface_seqs(self) -> tuple[int, ...]:
        return tuple(self._surface)

    def system_nodes(self) -> tuple[int, ...]:
        """Seqs of the ``system/message`` nodes on the surface, in surface order."""
        return tuple(self._system_nodes)

    def event(self, seq: int) -> SessionEvent:
        return self._events[seq - 1]

    def derive_messages(self) -> list[Message]:
        """The model-visible history: the surface projected to messages."""
        return list(self._derived_list)

    def derived_tuple(self) -> tuple[Message, ...]:
        """``derive_messages()`` as a frozen tuple, cached until the surface changes."""
        if self._derived is None:
            self._derived = tuple(self._derived_list)
        return self._derived

    # --- writing ---------------------------------------------------------------------

    @overload
    def append(
        self,
        record: EventRecord,
        /,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent: ...
    @overload
    def append(
        self,
        type: str,
        data: JsonPayload,
        /,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent: ...
    def append(
        self,
        type: str | EventRecord,
        data: JsonPayload | EventRecord = _NO_DATA,
        /,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """Validate and append one event; notify ``session/event`` listeners synchronously.

        ``append(record)`` writes a typed payload record under its ``TYPE``;
        ``append(type, data)`` writes a plain JSON payload (a plugin's own event type).

        Raises:
            SessionStorageError: the session is sealed (``seal``).
        """
        if data is _NO_DATA:
            data = type
            name = getattr(type, "TYPE", None)
            if not isinstance(name, str):
                raise ValueError(f"{type.__class__.__name__} is not an event payload record")
            type = name
        elif not isinstance(type, str):
            raise ValueError("append(type, data) takes a type name; append(record) a record")
        if self._sealed is not None:
            raise SessionStorageError(f"session {self.id!r} takes no more events: {self._sealed}")
        seq = len(self._events) + 1
        if (
            surface_op is None
            and source_event_seqs is None
            and isinstance(type, str)
            and type in _TYPED_LOG_ONLY
            and not isinstance(data, dict | list)
        ):
            # Fast path: a typed log-only payload with no surface fields passes every check
            # of _validate (its typed record is JSON by construction).
            sources = None
        else:
            sources = tuple(source_event_seqs) if source_event_seqs is not None else None
            self._validate(type, data, surface_op, sources, seq)
        event = SessionEvent(
            seq=seq,
            time=self._clock(),
            type=type,
            data=data,
            ignorable=ignorable,
            surface_op=surface_op,
            source_event_seqs=sources,
        )
        self._sink.write(event)
        self._fold(event)
        if self._observers:
            for observer in tuple(self._observers):
                observer(event)
        if self._hooks.has(SESSION_EVENT):
            self._hooks.emit(SESSION_EVENT, SessionEventPayload(self, event))
        return event

    def close_seed(self, fixes: Sequence[RepairEvent], *, inherited: bool = False) -> None:
        """Internal: append the repair of the seed's open turn (``fixes``, from
        ``plan_repair``), then mark where the seed ends (``session/end-seed``).

        The constructor does this unless it is given ``close_seed=False``: a resume that
        reconciles unknown tool outcomes first closes the seed itself.
        """
        for fix in fixes:
            self.append(
                fix.data, surface_op=fix.surface_op, source_event_seqs=fix.source_event_seqs
            )
        if self._events and _needs_seed_marker(self._events[-1], inherited):
            self.append(SessionEndSeed(inherited=inherited))

    def seal(self, reason: str) -> None:
        """Internal: refuse every later append (an abandoned activity must not write)."""
        self._sealed = reason

    def observe(self, observer: Observer) -> None:
        """Internal: call ``observer(event)`` for every later append until ``unobserve``.

        No disposer is handed back: an observer bound to an object that kept its disposer
        would form a cycle (object → disposer → observer → object) holding the session."""
        self._observers.append(observer)

    def unobserve(self, observer: Observer) -> None:
        """Internal: stop calling ``observer`` (equal bound methods match); absent is fine."""
        if observer in self._observers:
            self._observers.remove(observer)

    async def with_blob_data(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        """``messages`` with the bytes of every image and file block read back from the
        store (a resumed or forked log holds only their hashes): what a request needs.

        Raises:
            SessionCorruptError: a blob is missing or corrupt (names the seq of the event
                that references it).
        """
        try:
            return await with_blob_data(messages, self._read_blob)
        except ValueError as exc:  # the stored bytes are not what the block says
            raise SessionCorruptError(f"session {self.id!r}: a stored blob: {exc}") from None

    async def _read_blob(self, hash: str) -> StoredBlob:
        cached = self._blob_cache.get(hash)
        if cached is not None:
            self._blob_cache.move_to_end(hash)
            return cached
        try:
            blob = await self._sink.read_blob(hash)
        except (SessionPersistenceNotFoundError, SessionCorruptError) as exc:
            seq = blob_seq(self._events, hash)
            where = f"seq {seq}" if seq is not None else "an event"
            why = "it is missing" if isinstance(exc, SessionPersistenceNotFoundError) else exc
            raise SessionCorruptError(
                f"session {self.id!r}: {where} references blob {hash}: {why}"
            ) from None
        # Later requests of the session send the same blobs again: keep the recent ones.
        self._blob_cache[hash] = blob
        total = sum(b.size for b in self._blob_cache.values())
        while total > _BLOB_CACHE_BYTES and len(self._blob_cache) > 1:
            total -= self._blob_cache.popitem(last=False)[1].size
        return blob

    async def flush(self) -> None:
        """Barrier: every event appended so far is durable when this returns."""
        await self._sink.flush()

    async def fence(self) -> None:
        """Internal: the barrier before a side-effecting tool starts (``EventSink.fence``)."""
        await self._sink.fence()

    def lease_valid(self) -> bool:
        """Internal: whether a tool may start without a fence (``EventSink.lease_valid``)."""
        return self._sink.lease_valid()

    async def close(self) -> None:
        """Flush every event and release the persistence write handle."""
        await self._sink.close()

    def publish(self) -> None:
        """Commit the session to its store: buffered and later events become durable."""
        self._sink.set_header(self.header)
        self._sink.publish()

    async def discard(self) -> None:
        """Drop the write handle of an unpublished session, leaving no stored artifact."""
        await self._sink.discard()

    def _validate(
        self,
        type: str,
        data: Any,
        surface_op: SurfaceOp | None,
        sources: tuple[int, ...] | None,
        seq: int,
    ) -> None:
        if not isinstance(type, str) or not type:
            raise ValueError("event type must be a non-empty string")
        is_surface = type in SURFACE_TYPES
        if is_surface and surface_op is None:
            raise ValueError(f"{type} is a surface event and needs a surface_op")
        if not is_surface and (surface_op is not None or sources is not None):
            raise ValueError(f"{type} is log-only: surface_op/source_event_seqs are forbidden")
        if sources is not None and (
            len(set(sources)) != len(sources)
            or any(not isinstance(s, int) or s < 1 or s >= seq for s in sources)
        ):
            raise ValueError("source_event_seqs must be distinct earlier seqs")
        if isinstance(surface_op, Replace):
            try:
                start = self._surface.index(surface_op.start_seq)
                end = self._surface.index(surface_op.end_seq)
            except ValueError:
                raise ValueError("replace range is not on the current surface") from None
            if start > end:
                raise ValueError("replace range starts after it ends")
            shadowed = self._surface[start : end + 1]
            if sources is None or not set(shadowed) <= set(sources):
                raise ValueError("a replace must cite every node it shadows")
        elif surface_op is not None and surface_op != "append":
            raise ValueError(f"unknown surface_op {surface_op!r}")
        if type == "context/compacted" and not compaction_op_ok(data, surface_op):
            raise ValueError(
                "context/compacted takes a ContextCompacted payload and a Replace ending at "
                "its upto_seq"
            )
        if isinstance(data, dict | list) or type not in _TYPED:
            check_json(encode(data), f"payload of {type}")

    def _fold(self, event: SessionEvent) -> None:
        self._events.append(event)
        self._latest[event.type] = event
        op = event.surface_op
        if op == "append":
            self._surface.append(event.seq)
            message = self._projected[event.seq] = surface_message(event)
            if message is not None:
                self._derived_list.append(message)
                self._derived = None
            if event.type == "system/message":
                self._system_nodes.append(event.seq)
        elif isinstance(op, Replace):
            start = self._surface.index(op.start_seq)
            end = self._surface.index(op.end_seq)
            self._surface[start : end + 1] = [event.seq]
            self._projected[event.seq] = surface_message(event)
            projected = (self._projected[seq] for seq in self._surface)
            self._derived_list = [m for m in projected if m is not None]
            self._derived = None
            self._system_nodes = [
                seq for seq in self._surface if self._events[seq - 1].type == "system/message"
            ]
            self.surface_replaced += 1
        elif event.type == "turn/start":
            data = event.data
            self.last_turn = data.turn if isinstance(data, TurnStart) else int(data["turn"])


def _needs_seed_marker(last: SessionEvent, inherited: bool) -> bool:
    """A seed is marked once: not again when it already ends with ``session/end-seed``.

    A fork child (``inherited``) needs an inherited marker at its cut, so a parent's plain
    marker at the cut is followed by one with ``inherited=True``.
    """
    if last.type != "session/end-seed":
        return True
    return inherited and not (isinstance(last.data, SessionEndSeed) and last.data.inherited)


_BLOB_CACHE_BYTES = 32 * 1024 * 1024
_TYPED = KNOWN_TYPES  # the types with a typed payload record (one list: the codec's)
_TYPED_LOG_ONLY = _TYPED - SURFACE_TYPES
