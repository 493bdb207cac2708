"""The LLM seam: adapters, requests, stream chunks and failures."""

from ..errors import LlmError
from ._runtime import LlmService, PreparedCall
from ._types import (
    CallConfig,
    GenerateRequest,
    LlmAdapter,
    LlmFailure,
    ModelInfo,
    RetryPolicy,
    TokenUsage,
    ToolSchema,
)

__all__ = [
    "CallConfig",
    "GenerateRequest",
    "LlmAdapter",
    "LlmError",
    "LlmFailure",
    "LlmService",
    "ModelInfo",
    "PreparedCall",
    "RetryPolicy",
    "TokenUsage",
    "ToolSchema",
]
