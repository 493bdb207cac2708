"""§7.4 splices: normalisation and validation, append/prepend/replace, and the fold of
agent/inbox/spliced events back into an inbox."""

from __future__ import annotations

import math
from typing import Any

import pytest

from steerloop import (
    SessionCorruptError,
    SessionEvent,
    UserMessage,
)
from steerloop.agent._inbox import fold_inbox
from steerloop.session._events import InboxSpliced
from steerloop.testing import (
    text_response,
)

from ..conftest import Harness, compact, label, settle, u
from .inbox_helpers import (
    record,
    spliced,
)

# --- splice normalisation and validation -----------------------------------------------


async def _filled(h: Harness, n: int = 5) -> tuple[Any, list[UserMessage]]:
    agent = await h.agent()
    messages = [u(chr(ord("a") + i)) for i in range(n)]
    for m in messages:
        agent.inbox.append("next-turn", m)
    return agent, messages


@pytest.mark.parametrize(
    ("start", "delete_count", "norm_start", "norm_removed"),
    [
        (1, 2, 1, 2),
        (1.9, 2.9, 1, 2),
        (-1, 1, 4, 1),
        (-1.5, 5, 4, 1),
        (-2, math.inf, 3, 2),
        (-7, 1, 0, 1),
        (-(10**30), 2, 0, 2),
        (7, 1, 5, 0),
        (10**30, 3, 5, 0),
        (math.inf, 2, 5, 0),
        (-math.inf, 2, 0, 2),
        (math.nan, 2, 0, 2),
        (-0.5, 1, 0, 1),
        (2, math.inf, 2, 3),
        (2, math.nan, 2, 0),
        (2, -3, 2, 0),
        (2, -math.inf, 2, 0),
        (2, 10**30, 2, 3),
        (0, 5.99, 0, 5),
        (3, 1e300, 3, 2),
    ],
)
async def test_splice_normalisation(
    h: Harness, start: Any, delete_count: Any, norm_start: int, norm_removed: int
) -> None:
    """C7.4-16: start/delete_count follow the documented normalisation; the event logs it."""
    agent, messages = await _filled(h)
    x = u("x")
    removed = agent.inbox.splice("next-turn", start, delete_count, [x])
    assert removed == messages[norm_start : norm_start + norm_removed]
    event = spliced(agent)[-1]
    assert (event.start, event.removed_count, event.inserted) == (norm_start, norm_removed, (x,))
    expected = list(messages)
    expected[norm_start : norm_start + norm_removed] = [x]
    assert list(agent.inbox.next_turn) == expected
    assert event.outcome == ("canceled" if norm_removed else None)


@pytest.mark.parametrize("bad", ["1", None, [1], object()])
async def test_splice_rejects_non_numbers(h: Harness, bad: Any) -> None:
    """C7.4-16: start/delete_count must be numbers; anything else raises ValueError."""
    agent, messages = await _filled(h, 2)
    before = len(agent.session.events)
    with pytest.raises(ValueError):
        agent.inbox.splice("next-turn", bad, 1)
    with pytest.raises(ValueError):
        agent.inbox.splice("next-turn", 0, bad)
    assert len(agent.session.events) == before
    assert list(agent.inbox.next_turn) == messages


async def test_splice_rejects_unknown_target(h: Harness) -> None:
    """C7.4-16: an unknown target raises ValueError and writes nothing."""
    agent = await h.agent()
    with pytest.raises(ValueError):
        agent.inbox.splice("later", 0, 0, [u("x")])
    assert list(agent.session.events) == []


