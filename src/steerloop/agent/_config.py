"""Agents declared in runtime configuration: validated as a whole before any starts (C7.2-4).

An entry is a mapping with exactly one of ``session_id`` (create) or ``resume_session_id``
(resume), plus ``agent_options`` and optionally ``setup`` and ``meta``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._options import AgentOptions

if TYPE_CHECKING:
    from ._factory import AgentHandle, AgentRegistry

__all__ = ["start_configured_agents", "validate_agent_entries"]

_KEYS = frozenset({"session_id", "resume_session_id", "agent_options", "setup", "meta"})


def validate_agent_entries(entries: Sequence[Mapping[str, Any]]) -> None:
    """Check every configured agent entry; nothing is created.

    Raises:
        ValueError: an entry names both ids or neither, an empty id, an unknown key or
            invalid options, or two entries name the same exact id.
    """
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise ValueError("agent entries must be a sequence of mappings")
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"agent entry {i} must be a mapping")
        unknown = set(entry) - _KEYS
        if unknown:
            raise ValueError(f"agent entry {i} has unknown keys {sorted(unknown)}")
        has_create = "session_id" in entry
        has_resume = "resume_session_id" in entry
        if has_create and has_resume:
            raise ValueError(f"agent entry {i} names both session_id and resume_session_id")
        if not has_create and not has_resume:
            raise ValueError(f"agent entry {i} needs one of session_id or resume_session_id")
        key = "session_id" if has_create else "resume_session_id"
        session_id = entry[key]
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"agent entry {i}: {key} must not be empty")
        if session_id in seen:
            raise ValueError(
                f"agent entries {seen[session_id]} and {i} name session {session_id!r} twice"
            )
        seen[session_id] = i
        options = entry.get("agent_options")
        if not isinstance(options, AgentOptions):
            raise ValueError(f"agent entry {i}: agent_options must be an AgentOptions")
        options.validate()
        setup = entry.get("setup")
        if setup is not None and not callable(setup):
            raise ValueError(f"agent entry {i}: setup must be callable")
        meta = entry.get("meta")
        if meta is not None and not isinstance(meta, Mapping):
            raise ValueError(f"agent entry {i}: meta must be a mapping")


async def start_configured_agents(
    agents: AgentRegistry, entries: Sequence[Mapping[str, Any]]
) -> list[AgentHandle]:
    """Validate all entries, then create or resume each in order.

    If one fails to start, the agents already started are disposed and the error propagates.

    Raises:
        ValueError: see ``validate_agent_entries`` (raised before any agent starts).
    """
    validate_agent_entries(entries)
    handles: list[AgentHandle] = []
    try:
        for entry in entries:
            common: dict[str, Any] = {
                "agent_options": entry["agent_options"],
                "setup": entry.get("setup"),
                "meta": dict(entry["meta"]) if entry.get("meta") is not None else None,
            }
            if "session_id" in entry:
                handle = await agents.create(session_id=entry["session_id"], **common)
            else:
                handle = await agents.resume(resume_session_id=entry["resume_session_id"], **common)
            handles.append(handle)
    except BaseException as exc:
        for started in reversed(handles):
            try:
                await started.dispose()
            except Exception as error:
                exc.add_note(f"disposing configured agent {started.agent.id!r} failed: {error!r}")
        raise
    return handles
