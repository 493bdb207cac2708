"""Shared by the tool scheduler tests (test_scheduler_*.py): the calls and results of a log."""

from __future__ import annotations

from typing import Any

from ..conftest import compact

CALLS_AND_RESULTS = ("call(", "result(")


def tool_log(agent: Any) -> list[str]:
    return compact(agent.session, only=CALLS_AND_RESULTS)