async def test_splice_returns_removed_and_noop_is_silent(h: Harness) -> None:
    """C7.4-17: splice returns the removed messages; a no-op writes and fires nothing."""
    agent, messages = await _filled(h, 3)
    trace = record(h.rt, "agent/inbox/inserted", "agent/inbox/discarded")
    events: list[Any] = []
    h.rt.hooks.on("session/event", lambda p: events.append(p.event))
    assert agent.inbox.splice("next-turn", 0, 0) == []
    assert agent.inbox.splice("next-turn", 3, 2, []) == []
    assert agent.inbox.splice("next-turn", math.inf, math.inf) == []
    assert agent.inbox.splice("next-step", 0, math.inf) == []
    assert agent.inbox.splice("next-turn", 1, -1, ()) == []
    assert events == [] and trace == []
    assert len(agent.session.events) == 3
    assert agent.inbox.splice("next-turn", 1, math.inf) == messages[1:]
    assert trace == [("discarded", "b"), ("discarded", "c")]
    assert len(events) == 1


@pytest.mark.parametrize("where", ["same-queue", "other-queue", "twice-in-items"])
async def test_duplicate_pending_id_rejected(h: Harness, where: str) -> None:
    """C7.4-18: inserting an id already pending in either queue raises ValueError."""
    agent = await h.agent()
    a, b = u("a"), u("b")
    agent.inbox.append("next-turn", a)
    agent.inbox.append("next-step", b)
    before = list(agent.session.events)
    trace = record(h.rt, "agent/inbox/inserted")
    with pytest.raises(ValueError):
        if where == "same-queue":
            agent.inbox.splice("next-turn", 1, 0, [UserMessage(id=a.id, content=a.content)])
        elif where == "other-queue":
            agent.inbox.append("next-turn", b)
        else:
            c = u("c")
            agent.inbox.splice("next-step", 0, 0, [c, c])
    assert list(agent.session.events) == before
    assert agent.inbox.next_turn == (a,) and agent.inbox.next_step == (b,)
    assert trace == []


async def test_duplicate_send_rejected(h: Harness) -> None:
    """C7.4-18: sending a message whose id is pending raises ValueError and wakes nothing."""
    agent = await h.agent(text_response("never"))
    m = u("m")
    agent.inject(m)
    with pytest.raises(ValueError):
        agent.followup(m)
    z = u("z")
    agent.send(z, "next-turn", False)
    with pytest.raises(ValueError):
        agent.inbox.replace(z.id, m)
    assert compact(agent.session) == ["ins(ns,m)", "ins(nt,z)"]
    assert agent.status == "idle"


async def test_append_prepend_are_splices_at_ends(h: Harness) -> None:
    """C7.4-19: append/prepend are splices at n and 0."""
    agent = await h.agent()
    a, b, c = u("a"), u("b"), u("c")
    agent.inbox.append("next-step", a)
    agent.inbox.append("next-step", b)
    agent.inbox.prepend("next-step", c)
    assert [
        (d.target, d.start, d.removed_count, d.inserted, d.outcome) for d in spliced(agent)
    ] == [
        ("next-step", 0, 0, (a,), None),
        ("next-step", 1, 0, (b,), None),
        ("next-step", 0, 0, (c,), None),
    ]
    assert agent.inbox.next_step == (c, a, b)


async def test_replace_rewrites_in_place(h: Harness) -> None:
    """C7.4-19: replace is one canceled splice with removed_count=1; False when not pending."""
    agent = await h.agent()
    a, b, c = u("a"), u("b"), u("c")
    agent.inbox.append("next-turn", a)
    agent.inbox.append("next-turn", b)
    trace = record(h.rt, "agent/inbox/inserted", "agent/inbox/discarded")
    b2 = u("b2")
    assert agent.inbox.replace(b.id, b2) is True
    event = spliced(agent)[-1]
    assert (event.target, event.start, event.removed_count, event.inserted, event.outcome) == (
        "next-turn", 1, 1, (b2,), "canceled",
    )  # fmt: skip
    assert agent.inbox.next_turn == (a, b2)
    assert trace == [("discarded", "b"), ("inserted", "b2")]
    count = len(agent.session.events)
    assert agent.inbox.replace(b.id, c) is False
    assert agent.inbox.replace("nope", c) is False
    assert len(agent.session.events) == count
    same_id = UserMessage(id=a.id, content=c.content)
    assert agent.inbox.replace(a.id, same_id) is True
    assert agent.inbox.next_turn == (same_id, b2)


