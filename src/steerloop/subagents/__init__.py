"""Sub-agents: delegate a task to an in-process child agent (a plugin).

```python
from steerloop.subagents import install_subagents, spawn

install_subagents(rt, max_depth=2)              # the model gets a ``spawn_agent`` tool
result = await spawn(rt, parent, "summarise README.md")   # or call it from host code
result.answer, result.session_id, result.end.kind
```

A child is created with ``parent=`` (``rt.agents.children(parent)``), runs its task as an
ordinary turn in its own durable session, and its header links it to the parent's
(``parent_session``, ``delegation_depth``). Cancelling the caller (the tool's
``exec.signal``) cancels the child with ``CancelCause.parent()``; disposing the parent
disposes live children first (the factory's teardown). To continue a stored child after a
restart, resume it with its parent: ``rt.agents.resume(resume_session_id=..., parent=p)``.
"""

from __future__ import annotations

from ._spawn import (
    DEFAULT_MAX_DEPTH,
    DELEGATION_DEPTH_EXCEEDED,
    SUBAGENT_BLOCKED,
    SUBAGENT_FAILED,
    DelegationDepthError,
    SpawnArgs,
    SpawnResult,
    delegation_depth,
    install_subagents,
    spawn,
    spawn_agent_tool,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DELEGATION_DEPTH_EXCEEDED",
    "SUBAGENT_BLOCKED",
    "SUBAGENT_FAILED",
    "DelegationDepthError",
    "SpawnArgs",
    "SpawnResult",
    "delegation_depth",
    "install_subagents",
    "spawn",
    "spawn_agent_tool",
]
