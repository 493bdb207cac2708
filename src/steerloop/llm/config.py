"""Model providers for the command line: from the environment and a TOML ``[providers]`` table.

Environment (each adds a provider when set):

* ``DEEPSEEK_API_KEY``  → ``deepseek`` (OpenAI-compatible, https://api.deepseek.com)
* ``OPENAI_API_KEY``    → ``openai``
* ``ANTHROPIC_API_KEY`` → ``anthropic``
* ``STEERLOOP_OPENAI_BASE_URL`` or ``OPENAI_BASE_URL`` → ``local``, any OpenAI-compatible
  server (vLLM, Ollama, llama.cpp); its key is ``STEERLOOP_OPENAI_API_KEY`` (or
  ``OPENAI_API_KEY`` with ``OPENAI_BASE_URL``, the SDK's convention), its default model
  ``STEERLOOP_OPENAI_MODEL``.
* ``STEERLOOP_MODEL`` → the default ``PROVIDER/MODEL``.

A config file adds or adjusts providers; keys stay in the environment::

    model = "deepseek/deepseek-chat"
    [providers.vllm]
    kind = "openai"                     # or "openai-responses", "anthropic",
                                        # or "package.module:AdapterClass"
    base_url = "http://localhost:8000/v1"
    api_key_env = "VLLM_API_KEY"        # optional for local servers
    default_model = "Qwen/Qwen3-8B"
    max_tokens = 4096                   # output cap of every request (``--max-tokens`` wins)
    [providers.vllm.models."Qwen/Qwen3-8B"]
    context_window = 32768
    max_output_tokens = 8192            # the model's ceiling: sent as the cap when smaller
    max_tokens = 2048                   # this model's cap, over the global one
    request = { temperature = 0.6 }     # request options of this model (over the provider's)
    [providers.vllm.request]            # request options of every request to this provider
    parallel_tool_calls = false

Request options (``temperature``, ``top_p``, ``tool_choice``, ``parallel_tool_calls``, or any
provider field) are ``AgentOptions.call``: ``request_options`` merges a provider's and a
model's tables (the model's win); the command line puts them over the file's ``[request]``.

A request without its own ``max_tokens`` is sent the model's ``max_tokens``, else the smaller
of the global ``max_tokens`` and the model's configured ``max_output_tokens`` (``max_tokens_for``).

Adapters are built lazily (first request), importing their SDK only then. API keys are
read from the environment at registration and never appear in a message, a repr or the log.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import tomllib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LlmError
from ..hooks import Disposer
from ..llm import ClosableAdapter, GenerateRequest, LlmAdapter, LlmFailure, ModelInfo
from .chunks import StreamChunk

if TYPE_CHECKING:
    from .. import Runtime

__all__ = [
    "ProviderConfig",
    "ProviderConfigError",
    "ProviderSpec",
    "register_providers",
]

_KINDS = {
    "openai": "steerloop.llm.openai:OpenAIChatAdapter",
    "openai-responses": "steerloop.llm.openai:OpenAIResponsesAdapter",
    "anthropic": "steerloop.llm.anthropic:AnthropicAdapter",
}
_EXTRAS = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
_OPENAI_URL = "https://api.openai.com/v1"
_SPEC_KEYS = {
    "kind",
    "base_url",
    "api_key_env",
    "default_model",
    "headers",
    "timeout",
    "models",
    "request",
}
_HINT = (
    "set DEEPSEEK_API_KEY (or OPENAI_API_KEY, ANTHROPIC_API_KEY, or STEERLOOP_OPENAI_BASE_URL "
    "for a local OpenAI-compatible server) or pass --model PROVIDER/MODEL"
)


class ProviderConfigError(ValueError):
    """The provider configuration is invalid or cannot serve the requested model."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderSpec:
    """One configured provider; ``api_key_env`` names the variable holding its key."""

    name: str
    kind: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    key_required: bool = True
    default_model: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    models: Mapping[str, ModelInfo] = field(default_factory=dict)
    #: Request options of every request to this provider (``[providers.NAME.request]``).
    request: Mapping[str, Any] = field(default_factory=dict)
    #: Request options per model (``request`` of ``[providers.NAME.models."M"]``).
    model_requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def _builtin(environ: Mapping[str, str]) -> dict[str, ProviderSpec]:
    specs = {
        "deepseek": ProviderSpec(
            name="deepseek",
            base_url="https://api.deepseek.com",
            api_key_env="DEEPSEEK_API_KEY",
            default_model="deepseek-chat",
        ),
        "openai": ProviderSpec(
            name="openai",
            base_url=_OPENAI_URL,
            api_key_env="OPENAI_API_KEY",
            default_model="gpt-4.1",
        ),
        "anthropic": ProviderSpec(
            name="anthropic",
            kind="anthropic",
            api_key_env="ANTHROPIC_API_KEY",
            default_model="claude-sonnet-4-5",
        ),
    }
    base = environ.get("STEERLOOP_OPENAI_BASE_URL")
    key_env = "STEERLOOP_OPENAI_API_KEY"
    if not base and environ.get("OPENAI_BASE_URL"):
        base = environ["OPENAI_BASE_URL"]
        if not environ.get(key_env) and environ.get("OPENAI_API_KEY"):
            key_env = "OPENAI_API_KEY"
    if base:
        specs["local"] = ProviderSpec(
            name="local",
            base_url=base,
            api_key_env=key_env,
            key_required=False,
            default_model=environ.get("STEERLOOP_OPENAI_MODEL") or None,
        )
    return specs


