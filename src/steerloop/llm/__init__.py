"""The LLM seam: adapters, requests, stream chunks and failures."""

from ..errors import LlmError
from ._http import redact
from ._runtime import LlmService, PreparedCall
from ._types import (
    CallConfig,
    ClosableAdapter,
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
    "ClosableAdapter",
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
    "redact",
]
