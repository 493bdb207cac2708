"""Canonical turns through the public API (a first check that the loop hangs together)."""

from __future__ import annotations

from steerloop import user_message
from steerloop.testing import text_response

from ..conftest import Harness, compact, settle


async def test_canonical_text_turn(h: Harness) -> None:
    """C7.5-1: the canonical text-only turn of an idle followup."""
    agent = await h.agent(text_response("hello"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "S+1.1",
        "sys",
        "user(u1)",
        "hdr(initial)",
        "ctx",
        "msg",
        "S-1.1",
        "T-1:completed",
    ]