_MODEL_KEYS = ("context_window", "max_output_tokens", "max_tokens")


def _positive(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProviderConfigError(f"{where} must be a positive integer")
    return value


def request_table(where: str, raw: Any) -> dict[str, Any]:
    """A ``request`` table of request options, checked like ``AgentOptions.call``."""
    from ..agent import validate_call

    if not isinstance(raw, Mapping):
        raise ProviderConfigError(f"{where} must be a table")
    try:
        validate_call(raw, where)
    except ValueError as exc:
        raise ProviderConfigError(str(exc)) from None
    return dict(raw)


def _model_requests(name: str, raw: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, Mapping):
        return {}
    return {
        str(model): request_table(f"providers.{name}.models.{model}.request", facts["request"])
        for model, facts in raw.items()
        if isinstance(facts, Mapping) and "request" in facts
    }


def _model_infos(name: str, raw: Any) -> dict[str, ModelInfo]:
    if not isinstance(raw, Mapping):
        raise ProviderConfigError(f"providers.{name}.models must be a table")
    out: dict[str, ModelInfo] = {}
    for model, facts in raw.items():
        if not isinstance(facts, Mapping) or set(facts) - {*_MODEL_KEYS, "request"}:
            raise ProviderConfigError(
                f"providers.{name}.models.{model}: only {', '.join(_MODEL_KEYS)}, request"
            )
        where = f"providers.{name}.models.{model}"
        limits = {k: _positive(f"{where}.{k}", facts[k]) for k in _MODEL_KEYS if k in facts}
        cap = limits.get("max_tokens")
        out[str(model)] = ModelInfo(
            context_window=limits.get("context_window"),
            max_output_tokens=limits.get("max_output_tokens"),
            defaults={"max_tokens": cap} if cap is not None else {},
        )
    return out


def _spec_from_table(name: str, table: Any, base: ProviderSpec | None) -> ProviderSpec:
    if not isinstance(table, Mapping):
        raise ProviderConfigError(f"providers.{name} must be a table")
    if "api_key" in table:
        raise ProviderConfigError(
            f"providers.{name}: API keys do not belong in the config file; "
            "name the environment variable with api_key_env"
        )
    unknown = set(table) - _SPEC_KEYS
    if unknown:
        raise ProviderConfigError(f"providers.{name}: unknown key(s) {', '.join(sorted(unknown))}")
    kind = table.get("kind", base.kind if base else "openai")
    if kind not in _KINDS and ":" not in str(kind):
        raise ProviderConfigError(
            f"providers.{name}.kind must be 'openai', 'openai-responses', 'anthropic' "
            "or 'module:Class'"
        )
    spec = base or ProviderSpec(name=name, kind=kind, key_required="api_key_env" in table)
    changes: dict[str, Any] = {"kind": kind}
    for key in ("base_url", "api_key_env", "default_model"):
        if key in table:
            changes[key] = str(table[key])
    if "headers" in table:
        changes["headers"] = {str(k): str(v) for k, v in dict(table["headers"]).items()}
    if "timeout" in table:
        changes["timeout"] = float(table["timeout"])
    if "models" in table:
        changes["models"] = _model_infos(name, table["models"])
        changes["model_requests"] = _model_requests(name, table["models"])
    if "request" in table:
        changes["request"] = request_table(f"providers.{name}.request", table["request"])
    return replace(spec, **changes)


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """Providers by name plus the default model; keys are looked up in ``environ``."""

    providers: Mapping[str, ProviderSpec]
    default_model: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    max_tokens: int | None = None
    """The global output cap (``max_tokens`` at the top of ``steerloop.toml``)."""

    @classmethod
    def load(
        cls,
        providers: Mapping[str, Any] | None = None,
        *,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
        max_tokens: int | None = None,
    ) -> ProviderConfig:
        """Providers from the environment, adjusted by a parsed ``[providers]`` table;
        ``max_tokens`` is the global output cap.

        Raises:
            ProviderConfigError: a table entry is invalid.
        """
        env = dict(os.environ if environ is None else environ)
        builtin = _builtin(env)
        specs: dict[str, ProviderSpec] = {
            name: spec
            for name, spec in builtin.items()
            if not spec.key_required or (spec.api_key_env and env.get(spec.api_key_env))
        }
        for name, table in (providers or {}).items():
            specs[name] = _spec_from_table(name, table, specs.get(name) or builtin.get(name))
        default = model or env.get("STEERLOOP_MODEL") or None
        cap = _positive("max_tokens", max_tokens) if max_tokens is not None else None
        return cls(specs, default, env, cap)

    @classmethod
    def from_file(
        cls, path: str | Path, *, environ: Mapping[str, str] | None = None
    ) -> ProviderConfig:
        """Read ``model``, ``max_tokens`` and ``[providers]`` from a TOML file.

        Raises:
            ProviderConfigError: the file is not valid TOML or an entry is invalid.
        """
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ProviderConfigError(f"{path}: {exc}") from None
        try:
            return cls.load(
                data.get("providers"),
                model=data.get("model"),
                environ=environ,
                max_tokens=data.get("max_tokens"),
            )
        except ProviderConfigError as exc:
            raise ProviderConfigError(f"{path}: {exc}") from None

    def max_tokens_for(self, provider: str, model: str) -> int | None:
        """The output cap a request to ``provider``/``model`` is sent when it names none:
        the model's ``max_tokens``, else the smaller of the global ``max_tokens`` and the
        model's configured ``max_output_tokens``; ``None`` leaves the adapter's default."""
        spec = self.providers.get(provider)
        info = spec.models.get(model) if spec is not None else None
        if info is not None and isinstance(info.defaults.get("max_tokens"), int):
            return int(info.defaults["max_tokens"])
        caps = [c for c in (self.max_tokens, info and info.max_output_tokens) if c]
        return min(caps) if caps else None

    def request_options(self, provider: str, model: str) -> dict[str, Any]:
        """The request options of ``provider``/``model``: the provider's ``request`` table,
        then the model's over it."""
        spec = self.providers.get(provider)
        if spec is None:
            return {}
        return {**spec.request, **spec.model_requests.get(model, {})}

    def api_key(self, spec: ProviderSpec) -> str | None:
        return self.environ.get(spec.api_key_env) or None if spec.api_key_env else None

    def missing_key(self, spec: ProviderSpec) -> str | None:
        """A message naming what to set when ``spec`` needs a key that is absent."""
        if spec.key_required and self.api_key(spec) is None:
            variable = spec.api_key_env or "an API key variable (api_key_env)"
            return (
                f"provider {spec.name!r} has no API key: set {variable} "
                "or pass --model PROVIDER/MODEL for another provider"
            )
        return None

    def resolve_model(self, model: str | None = None) -> tuple[str, str]:
        """``(provider, model)`` for ``--model P/M``, a bare model name, or the default.

        Raises:
            ProviderConfigError: nothing is configured, the provider is unknown, or it has
                no key.
        """
        choice = model or self.default_model
        if choice is None:
            for name in ("deepseek", "openai", "anthropic", "local", *self.providers):
                spec = self.providers.get(name)
                if spec is not None and spec.default_model and self.missing_key(spec) is None:
                    return name, spec.default_model
            raise ProviderConfigError(f"no model provider is configured: {_HINT}")
        provider, sep, name = choice.partition("/")
        if not sep or not name:
            provider, name = self._provider_of(choice), choice
        spec = self.providers.get(provider)
        if spec is None:
            hint = _builtin({}).get(provider)
            if hint is not None and hint.api_key_env:
                raise ProviderConfigError(
                    f"provider {provider!r} has no API key: set {hint.api_key_env} "
                    "or pass --model PROVIDER/MODEL for another provider"
                )
            known = ", ".join(sorted(self.providers)) or "none"
            raise ProviderConfigError(
                f"unknown provider {provider!r} (configured: {known}); {_HINT}"
            )
        missing = self.missing_key(spec)
        if missing is not None:
            raise ProviderConfigError(missing)
        return provider, name

    def _provider_of(self, model: str) -> str:
        for name, spec in self.providers.items():
            if model == spec.default_model or model in spec.models:
                return name
        prefixes = {"deepseek": "deepseek", "gpt-": "openai", "claude": "anthropic"}
        for prefix, name in prefixes.items():
            if model.startswith(prefix):
                return name
        if model[:1] == "o" and model[1:2].isdigit():
            return "openai"
        raise ProviderConfigError(f"cannot tell the provider of {model!r}: use PROVIDER/MODEL")


def _install_hint(extra: str) -> str:
    """The command installing the SDK of ``extra``: its requirement as this steerloop
    declares it (for a checkout as much as for an installed wheel), and the extra's name."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        declared = requires("steerloop") or []
    except PackageNotFoundError:
        declared = []
    marker = f'extra == "{extra}"'
    found = [r.split(";")[0].strip() for r in declared if marker in r.replace("'", '"')]
    requirement = found[0] if found else extra
    return f"pip install '{requirement}', the extra steerloop[{extra}]"


class _LazyAdapter:
    """Builds the real adapter on first use, so the SDK is imported only when needed.

    A ``kind = "openai"`` provider at OpenAI's own endpoint sends the models the known-models
    table marks Responses-first (``steerloop.llm.openai.responses_first``) through
    ``OpenAIResponsesAdapter``, and every other model through chat completions; other
    OpenAI-compatible servers (DeepSeek, vLLM) may not speak Responses and are never switched.
    """

    def __init__(self, config: ProviderConfig, spec: ProviderSpec) -> None:
        self.spec = spec
        self._config = config
        self._key = config.api_key(spec)
        self._missing = config.missing_key(spec)
        self._adapters: dict[str, LlmAdapter] = {}

    def __repr__(self) -> str:
        return f"<{self.spec.kind} adapter for {self.spec.name!r} at {self.spec.base_url!r}>"

    def _failure(self, message: str) -> LlmError:
        return LlmError(LlmFailure(message=message, code="AUTH", retryable=False))

    def _import(self, kind: str) -> Any:
        path = _KINDS.get(kind, kind)
        module_name, _, attr = path.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            extra = _EXTRAS.get(kind)
            hint = f" ({_install_hint(extra)})" if extra else ""
            raise LlmError(
                LlmFailure(
                    message=f"provider {self.spec.name!r} is unavailable: {exc}{hint}",
                    code="NO_ADAPTER",
                    retryable=False,
                )
            ) from None

    def kind_for(self, model: str) -> str:
        """The adapter kind serving ``model`` (``openai-responses`` for Responses-first
        models of OpenAI's own endpoint, else the configured kind)."""
        kind = self.spec.kind
        if kind == "openai" and self.spec.base_url == _OPENAI_URL:
            from .openai import responses_first  # the SDK is imported only when needed

            if responses_first(model):
                return "openai-responses"
        return kind

    def _build(self, model: str) -> LlmAdapter:
        if self._missing is not None:
            raise self._failure(self._missing)
        kind = self.kind_for(model)
        adapter = self._adapters.get(kind)
        if adapter is None:
            cls = self._import(kind)
            kwargs: dict[str, Any] = {}
            if self.spec.headers:
                kwargs["default_headers"] = dict(self.spec.headers)
            if self.spec.timeout is not None:
                kwargs["timeout"] = self.spec.timeout
            if self.spec.models:
                kwargs["models"] = dict(self.spec.models)
            adapter = cls(base_url=self.spec.base_url, api_key=self._key, **kwargs)
            assert adapter is not None
            self._adapters[kind] = adapter
        return adapter

    async def resolve_model(self, provider: str, model: str) -> ModelInfo | None:
        info = await self._build(model).resolve_model(provider, model)
        cap = self._config.max_tokens_for(self.spec.name, model)
        if cap is None:
            return info
        info = info or ModelInfo()
        return replace(info, defaults={**info.defaults, "max_tokens": cap})

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        adapter = self._build(request.model)
        if request.max_tokens is None:
            cap = self._config.max_tokens_for(self.spec.name, request.model)
            if cap is not None:
                request = replace(request, max_tokens=cap)
        async for chunk in adapter.stream(request):
            yield chunk

    async def aclose(self) -> None:
        adapters, self._adapters = list(self._adapters.values()), {}
        for adapter in adapters:
            if isinstance(adapter, ClosableAdapter):
                await adapter.aclose()


_closing: set[asyncio.Task[None]] = set()


def register_providers(rt: Runtime, config: ProviderConfig) -> Disposer:
    """Register one lazily built adapter per configured provider.

    A provider whose key is missing is still registered, so a request routed to it fails
    with a message naming the variable to set (code ``AUTH``) instead of "no adapter".

    Returns:
        A ``Disposer`` that unregisters them and closes the adapters that were built.
    """
    adapters: list[_LazyAdapter] = []
    disposers: list[Disposer] = []
    for name, spec in config.providers.items():
        adapter = _LazyAdapter(config, spec)
        adapters.append(adapter)
        disposers.append(rt.llm.register_adapter([name], adapter))

    def dispose() -> None:
        for disposer in disposers:
            disposer()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for adapter in adapters:
            task = loop.create_task(adapter.aclose())
            _closing.add(task)
            task.add_done_callback(_closing.discard)

    return Disposer(dispose)
