"""Property tests of the inbox: splice normalisation (C7.4-16/17) and the log fold (C7.4-20)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steerloop import AgentOptions, Runtime, Session, UserMessage, user_message
from steerloop.agent import Agent
from steerloop.agent._inbox import Inbox, InboxTarget, fold_inbox
from steerloop.session._events import InboxSpliced

TARGETS: tuple[InboxTarget, ...] = ("next-turn", "next-step")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

numbers = st.one_of(
    st.integers(min_value=-8, max_value=8),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10, max_value=10),
    st.sampled_from([math.inf, -math.inf, math.nan, -0.0, 0.5, -0.5]),
)


def reference(n: int, start: float, delete_count: float) -> tuple[int, int]:
    """The documented normalisation of C7.4-16, written independently of the source."""
    if isinstance(start, float) and (math.isnan(start) or start == -math.inf):
        s = 0
    elif isinstance(start, float) and start == math.inf:
        s = n
    else:
        s = math.trunc(start)
        s = max(n + s, 0) if s < 0 else min(s, n)
    if isinstance(delete_count, float) and (math.isnan(delete_count) or delete_count == -math.inf):
        d = 0
    elif isinstance(delete_count, float) and delete_count == math.inf:
        d = n - s
    else:
        d = min(max(math.trunc(delete_count), 0), n - s)
    return s, d


class _Owner:
    """Stands for the agent the inbox refers back to (weakly: kept alive here)."""


OWNER = _Owner()


def new_inbox() -> tuple[Session, Inbox]:
    rt = Runtime()
    session = Session._create("prop", hooks=rt.hooks)
    return session, Inbox._create(session, rt.hooks, OWNER)


def labelled(prefix: str, count: int) -> list[UserMessage]:
    return [user_message(f"{prefix}{i}") for i in range(count)]


@SETTINGS
@given(
    turn_len=st.integers(min_value=0, max_value=6),
    step_len=st.integers(min_value=0, max_value=6),
    target=st.sampled_from(TARGETS),
    start=numbers,
    delete_count=numbers,
    inserted=st.integers(min_value=0, max_value=3),
)
def test_splice_matches_list_semantics(
    turn_len: int,
    step_len: int,
    target: InboxTarget,
    start: float,
    delete_count: float,
    inserted: int,
) -> None:
    """C7.4-16, C7.4-17: splice equals the documented normalisation applied to a list."""
    session, inbox = new_inbox()
    for m in labelled("t", turn_len):
        inbox.append("next-turn", m)
    for m in labelled("s", step_len):
        inbox.append("next-step", m)
    other: InboxTarget = "next-step" if target == "next-turn" else "next-turn"
    model = list(inbox.queue(target))
    untouched = list(inbox.queue(other))
    items = labelled("x", inserted)
    events_before = len(session.events)

    removed = inbox.splice(target, start, delete_count, items)

    s, d = reference(len(model), start, delete_count)
    if isinstance(start, int):
        # For integers this is exactly Python's own slice-start normalisation.
        assert s == slice(start, None).indices(len(model))[0]
    if isinstance(delete_count, int) and not isinstance(start, float):
        assert model[s : s + d] == model[s : s + max(delete_count, 0)]
    expected_removed = model[s : s + d]
    model[s : s + d] = items
    assert removed == expected_removed
    assert list(inbox.queue(target)) == model
    assert list(inbox.queue(other)) == untouched
    new_events = list(session.events)[events_before:]
    if d == 0 and not items:
        assert new_events == []
    else:
        assert len(new_events) == 1
        data = new_events[0].data
        assert isinstance(data, InboxSpliced)
        assert (data.target, data.start, data.removed_count) == (target, s, d)
        assert data.inserted == tuple(items)
        assert type(data.start) is int and type(data.removed_count) is int
        assert data.outcome == ("canceled" if d else None)


def live_queues(inbox: Inbox) -> dict[str, list[UserMessage]]:
    return {"next-turn": list(inbox.next_turn), "next-step": list(inbox.next_step)}


OPS = (
    "append",
    "prepend",
    "splice",
    "replace",
    "remove",
    "clear",
    "inject",
    "send",
    "claim",
    "duplicate",
)


@SETTINGS
@given(data=st.data(), count=st.integers(min_value=1, max_value=25))
def test_fold_equals_live_inbox(data: st.DataObject, count: int) -> None:
    """C7.4-20: fold_inbox(session.events) equals the live inbox after any operations."""
    rt = Runtime()
    session = Session._create("prop", hooks=rt.hooks)
    agent = Agent._create(rt.loop_services, session, AgentOptions(provider="mock", model="m"))
    inbox = agent.inbox
    turn = 0
    serial = 0

    def fresh() -> UserMessage:
        nonlocal serial
        serial += 1
        return user_message(f"m{serial}")

    def pending() -> list[UserMessage]:
        return [*inbox.next_turn, *inbox.next_step]

    for _ in range(count):
        op = data.draw(st.sampled_from(OPS), label="op")
        target = data.draw(st.sampled_from(TARGETS), label="target")
        if op == "append":
            inbox.append(target, fresh())
        elif op == "prepend":
            inbox.prepend(target, fresh())
        elif op == "splice":
            start = data.draw(numbers, label="start")
            delete_count = data.draw(numbers, label="delete_count")
            k = data.draw(st.integers(min_value=0, max_value=3), label="inserted")
            inbox.splice(target, start, delete_count, [fresh() for _ in range(k)])
        elif op in ("replace", "remove"):
            ids = [m.id for m in pending()] + ["not-pending"]
            message_id = data.draw(st.sampled_from(ids), label="id")
            if op == "replace":
                reuse = data.draw(st.booleans(), label="same id")
                new = UserMessage(id=message_id, content=fresh().content) if reuse else fresh()
                assert inbox.replace(message_id, new) is (message_id != "not-pending")
            else:
                assert inbox.remove(message_id) is (message_id != "not-pending")
        elif op == "clear":
            inbox.clear()
        elif op == "inject":
            agent.inject(fresh())
        elif op == "send":
            agent.send(fresh(), target, False)
        elif op == "claim":
            turn += 1
            before = live_queues(inbox)
            claimed = inbox.claim(target, turn)
            expected = before["next-step"] + (
                before["next-turn"][:1] if target == "next-turn" else []
            )
            assert claimed == expected
        else:
            candidates = pending()
            if not candidates:
                continue
            twin = data.draw(st.sampled_from(candidates), label="twin")
            size = len(session.events)
            state = live_queues(inbox)
            with pytest.raises(ValueError):
                agent.send(twin, target, False)
            assert len(session.events) == size
            assert live_queues(inbox) == state
        assert fold_inbox(session.events) == live_queues(inbox)
    ids = [m.id for m in pending()]
    assert len(ids) == len(set(ids))
