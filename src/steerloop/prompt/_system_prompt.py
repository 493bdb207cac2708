"""System-prompt assembly: a persona, ordered sections, and runtime-context sections."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._hooks import Disposer
from ..tools._agent_ref import AgentRef

__all__ = ["RUNTIME_CONTEXT_PLUGIN", "Section", "SystemPromptService"]

RUNTIME_CONTEXT_PLUGIN = "steerloop/runtime-context"

Render = str | Callable[[Any], str | Awaitable[str | None] | None]


@dataclass(frozen=True, slots=True, eq=False)
class Section:
    name: str
    render: Render
    order: int
    owner: str | None
    context: bool


class SystemPromptService:
    """``rt.system_prompt``: persona + sections, rendered per agent."""

    def __init__(self, persona: str = "") -> None:
        self.persona = persona
        self._sections: list[Section] = []

    def add_section(
        self, name: str, render: Render, *, order: int = 0, owner: str | None = None
    ) -> Disposer:
        """Add a prompt section (text, or ``render(agent)`` returning text, maybe async)."""
        return self._add(name, render, order, owner, context=False)

    def add_context_section(
        self, name: str, render: Render, *, order: int = 0, owner: str | None = None
    ) -> Disposer:
        """Add a runtime-context section; its rendering reaches the model as a user message."""
        return self._add(name, render, order, owner, context=True)

    def _add(
        self, name: str, render: Render, order: int, owner: str | None, context: bool
    ) -> Disposer:
        if not isinstance(name, str) or not name:
            raise ValueError("section name must be a non-empty string")
        if not (isinstance(render, str) or callable(render)):
            raise ValueError("section render must be a string or a callable")
        section = Section(name, render, order, owner, context)
        self._sections.append(section)

        def dispose() -> None:
            if section in self._sections:
                self._sections.remove(section)

        return Disposer(dispose)

    def has_context_sections(self) -> bool:
        return any(s.context for s in self._sections)

    async def assemble(self, agent: AgentRef | None = None) -> str:
        """The system prompt for ``agent``: persona, then sections by ``order``."""
        parts = [self.persona] if self.persona else []
        parts += await self._render(agent, context=False)
        return "\n\n".join(parts)

    async def render_context(self, agent: AgentRef | None = None) -> str:
        """The runtime-context text for ``agent`` (empty when no section renders)."""
        return "\n\n".join(await self._render(agent, context=True))

    async def _render(self, agent: AgentRef | None, *, context: bool) -> list[str]:
        agent_id = agent.id if agent is not None else None
        chosen = [
            s
            for s in self._sections
            if s.context == context and (s.owner is None or s.owner == agent_id)
        ]
        chosen.sort(key=lambda s: s.order)
        out = []
        for section in chosen:
            text: Any = section.render
            if callable(text):
                text = text(agent)
                if inspect.isawaitable(text):
                    text = await text
            if text:
                out.append(f"## {section.name}\n{text}" if context else str(text))
        return out
