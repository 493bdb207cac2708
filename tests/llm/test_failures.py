"""One failure table for both adapters: the same server error gets the same code whichever
SDK read it. Context overflow as llama.cpp, vLLM and Ollama word it, over loopback servers."""

from __future__ import annotations

from typing import Any

import pytest

from steerloop import user_message
from steerloop.llm import GenerateRequest, LlmFailure
from steerloop.llm._failures import classify
from steerloop.llm.anthropic import AnthropicAdapter
from steerloop.llm.chunks import Finish
from steerloop.llm.openai import OpenAIChatAdapter

from .sse_server import SSEServer, json_reply

LLAMA_CPP = {
    "error": {
        "code": 400,
        "message": "request (6033 tokens) exceeds the available context size (4096 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 6033,
        "n_ctx": 4096,
    }
}
# Only the type says it: the wording alone must not be needed.
LLAMA_CPP_TYPE_ONLY = {
    "error": {"code": 400, "message": "bad", "type": "exceed_context_size_error"}
}
VLLM = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested "
    "6033 tokens (5033 in the messages, 1000 in the completion).",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_MODEL_LEN = {
    "error": {
        "message": "The decoder prompt (length 6033) is longer than the maximum model length "
        "of 4096.",
        "type": "BadRequestError",
        "code": 400,
    }
}
OLLAMA = {
    "error": {
        "message": "prompt too long; exceeded max context length by 1937 tokens",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
}
PLAIN_400 = {"error": {"message": "messages: field required", "type": "invalid_request_error"}}

BODIES = {
    "llama.cpp": (LLAMA_CPP, "CONTEXT_OVERFLOW"),
    "llama.cpp-type": (LLAMA_CPP_TYPE_ONLY, "CONTEXT_OVERFLOW"),
    "vllm": (VLLM, "CONTEXT_OVERFLOW"),
    "vllm-model-len": (VLLM_MODEL_LEN, "CONTEXT_OVERFLOW"),
    "ollama": (OLLAMA, "CONTEXT_OVERFLOW"),
    "plain-400": (PLAIN_400, "INVALID_REQUEST"),
}


async def failure_of(adapter: Any, provider: str, model: str) -> LlmFailure:
    request = GenerateRequest(provider=provider, model=model, messages=(user_message("hi"),))
    try:
        chunks = [c async for c in adapter.stream(request)]
    finally:
        await adapter.aclose()
    (finish,) = chunks
    assert isinstance(finish, Finish) and finish.reason.kind == "error"
    assert finish.reason.failure is not None
    return finish.reason.failure


@pytest.mark.parametrize("name", list(BODIES))
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_overflow_wordings_through_either_adapter(
    server: SSEServer, kind: str, name: str
) -> None:
    """A 400 from a local server (each speaks the OpenAI error envelope on both its chat and
    its Anthropic-compatible endpoints) is CONTEXT_OVERFLOW, not retryable, through either
    adapter. Failed before the fix for llama.cpp (INVALID_REQUEST in both adapters: its
    type was not read and "context size" was not a known wording) and vLLM's model length."""
    body, code = BODIES[name]
    server.add(json_reply(400, body))
    adapter: Any
    if kind == "openai":
        adapter = OpenAIChatAdapter(base_url=server.url)
    else:
        adapter = AnthropicAdapter(base_url=server.url)
    failure = await failure_of(adapter, kind, "local-model")
    assert (failure.code, failure.status, failure.retryable) == (code, 400, False)


@pytest.mark.parametrize(
    ("status", "error_type", "error_code", "text", "expected"),
    [
        (429, None, "insufficient_quota", "", ("QUOTA", False)),
        (429, "rate_limit_error", None, "", ("RATE_LIMITED", True)),
        (529, "overloaded_error", None, "", ("OVERLOADED", True)),
        (None, "overloaded_error", None, "", ("OVERLOADED", True)),
        (None, None, None, "backend died", ("SERVER", True)),
        (None, None, None, "context length exceeded", ("CONTEXT_OVERFLOW", False)),
        (500, None, None, "context length exceeded", ("SERVER", True)),
        (418, None, None, "teapot", ("INVALID_REQUEST", False)),
        (503, None, None, "", ("SERVER", True)),
        (
            413,
            "request_too_large",
            None,
            "Request exceeds the maximum size",
            ("INVALID_REQUEST", False),
        ),
    ],
)
def test_the_table(
    status: int | None,
    error_type: str | None,
    error_code: str | None,
    text: str,
    expected: tuple[str, bool],
) -> None:
    """Type or code first, then status; overflow words only turn a 4xx or an in-stream error."""
    got = classify(status=status, error_type=error_type, error_code=error_code, text=text)
    assert got == expected
