"""``glog(session)``: ``compact()`` with each ``goal/change`` rendered as
``goal:<action>`` (plus ``<rounds>/<cap>`` for a round, ``<code>`` for a block)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..conftest import render


def goal_item(data: Any) -> str:
    goal = data["goal"]
    action = data["action"]
    if action == "round":
        return f"goal:round {goal['rounds_started']}/{goal['round_cap']}"
    if action == "block":
        return f"goal:block {goal['blocked']['code']}"
    return f"goal:{action}"


def glog(session: Any, *, only: Sequence[str] | None = None) -> list[str]:
    queues: dict[str, list[Any]] = {"next-turn": [], "next-step": []}
    out: list[str] = []
    for event in session.events:
        if event.type == "goal/change":
            out.append(goal_item(event.data))
        else:
            out += render(event, queues)
    if only is not None:
        out = [item for item in out if item.startswith(tuple(only))]
    return out
