"""Provider configuration: environment, TOML table, lazy registration, keys kept secret."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

# Imported up front: under load, the adapter's lazy SDK import inside a turn outlasts settle().
import steerloop.llm.openai  # noqa: F401
from steerloop import AgentOptions, Runtime, user_message
from steerloop.llm.config import (
    ProviderConfig,
    ProviderConfigError,
    _LazyAdapter,
    register_providers,
)
from tests.conftest import compact, events_of, settle
from tests.llm.openai_wire import DONE, chunk
from tests.llm.sse_server import SSEServer, json_reply, sse_reply

SECRET = "sk-live-0123456789abcdefSECRET"


def text_reply(text: str) -> Any:
    return sse_reply([chunk({"content": text}), chunk({}, "stop"), DONE])


async def run(rt: Runtime, provider: str, model: str) -> Any:
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider=provider, model=model)
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    await settle(agent)
    return agent


def log_text(agent: Any) -> str:
    return json.dumps([e.to_json() for e in agent.session.events])


# --- resolution -------------------------------------------------------------------------


def test_environment_providers() -> None:
    config = ProviderConfig.load(
        environ={"DEEPSEEK_API_KEY": "k1", "OPENAI_API_KEY": "k2", "ANTHROPIC_API_KEY": "k3"}
    )
    assert set(config.providers) == {"deepseek", "openai", "anthropic"}
    deepseek = config.providers["deepseek"]
    assert (deepseek.kind, deepseek.base_url) == ("openai", "https://api.deepseek.com")
    assert config.providers["anthropic"].kind == "anthropic"
    assert config.resolve_model() == ("deepseek", "deepseek-chat")
    assert config.resolve_model("openai/gpt-4o") == ("openai", "gpt-4o")
    assert config.resolve_model("claude-opus-4-1") == ("anthropic", "claude-opus-4-1")
    assert config.resolve_model("o3-mini") == ("openai", "o3-mini")


def test_only_providers_with_keys() -> None:
    config = ProviderConfig.load(environ={"OPENAI_API_KEY": "k"})
    assert set(config.providers) == {"openai"}
    assert config.resolve_model() == ("openai", "gpt-4.1")


def test_local_server_from_base_url() -> None:
    config = ProviderConfig.load(
        environ={
            "STEERLOOP_OPENAI_BASE_URL": "http://localhost:11434/v1",
            "STEERLOOP_OPENAI_MODEL": "qwen3:8b",
        }
    )
    local = config.providers["local"]
    assert (local.base_url, local.key_required) == ("http://localhost:11434/v1", False)
    assert config.resolve_model() == ("local", "qwen3:8b")
    assert config.resolve_model("local/Qwen/Qwen3-8B") == ("local", "Qwen/Qwen3-8B")


def test_openai_base_url_pairs_with_openai_key() -> None:
    config = ProviderConfig.load(
        environ={"OPENAI_BASE_URL": "http://gw:8000/v1", "OPENAI_API_KEY": "k"}
    )
    assert config.providers["local"].api_key_env == "OPENAI_API_KEY"
    config = ProviderConfig.load(environ={"STEERLOOP_OPENAI_BASE_URL": "http://x/v1"})
    assert config.providers["local"].api_key_env == "STEERLOOP_OPENAI_API_KEY"


def test_nothing_configured_names_what_to_set() -> None:
    config = ProviderConfig.load(environ={})
    with pytest.raises(ProviderConfigError, match=r"set DEEPSEEK_API_KEY.*--model"):
        config.resolve_model()


def test_missing_key_for_a_named_provider() -> None:
    config = ProviderConfig.load(environ={"OPENAI_API_KEY": "k"})
    with pytest.raises(ProviderConfigError, match=r"set DEEPSEEK_API_KEY or pass --model"):
        config.resolve_model("deepseek/deepseek-chat")
    with pytest.raises(ProviderConfigError, match="unknown provider 'nope'"):
        config.resolve_model("nope/m")
    with pytest.raises(ProviderConfigError, match="PROVIDER/MODEL"):
        config.resolve_model("mystery-model")


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        """
model = "vllm/Qwen/Qwen3-8B"

[providers.vllm]
kind = "openai"
base_url = "http://localhost:8000/v1"
headers = { "X-Team" = "core" }
timeout = 30

[providers.vllm.models."Qwen/Qwen3-8B"]
context_window = 32768

[providers.corp]
kind = "anthropic"
base_url = "https://llm.corp/anthropic"
api_key_env = "CORP_KEY"
default_model = "claude-x"

