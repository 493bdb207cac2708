"""System prompt and runtime context."""

from ._system_prompt import RUNTIME_CONTEXT_PLUGIN, SystemPromptService

__all__ = ["RUNTIME_CONTEXT_PLUGIN", "SystemPromptService"]
