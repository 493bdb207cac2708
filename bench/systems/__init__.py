"""The systems the scenarios compare; each module has ``s1``, ``s2`` and ``s3``.

``s1(steps)`` → seconds per step (one ``echo`` call per step, then a final text step);
``s2(calls, delay)`` → wall seconds of one step with ``calls`` parallel sleeping tools;
``s3(agents, steps)`` → steps per second of ``agents`` concurrent S1-shaped runs.
A step is one model request: ``steps`` tool steps plus the final answer.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["PEERS", "load"]

# module name → the distribution a user installs (the ``bench`` extra)
PEERS = {
    "pydantic_ai_system": ("pydantic-ai", "pydantic-ai-slim"),
    "openai_agents_system": ("openai-agents", "openai-agents"),
    "langgraph_system": ("langgraph", "langgraph"),
}


def load(module: str) -> tuple[ModuleType | None, str]:
    """Import a system module; ``(None, note)`` when its package is not installed."""
    try:
        return importlib.import_module(f"systems.{module}"), ""
    except ImportError as exc:
        return None, f"skipped: {exc.name or exc} not installed (pip install -e '.[bench]')"