[providers.deepseek]
base_url = "https://proxy.example/deepseek"
""",
        encoding="utf-8",
    )
    config = ProviderConfig.from_file(path, environ={"DEEPSEEK_API_KEY": "k"})
    vllm = config.providers["vllm"]
    assert (vllm.kind, vllm.key_required, vllm.timeout) == ("openai", False, 30.0)
    assert vllm.models["Qwen/Qwen3-8B"].context_window == 32768
    assert dict(vllm.headers) == {"X-Team": "core"}
    assert config.resolve_model() == ("vllm", "Qwen/Qwen3-8B")
    deepseek = config.providers["deepseek"]
    assert (deepseek.base_url, deepseek.api_key_env) == (
        "https://proxy.example/deepseek",
        "DEEPSEEK_API_KEY",
    )
    with pytest.raises(ProviderConfigError, match="set CORP_KEY"):
        config.resolve_model("corp/claude-x")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"x": {"api_key": SECRET}}, "api_key_env"),
        ({"x": {"kind": "grpc"}}, "kind must be"),
        ({"x": {"base_url": "u", "colour": 1}}, "unknown key"),
        ({"x": "nope"}, "must be a table"),
    ],
)
def test_invalid_tables(table: Any, message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message) as info:
        ProviderConfig.load(table, environ={})
    assert SECRET not in str(info.value)


def test_invalid_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("model = ", encoding="utf-8")
    with pytest.raises(ProviderConfigError, match=r"bad\.toml"):
        ProviderConfig.from_file(path, environ={})


def test_config_repr_hides_keys() -> None:
    config = ProviderConfig.load(environ={"DEEPSEEK_API_KEY": SECRET})
    assert SECRET not in repr(config)


# --- registration -----------------------------------------------------------------------


def _config(server: SSEServer, environ: dict[str, str]) -> ProviderConfig:
    return ProviderConfig.load({"deepseek": {"base_url": server.url}}, environ=environ)


async def test_registered_provider_serves_the_agent(rt: Runtime, server: SSEServer) -> None:
    server.add(text_reply("hello"))
    dispose = register_providers(rt, _config(server, {"DEEPSEEK_API_KEY": SECRET}))
    agent = await run(rt, "deepseek", "deepseek-chat")
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:completed"]
    assert server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in log_text(agent)
    dispose()
    dispose()
    assert rt.llm.adapter_for("deepseek") is None


async def test_key_never_reaches_the_log_or_failures(rt: Runtime, server: SSEServer) -> None:
    # The provider echoes the key back in its error, as some do.
    server.add(
        json_reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}."}}),
    )
    register_providers(rt, _config(server, {"DEEPSEEK_API_KEY": SECRET}))
    agent = await run(rt, "deepseek", "deepseek-chat")
    assert compact(agent.session)[-3:] == ["attempt", "S-1.1", "T-1:error"]
    (end,) = events_of(agent.session, "turn/end")
    failure = end.data.reason.error
    assert failure.code == "AUTH"
    assert SECRET not in failure.message
    assert SECRET[:12] not in failure.message
    assert SECRET not in log_text(agent)


async def test_missing_key_fails_with_a_clear_message(rt: Runtime, server: SSEServer) -> None:
    errors: list[Any] = []
    rt.hooks.on("agent/error", lambda p: errors.append(p.error))
    register_providers(rt, _config(server, {}))
    agent = await run(rt, "deepseek", "deepseek-chat")
    assert server.requests == []
    (end,) = events_of(agent.session, "turn/end")
    assert end.data.reason.kind == "error"
    assert end.data.reason.error.code == "AUTH"
    assert "set DEEPSEEK_API_KEY" in end.data.reason.error.message
    assert len(errors) == 1


async def test_adapters_are_imported_lazily(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "steerloop.llm.anthropic", raising=False)
    register_providers(rt, ProviderConfig.load(environ={"ANTHROPIC_API_KEY": "k"}))
    assert "steerloop.llm.anthropic" not in sys.modules
    assert rt.llm.adapter_for("anthropic") is not None


async def test_an_anthropic_provider_takes_a_models_table(rt: Runtime) -> None:
    """``[providers.NAME.models]`` works for an Anthropic provider as for an OpenAI one:
    the configured model's limits and default ``max_tokens`` win over the built-in prefix
    table, which still serves the other models."""
    config = ProviderConfig.load(
        {
            "corp": {
                "kind": "anthropic",
                "base_url": "http://127.0.0.1:9",
                "api_key_env": "CORP_KEY",
                "models": {"claude-local": {"context_window": 50_000, "max_output_tokens": 900}},
            }
        },
        environ={"CORP_KEY": "k"},
    )
    dispose = register_providers(rt, config)
    adapter = rt.llm.adapter_for("corp")
    assert adapter is not None
    local = await adapter.resolve_model("corp", "claude-local")
    assert local is not None
    assert (local.context_window, local.max_output_tokens) == (50_000, 900)
    built_in = await adapter.resolve_model("corp", "claude-sonnet-4-5")
    assert built_in is not None
    assert (built_in.context_window, built_in.defaults["max_tokens"]) == (200_000, 16_384)
    dispose()


async def test_custom_adapter_by_import_path(rt: Runtime) -> None:
    config = ProviderConfig.load(
        {"fake": {"kind": "tests.llm.test_config:FakeAdapter", "base_url": "mem://"}},
        environ={},
    )
    register_providers(rt, config)
    agent = await run(rt, "fake", "m")
    assert compact(agent.session)[-1] == "T-1:completed"
    assert FakeAdapter.built == [("mem://", None)]


async def test_unavailable_adapter_module(rt: Runtime) -> None:
    config = ProviderConfig.load({"gone": {"kind": "steerloop_no_such_module:Adapter"}}, environ={})
    register_providers(rt, config)
    agent = await run(rt, "gone", "m")
    (end,) = events_of(agent.session, "turn/end")
    assert end.data.reason.error.code == "NO_ADAPTER"


class FakeAdapter:
    """A custom adapter loaded by import path from the config."""

    built: ClassVar[list[tuple[Any, Any]]] = []

    def __init__(self, base_url: Any = None, api_key: Any = None) -> None:
        FakeAdapter.built.append((base_url, api_key))
        from steerloop.testing import ScriptedAdapter, text_response

        self._inner = ScriptedAdapter([text_response("hi")])

    async def resolve_model(self, provider: str, model: str) -> Any:
        return await self._inner.resolve_model(provider, model)

    def stream(self, request: Any) -> Any:
        return self._inner.stream(request)


# --- output caps (max_tokens) -------------------------------------------------------------


def test_max_tokens_from_the_file(tmp_path: Path) -> None:
    """Global ``max_tokens`` and per-model ``max_tokens``/``max_output_tokens`` are read and
    combined: the model's own cap, else the smaller of the global cap and its ceiling."""
    path = tmp_path / "steerloop.toml"
    path.write_text(
        """
max_tokens = 1000
[providers.vllm]
base_url = "http://localhost:8000/v1"
[providers.vllm.models.capped]
max_tokens = 64
[providers.vllm.models.small]
max_output_tokens = 300
[providers.vllm.models.large]
max_output_tokens = 9000
""",
        encoding="utf-8",
    )
    config = ProviderConfig.from_file(path, environ={})
    assert config.max_tokens == 1000
    assert [config.max_tokens_for("vllm", m) for m in ("capped", "small", "large", "other")] == [
        64,
        300,
        1000,
        1000,
    ]
    unset = ProviderConfig.load({"vllm": {"base_url": "u"}}, environ={})
    assert unset.max_tokens_for("vllm", "other") is None


