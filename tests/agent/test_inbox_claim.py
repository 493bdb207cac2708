"""§7.4 claim, remove and discard: claim order and hooks, host removals, what a
cancellation drops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from steerloop import (
    CancelCause,
)
from steerloop.testing import (
    error_response,
    text_response,
)

from ..conftest import Harness, compact, label, settle, u, within
from .inbox_helpers import (
    CANONICAL_1,
    record,
    spliced,
)

# --- claim, remove, discard -----------------------------------------------------------


async def test_claim_order_and_hooks(h: Harness) -> None:
    """C7.4-21: a first-step claim takes all next-step, then the first next-turn message."""
    agent = await h.agent(text_response("r1"), text_response("r2"))
    trace = record(h.rt, "agent/inbox/claimed", "agent/inbox/discarded")
    agent.inject(u("c"))
    agent.followup(u("u1"))
    agent.followup(u("u2"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "user", "drop"]) == [
        "T+1", "claim(ns,c)", "claim(nt,u1)", "user(c)", "user(u1)", "T-1:completed",
        "T+2", "claim(nt,u2)", "user(u2)", "T-2:completed",
    ]  # fmt: skip
    claims = [d for d in spliced(agent) if d.removed_count]
    assert [(d.target, d.start, d.removed_count, d.outcome) for d in claims] == [
        ("next-step", 0, 1, None),
        ("next-turn", 0, 1, None),
        ("next-turn", 0, 1, None),
    ]
    assert trace == [("claimed", ("c", 1)), ("claimed", ("u1", 1)), ("claimed", ("u2", 2))]


async def test_claim_takes_all_next_step_in_one_splice(h: Harness) -> None:
    """C7.4-21: every next-step message is claimed, in queue order."""
    agent = await h.agent(text_response("r1"))
    agent.inject(u("c1"))
    agent.inject(u("c2"))
    agent.steer(u("s"))
    await settle(agent)
    assert compact(agent.session, only=["claim", "user"]) == [
        "claim(ns,c1)", "claim(ns,c2)", "claim(ns,s)", "user(c1)", "user(c2)", "user(s)",
    ]  # fmt: skip


async def test_discard_only_for_host_removals(h: Harness) -> None:
    """C7.4-22: claims fire no discarded; remove/clear/splice/replace/cancel do, once each."""
    agent = await h.agent(text_response("r1"))
    trace = record(h.rt, "agent/inbox/discarded")
    agent.followup(u("u1"))
    await settle(agent)
    assert trace == []
    inbox = agent.inbox
    for name in "abcdefgh":
        inbox.append("next-turn" if name in "abcdef" else "next-step", u(name))
    before = len(spliced(agent))
    assert inbox.remove(inbox.next_turn[0].id) is True  # a
    inbox.splice("next-turn", 0, 2)  # b, c
    inbox.replace(inbox.next_turn[0].id, u("d2"))  # d
    inbox.clear()  # g, h then d2, e, f
    assert trace == [("discarded", x) for x in ["a", "b", "c", "d", "g", "h", "d2", "e", "f"]]
    assert all(d.outcome == "canceled" for d in spliced(agent)[before:] if d.removed_count)
    assert [d.removed_count for d in spliced(agent)[before:]] == [1, 2, 1, 2, 3]
    inbox.append("next-step", u("i"))
    agent.cancel(CancelCause.user())
    assert trace[-1] == ("discarded", "i")
    assert spliced(agent)[-1].outcome == "canceled"


@pytest.mark.parametrize(
    ("step", "turn", "expected"),
    [
        (True, True, ["drop(ns,s1)", "drop(ns,s2)", "drop(nt,t1)"]),
        (True, False, ["drop(ns,s1)", "drop(ns,s2)"]),
        (False, True, ["drop(nt,t1)"]),
        (False, False, []),
    ],
)
async def test_clear_order(h: Harness, step: bool, turn: bool, expected: list[str]) -> None:
    """C7.4-23: clear empties next-step first, then next-turn; one event per non-empty queue."""
    agent = await h.agent()
    if turn:
        agent.inbox.append("next-turn", u("t1"))
    if step:
        agent.inbox.append("next-step", u("s1"))
        agent.inbox.append("next-step", u("s2"))
    before = len(agent.session.events)
    agent.inbox.clear()
    assert compact(agent.session)[before:] == expected
    assert len(agent.session.events) - before == int(step) + int(turn)
    assert not agent.inbox.has_pending


async def _blocked_pre_step(h: Harness) -> tuple[asyncio.Event, asyncio.Event]:
    entered, release = asyncio.Event(), asyncio.Event()

    async def pre_step(payload: Any, next_: Callable[[], Awaitable[Any]]) -> Any:
        entered.set()
        await release.wait()
        return await next_()

    h.rt.hooks.on("agent/pre-step", pre_step)
    return entered, release


async def test_remove_of_claimed_message_is_false(h: Harness) -> None:
    """C7.4-24: remove() of a claimed, not yet admitted message returns False; it is admitted."""
    agent = await h.agent(text_response("r1"))
    entered, release = await _blocked_pre_step(h)
    m = u("u1")
    agent.followup(m)
    await within(entered.wait())
    count = len(agent.session.events)
    assert agent.inbox.remove(m.id) is False
    assert agent.inbox.replace(m.id, u("z")) is False
    assert len(agent.session.events) == count
    release.set()
    await settle(agent)
    assert compact(agent.session) == CANONICAL_1


async def test_claimed_message_dropped_only_by_cancellation(h: Harness) -> None:
    """C7.4-24: a claimed message is kept out of the surface only by cancel (or pre-step)."""
    agent = await h.agent(text_response("never"))
    entered, release = await _blocked_pre_step(h)
    m = u("u1")
    agent.followup(m)
    await within(entered.wait())
    assert agent.inbox.remove(m.id) is False
    agent.cancel(CancelCause.user())
    release.set()
    await settle(agent)
    assert compact(agent.session) == ["ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:aborted"]
    assert agent.session.derive_messages() == []


async def test_error_turn_does_not_requeue(h: Harness) -> None:
    """C7.4-21, C7.4-24: a claim is final; a failed turn does not re-queue its input."""
    agent = await h.agent(error_response("E", "boom"))
    agent.followup(u("u1"))
    await settle(agent)
    assert compact(agent.session, only=["T", "claim", "ins"]) == [
        "ins(nt,u1)", "T+1", "claim(nt,u1)", "T-1:error",
    ]  # fmt: skip
    assert not agent.inbox.has_pending


async def test_session_event_listener_reads_pre_splice_state(h: Harness) -> None:
    """C7.4-2, C7.4-21: a session/event listener of a splice sees the inbox before it."""
    agent = await h.agent(text_response("r1"))
    seen: list[tuple[str, list[str], list[str]]] = []

    def listener(payload: Any) -> None:
        if payload.event.type == "agent/inbox/spliced":
            assert payload.session is agent.session
            inbox = agent.inbox
            seen.append(
                (
                    compact(agent.session)[-1],
                    [label(m) for m in inbox.next_turn],
                    [label(m) for m in inbox.next_step],
                )
            )

    h.rt.hooks.on("session/event", listener)
    agent.inject(u("c"))
    agent.followup(u("u1"))
    await settle(agent)
    assert seen == [
        ("ins(ns,c)", [], []),
        ("ins(nt,u1)", [], ["c"]),
        ("claim(ns,c)", ["u1"], ["c"]),
        ("claim(nt,u1)", ["u1"], []),
    ]
