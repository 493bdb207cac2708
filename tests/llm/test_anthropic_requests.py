"""AnthropicAdapter requests with the installed SDK: sampling parameters, ``CallConfig.extra``,
a keyless local server, and a turn the server paused (``stop_reason: pause_turn``).

Against the loopback Messages API server of ``test_anthropic``; the assertions read the JSON
bodies the server received and the log the run wrote.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from steerloop import AgentOptions, Runtime, user_message
from steerloop.llm import CallConfig, TokenUsage
from steerloop.llm.anthropic import MAX_CONTINUATIONS, AnthropicAdapter
from steerloop.messages import TextBlock

from ..conftest import compact, events_of, settle
from ..support import last_reason
from .anthropic_wire import MODEL, block_start, block_stop, delta, message, streamed, text
from .sse_server import SSEServer


async def run(rt: Runtime, adapter: AnthropicAdapter, **options: Any) -> Any:
    rt.llm.register_adapter(["anthropic"], adapter)
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="anthropic", model=MODEL, **options)
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await settle(agent)
    return agent


def sent_key(request: Any) -> str | None:
    """The key a request carried (``x-api-key``, or a bearer token in SDK 2.x)."""
    headers = request.headers
    if "x-api-key" in headers:
        return str(headers["x-api-key"])
    auth = headers.get("authorization", "")
    return auth.removeprefix("Bearer ") if auth else None


def test_the_installed_sdk_is_in_the_tested_range() -> None:
    """The 2.x SDK takes no ``temperature``/``top_p`` keyword: the case this adapter covers."""
    assert int(anthropic.__version__.split(".")[0]) == 2


async def test_sampling_parameters_and_extra_reach_the_wire(rt: Runtime, server: SSEServer) -> None:
    """temperature and top_p (keywords the 2.x SDK no longer takes) and every key of
    ``CallConfig.extra`` are sent in the body; the turn completes. Failed before the fix: the
    SDK raised TypeError and the turn ended in error with nothing sent."""
    server.add(streamed(message(text(0, "ok"))))
    adapter = AnthropicAdapter(base_url=server.url, api_key="sk-ant-test")

    async def route(payload: Any, next_: Any) -> Any:
        return (await next_()).replace(
            temperature=0.2, top_p=0.9, extra={"top_k": 5, "metadata": {"user_id": "u-7"}}
        )

    rt.hooks.on("agent/request", route)
    try:
        agent = await run(rt, adapter)
    finally:
        await adapter.aclose()
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:completed"]
    (request,) = server.requests
    body = request.json()
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.2, 0.9, 5)
    assert body["metadata"] == {"user_id": "u-7"}
    assert body["max_tokens"] == 16384 and body["stream"] is True


def test_build_params_merges_extra_over_the_body() -> None:
    """``extra`` is the last word on the wire body (it may replace a computed field)."""
    from steerloop.llm import GenerateRequest
    from steerloop.llm.anthropic import sdk_arguments

    adapter = AnthropicAdapter(base_url="http://127.0.0.1:9", api_key="k")
    request = GenerateRequest(
        provider="anthropic",
        model=MODEL,
        messages=(user_message("hi"),),
        config=CallConfig(temperature=0.0, extra={"max_tokens": 77, "top_k": 1}),
    )
    params = adapter.build_params(request)
    assert params["max_tokens"] == 77 and params["temperature"] == 0.0
    kwargs = sdk_arguments(params)
    assert kwargs["max_tokens"] == 77
    assert kwargs["extra_body"] == {"temperature": 0.0, "top_k": 1}


async def test_a_local_server_without_a_key(
    rt: Runtime, server: SSEServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key given, no ANTHROPIC_API_KEY, an explicit base_url: a placeholder key is sent
    and the request succeeds. Failed before the fix: "Could not resolve authentication
    method" before anything was sent."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    server.add(streamed(message(text(0, "local"))))
    adapter = AnthropicAdapter(base_url=server.url)
    try:
        agent = await run(rt, adapter)
    finally:
        await adapter.aclose()
    assert last_reason(agent).kind == "completed"
    assert sent_key(server.requests[0]) == "no-key"


async def test_an_environment_key_does_not_travel_to_an_explicit_base_url(
    rt: Runtime, server: SSEServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like OpenAIChatAdapter: a base_url given without a key never gets ANTHROPIC_API_KEY."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-mustnottravel")
    server.add(streamed(message(text(0, "x"))))
    adapter = AnthropicAdapter(base_url=server.url)
    try:
        await run(rt, adapter)
    finally:
        await adapter.aclose()
    assert sent_key(server.requests[0]) == "no-key"


# --- pause_turn ---------------------------------------------------------------------------


SEARCH_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://example.org/",
            "title": "Example",
            "encrypted_content": "EqgfCiox",
            "page_age": None,
        }
    ],
}


def paused_reply() -> Any:
    """Text, a server tool call and its result, then ``pause_turn``."""
    server_blocks = [
        block_start(1, SEARCH_USE),
        delta(1, {"type": "input_json_delta", "partial_json": '{"query": "q"}'}),
        block_stop(1),
        block_start(2, SEARCH_RESULT),
        block_stop(2),
    ]
    return streamed(
        message(text(0, "Searching. "), server_blocks, stop_reason="pause_turn", output_tokens=7),
    )


async def test_pause_turn_continues_the_turn(rt: Runtime, server: SSEServer) -> None:
    """``pause_turn`` is not a stop: the adapter sends the request again with the paused
    content (server tool blocks included, verbatim) as the assistant prefix and streams the
    rest into the same attempt. One assistant message holds both texts; usage is summed.
    Failed before the fix: the turn completed after "Searching. " with one request."""
    server.add(paused_reply(), streamed(message(text(0, "Found it."), input_tokens=30)))
    adapter = AnthropicAdapter(base_url=server.url, api_key="sk-ant-test")
    try:
        agent = await run(rt, adapter)
    finally:
        await adapter.aclose()
    assert compact(agent.session)[-4:] == ["ctx", "msg", "S-1.1", "T-1:completed"]
    assert len(server.requests) == 2
    first, second = server.requests[0].json(), server.requests[1].json()
    assert second["messages"] == [
        *first["messages"],
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching. "},
                {**SEARCH_USE, "input": {"query": "q"}},
                {
                    **SEARCH_RESULT,
                    "content": [
                        {k: v for k, v in SEARCH_RESULT["content"][0].items() if v is not None}  # type: ignore[attr-defined]
                    ],
                },
            ],
        },
    ]
    for key in ("model", "max_tokens", "system", "tools"):
        assert second.get(key) == first.get(key)
    msg = events_of(agent.session, "assistant/message")[0].data
    assert msg.message.content == (TextBlock("Searching. "), TextBlock("Found it."))
    starts = [r.chunk.index for r in msg.stream if r.chunk.kind == "block-start"]
    assert starts == [0, 3]  # the continuation's block 0 comes after the paused blocks
    assert msg.usage == TokenUsage(input_tokens=40, output_tokens=27)
    assert msg.stream[-1].chunk.reason.kind == "stop"


async def test_a_turn_paused_too_often_ends_in_error(rt: Runtime, server: SSEServer) -> None:
    """A server that pauses every response: after MAX_CONTINUATIONS resends, an error finish
    (PAUSED, not retryable) instead of an endless loop."""
    server.add(*(paused_reply() for _ in range(MAX_CONTINUATIONS + 1)))
    adapter = AnthropicAdapter(base_url=server.url, api_key="sk-ant-test")
    try:
        agent = await run(rt, adapter)
    finally:
        await adapter.aclose()
    assert len(server.requests) == MAX_CONTINUATIONS + 1
    failure = last_reason(agent).error
    assert (failure.code, failure.retryable) == ("PAUSED", False)


# --- prompt caching -------------------------------------------------------------------------


def _cached_request(extra: Any = None, *, history: Any = None) -> Any:
    from steerloop.llm import GenerateRequest, ToolSchema
    from steerloop.messages import SystemMessage, TextBlock

    tools = tuple(
        ToolSchema(name=n, description=n, parameters={"type": "object"}) for n in ("a", "b")
    )
    return GenerateRequest(
        provider="anthropic",
        model=MODEL,
        messages=history
        or (SystemMessage(id="s", content=(TextBlock("sys"),)), user_message("hi")),
        tools=tools,
        config=CallConfig(extra=extra) if extra is not None else None,
    )


def test_prompt_cache_breakpoints_and_the_off_switch() -> None:
    """Default on: ``cache_control`` on the system prompt, the last tool only and the last
    message; ``extra["prompt_cache"]`` (never sent) switches it off or sets the object; the
    adapter-wide ``prompt_cache=False`` turns it off, and a request can turn it back on."""
    on = AnthropicAdapter(base_url="http://127.0.0.1:9", api_key="k")
    off = AnthropicAdapter(base_url="http://127.0.0.1:9", api_key="k", prompt_cache=False)
    eph = {"type": "ephemeral"}
    hour = {"type": "ephemeral", "ttl": "1h"}

    params = on.build_params(_cached_request())
    assert params["system"] == [{"type": "text", "text": "sys", "cache_control": eph}]
    assert params["tools"] == [
        {"name": "a", "description": "a", "input_schema": {"type": "object"}},
        {"name": "b", "description": "b", "input_schema": {"type": "object"}, "cache_control": eph},
    ]
    assert params["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": eph}]}
    ]

    for adapter, extra in ((on, {"prompt_cache": False}), (off, None), (off, {"top_k": 1})):
        params = adapter.build_params(_cached_request(extra))
        assert params["system"] == "sys"
        assert "cache_control" not in json.dumps(params)
        assert "prompt_cache" not in params

    params = off.build_params(_cached_request({"prompt_cache": hour}))
    assert params["system"][0]["cache_control"] == hour
    assert params["messages"][0]["content"][0]["cache_control"] == hour
    assert "prompt_cache" not in params


def test_prompt_cache_skips_blocks_that_cannot_carry_a_breakpoint() -> None:
    """A last message ending in thinking (a prefilled assistant turn) gets its breakpoint on
    the last block that may carry one; a bad ``prompt_cache`` value is a clear error."""
    from steerloop.messages import AssistantMessage, ReasoningBlock, TextBlock

    adapter = AnthropicAdapter(base_url="http://127.0.0.1:9", api_key="k")
    signed = ReasoningBlock("hm", {"kind": "anthropic/thinking", "signature": "sig"})
    history = (
        user_message("hi"),
        AssistantMessage(id="a", content=(TextBlock("so"), signed)),
    )
    params = adapter.build_params(_cached_request(history=history))
    assert params["messages"][-1]["content"] == [
        {"type": "text", "text": "so", "cache_control": {"type": "ephemeral"}},
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
    ]
    with pytest.raises(ValueError, match="prompt_cache must be"):
        adapter.build_params(_cached_request({"prompt_cache": "yes"}))


async def test_a_bad_prompt_cache_value_fails_the_request_clearly(
    rt: Runtime, server: SSEServer
) -> None:
    """``extra["prompt_cache"]`` of the wrong type: an error finish ``INVALID_REQUEST``
    naming the key, nothing sent."""
    from steerloop.llm.chunks import Finish

    adapter = AnthropicAdapter(base_url=server.url, api_key="k")
    try:
        chunks = [c async for c in adapter.stream(_cached_request({"prompt_cache": "yes"}))]
    finally:
        await adapter.aclose()
    assert server.requests == []
    (finish,) = chunks
    assert isinstance(finish, Finish)
    failure = finish.reason.failure
    assert failure is not None
    assert (failure.code, failure.retryable) == ("INVALID_REQUEST", False)
    assert failure.message.startswith("prompt_cache must be true, false or a cache_control")