@pytest.mark.parametrize(
    "bad",
    [
        {"models": {"m": {"max_tokens": 0}}},
        {"models": {"m": {"max_output_tokens": "lots"}}},
        {"models": {"m": {"max_tokens": True}}},
    ],
)
def test_invalid_caps(bad: dict[str, Any]) -> None:
    with pytest.raises(ProviderConfigError, match="positive integer"):
        ProviderConfig.load({"x": {"base_url": "u", **bad}}, environ={})
    with pytest.raises(ProviderConfigError, match="positive integer"):
        ProviderConfig.load({}, environ={}, max_tokens=-5)


@pytest.mark.parametrize(
    ("model", "expected"),
    [("capped", 64), ("small", 300), ("other", 1000)],
)
async def test_configured_caps_are_sent(
    rt: Runtime, server: SSEServer, model: str, expected: int
) -> None:
    """What the config says reaches the wire as ``max_tokens`` and the request header's
    adapter defaults. Failed before the fix: nothing was sent (``max_output_tokens`` was only
    a fact, and there was no ``max_tokens`` setting)."""
    server.add(text_reply("ok"))
    config = ProviderConfig.load(
        {
            "vllm": {
                "base_url": server.url,
                "models": {"capped": {"max_tokens": 64}, "small": {"max_output_tokens": 300}},
            }
        },
        environ={},
        max_tokens=1000,
    )
    dispose = register_providers(rt, config)
    agent = await run(rt, "vllm", model)
    dispose()
    assert compact(agent.session)[-1] == "T-1:completed"
    assert server.requests[0].json()["max_tokens"] == expected
    header = events_of(agent.session, "request/header")[0].data.header
    assert header["adapter_defaults"] == {"max_tokens": expected}