def _ev(seq: int, data: InboxSpliced) -> SessionEvent:
    return SessionEvent(seq=seq, time=0, type="agent/inbox/spliced", data=data)


@pytest.mark.parametrize(
    "bad",
    [
        InboxSpliced(target="next-turn", start=2, removed_count=0, inserted=()),
        InboxSpliced(target="next-turn", start=1, removed_count=1),
        InboxSpliced(target="next-turn", start=0, removed_count=2),
        InboxSpliced(target="next-turn", start=-1, removed_count=1),
        InboxSpliced(target="next-turn", start=0, removed_count=-1, inserted=()),
        InboxSpliced(target="next-step", start=0, removed_count=1),
        InboxSpliced(target="next-turn", start=0.5, removed_count=0),  # type: ignore[arg-type]
        InboxSpliced(target="next-turn", start=0, removed_count=1.0),  # type: ignore[arg-type]
        InboxSpliced(target="nowhere", start=0),  # type: ignore[arg-type]
    ],
)
def test_fold_rejects_impossible_range(bad: InboxSpliced) -> None:
    """C7.4-20: a splice outside the queue makes fold_inbox raise naming the seq."""
    a = u("a")
    events = [_ev(1, InboxSpliced(target="next-turn", start=0, inserted=(a,))), _ev(2, bad)]
    with pytest.raises(SessionCorruptError, match=r"seq 2\b"):
        fold_inbox(events)


@pytest.mark.parametrize("where", ["same-queue", "other-queue", "within-items"])
def test_fold_rejects_duplicate_pending_id(where: str) -> None:
    """C7.4-20: a splice making a pending id appear twice makes fold_inbox raise."""
    a = u("a")
    twin = UserMessage(id=a.id, content=u("twin").content)
    first = _ev(1, InboxSpliced(target="next-turn", start=0, inserted=(a,)))
    if where == "same-queue":
        bad = InboxSpliced(target="next-turn", start=1, inserted=(twin,))
    elif where == "other-queue":
        bad = InboxSpliced(target="next-step", start=0, inserted=(twin,))
    else:
        b = u("b")
        bad = InboxSpliced(target="next-step", start=0, inserted=(b, b))
    with pytest.raises(SessionCorruptError, match=r"seq 5\b"):
        fold_inbox([first, _ev(5, bad)])


def test_fold_accepts_possible_log() -> None:
    """C7.4-20: a valid log folds to its queues (claims, drops, in-place rewrites)."""
    a, b, c = u("a"), u("b"), u("c")
    a2 = UserMessage(id=a.id, content=u("a2").content)
    events = [
        _ev(1, InboxSpliced(target="next-turn", start=0, inserted=(a, b))),
        _ev(2, InboxSpliced(target="next-step", start=0, inserted=(c,))),
        _ev(3, InboxSpliced(target="next-turn", start=0, removed_count=1, inserted=(a2,))),
        _ev(4, InboxSpliced(target="next-step", start=0, removed_count=1)),
        _ev(
            5,
            InboxSpliced(target="next-turn", start=1, removed_count=1, outcome="canceled"),
        ),
    ]
    queues = fold_inbox(events)
    assert queues == {"next-turn": [a2], "next-step": []}


async def test_fold_of_live_log_equals_inbox(h: Harness) -> None:
    """C7.4-20: the fold of a live log (sends, claims, drops) equals the live inbox."""
    agent = await h.agent(text_response("r1"))
    agent.inject(u("c"))
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    agent.inbox.remove(agent.inbox.next_turn[0].id)
    await settle(agent)
    agent.send(u("q"), "next-turn", False)
    queues = fold_inbox(agent.session.events)
    assert queues == {"next-turn": list(agent.inbox.next_turn), "next-step": []}
    assert [label(m) for m in queues["next-turn"]] == ["q"]
