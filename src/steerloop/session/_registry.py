"""``rt.sessions``: the live sessions of one runtime, and the store behind them."""

from __future__ import annotations

from .._ids import Clock, default_clock
from ._session import Session
from ._store import SessionStore

__all__ = ["SessionRegistry"]


class SessionRegistry:
    """``rt.sessions``: live sessions, and the store behind them (``persistence``)."""

    def __init__(
        self, persistence: SessionStore | None = None, *, clock: Clock = default_clock
    ) -> None:
        self._live: dict[str, Session] = {}
        self.persistence = persistence
        self._clock = clock

    def get(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    def list(self) -> tuple[Session, ...]:
        return tuple(self._live.values())

    async def fork(self, session_id: str, at_seq: int, new_session_id: str) -> Session:
        """Store a new session seeded with ``session_id``'s events up to ``at_seq``.

        The child gets the parent's prefix verbatim, restore repair for an unbalanced tail
        (C7.2-9), then ``session/end-seed{inherited: true}`` at the cut (C7.10-9). The
        parent's log is never modified. The parent may be live (its in-memory log is used)
        or only stored. Returns a detached snapshot of the stored child; drive it with
        ``rt.agents.resume(resume_session_id=new_session_id, ...)``.

        Raises:
            RuntimeError: no store is configured, or ``new_session_id`` is live.
            ValueError: ``at_seq`` is not a seq of the parent, or a bad id.
            SessionPersistenceNotFoundError: the parent is neither live nor stored.
            SessionConflictError: ``new_session_id`` is already stored or being written.
        """
        store = self.persistence
        if store is None:
            raise RuntimeError("fork() needs a store: open the runtime with store=... ")
        if not isinstance(new_session_id, str) or not new_session_id:
            raise ValueError("new_session_id must be a non-empty string")
        if new_session_id in self._live:
            raise RuntimeError(f"session {new_session_id!r} is live in this runtime")
        parent = self._live.get(session_id)
        events = tuple(parent.events) if parent is not None else await store.load(session_id)
        if isinstance(at_seq, bool) or not isinstance(at_seq, int):
            raise ValueError(f"at_seq must be an integer, not {at_seq!r}")
        if not 1 <= at_seq <= len(events):
            raise ValueError(f"at_seq {at_seq} is outside {session_id!r} (1..{len(events)})")
        await store.check_absent(new_session_id)
        prefix = events[:at_seq]
        writer = await store.open_writer(new_session_id)
        try:
            for event in prefix:
                writer.write(event)
            child = Session._create(
                new_session_id,
                clock=self._clock,
                seed=prefix,
                sink=writer,
                header={"parent_session": session_id, "is_seeded": True},
                inherited_seed=True,
            )
            child.publish()
        except BaseException:
            await writer.discard()
            raise
        await writer.close()
        return child

    def _add(self, session: Session) -> None:
        self._live[session.id] = session

    def _remove(self, session: Session) -> None:
        if self._live.get(session.id) is session:
            del self._live[session.id]