async def test_the_agent_own_max_tokens_wins(rt: Runtime, server: SSEServer) -> None:
    """``AgentOptions.max_tokens`` (the CLI's ``--max-tokens``) overrides the config."""
    server.add(text_reply("ok"))
    config = ProviderConfig.load({"vllm": {"base_url": server.url}}, environ={}, max_tokens=1000)
    register_providers(rt, config)
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="vllm", model="m", max_tokens=7)
    )
    handle.agent.followup(user_message("u1"))
    await settle(handle.agent)
    assert server.requests[0].json()["max_tokens"] == 7


# --- the Responses API ----------------------------------------------------------------------


async def test_openai_responses_kind_serves_the_agent(rt: Runtime, server: SSEServer) -> None:
    """``kind = "openai-responses"`` builds an ``OpenAIResponsesAdapter``: the request goes
    to ``/responses`` (stateless, the session id as the cache key) with the provider's key."""
    from .responses_wire import Wire, reply

    wire = Wire()
    events = wire.created() + wire.message(0, ["hello"])
    events.append(wire.completed(Wire.usage(3, 1)))
    server.add(reply(events))
    config = ProviderConfig.load(
        {"gw": {"kind": "openai-responses", "base_url": server.url, "api_key_env": "GW_KEY"}},
        environ={"GW_KEY": SECRET},
    )
    dispose = register_providers(rt, config)
    handle = await rt.agents.create(
        session_id="s-1", agent_options=AgentOptions(provider="gw", model="gpt-4.1")
    )
    agent = handle.agent
    agent.followup(user_message("u1"))
    # Bounded, but generous: the first request imports the SDK's Responses types.
    await settle(agent, 60)
    assert compact(agent.session)[-3:] == ["msg", "S-1.1", "T-1:completed"]
    (received,) = server.requests
    assert received.path == "/responses"
    assert received.headers["authorization"] == f"Bearer {SECRET}"
    body = received.json()
    assert (body["store"], body["prompt_cache_key"]) == (False, "s-1")
    assert SECRET not in log_text(agent)
    dispose()


async def test_responses_first_models_of_openai_use_the_responses_api(rt: Runtime) -> None:
    """On OpenAI's own endpoint the models the known-models table marks Responses-first
    (reasoning models, dated variants included) go through the Responses adapter, the rest
    through chat completions; an OpenAI-compatible server elsewhere is never switched."""
    from steerloop.llm.openai import OpenAIChatAdapter, OpenAIResponsesAdapter

    config = ProviderConfig.load(
        {"vllm": {"base_url": "http://127.0.0.1:9/v1"}},
        environ={"OPENAI_API_KEY": SECRET, "DEEPSEEK_API_KEY": SECRET},
    )
    dispose = register_providers(rt, config)
    openai_ = rt.llm.adapter_for("openai")
    assert isinstance(openai_, _LazyAdapter)
    kinds = {m: openai_.kind_for(m) for m in ("o3", "o4-mini-2025-04-16", "gpt-5", "gpt-4.1")}
    assert kinds == {
        "o3": "openai-responses",
        "o4-mini-2025-04-16": "openai-responses",
        "gpt-5": "openai-responses",
        "gpt-4.1": "openai",
    }
    for other in ("vllm", "deepseek"):
        adapter = rt.llm.adapter_for(other)
        assert isinstance(adapter, _LazyAdapter)
        assert adapter.kind_for("o3") == "openai"
    # One adapter per kind, built on first use, both closed with the provider.
    await openai_.resolve_model("openai", "o3")
    await openai_.resolve_model("openai", "gpt-4.1")
    built = openai_._adapters
    assert isinstance(built["openai-responses"], OpenAIResponsesAdapter)
    assert isinstance(built["openai"], OpenAIChatAdapter)
    await openai_.aclose()
    assert openai_._adapters == {}
    dispose()


def test_unknown_kind_names_the_responses_kind() -> None:
    with pytest.raises(ProviderConfigError, match="'openai-responses'"):
        ProviderConfig.load({"x": {"kind": "grpc"}}, environ={})
