"""The commands an AG-UI run adds to a session's queue, applied by the session's owner in
``cmd_seq`` order like every other command (``_agui_input`` plans them): the client tools of
the run, a client tool's result, the client's state document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jsonpatch

from ..agent import ClientTool

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["AGUI_COMMANDS", "apply_command"]

AGUI_COMMANDS = ("client_tools", "client_result", "state")
"""Command kinds an AG-UI run adds to the session's queue."""


def apply_command(agent: Agent, kind: str, body: Mapping[str, Any]) -> None:
    """Apply one AG-UI command to the live agent (by the session's owner, in queue order).

    Raises:
        ValueError: a body the API never writes, a refused offer, an answer for a call
            that no longer waits, a state that does not apply; nothing changed.
    """
    if kind == "client_tools":
        tools = body.get("tools")
        if not isinstance(tools, list):
            raise ValueError("client_tools needs a list of tools")
        agent.client_calls.offer(
            [ClientTool(str(t["name"]), str(t["description"]), t["parameters"]) for t in tools]
        )
    elif kind == "client_result":
        call_id, content = body.get("call_id"), body.get("content")
        if not isinstance(call_id, str) or not isinstance(content, str):
            raise ValueError("client_result needs call_id and content strings")
        agent.client_calls.answer(
            call_id,
            content,
            is_error=bool(body.get("is_error")),
            name="ClientToolError" if body.get("is_error") else None,
        )
    elif kind == "state":
        document = body.get("state")
        if not isinstance(document, dict):
            raise ValueError("state needs a JSON object")
        patch = jsonpatch.make_patch(dict(agent.state), document).patch
        if patch:
            agent.update_state(patch)
    else:
        raise ValueError(f"unknown command kind {kind!r}")
