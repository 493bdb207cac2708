"""CLI settings: ``steerloop.toml`` in the project, else ``~/.config/steerloop/config.toml``.

Each top-level key has one reader in ``_READERS`` (raw TOML value → field value, raising
``ValueError`` with what is wrong); a new setting is one entry there and one field.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._mcp_table import parse_mcp_table

__all__ = ["Settings", "default_store_url", "load_settings", "store_url"]


def _data_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME")
    return Path(base) if base else Path.home() / ".local" / "share"


def _config_home() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME")
    return Path(base) if base else Path.home() / ".config"


def default_store_url() -> str:
    """The embedded store under the XDG data directory."""
    return f"sqlite:///{_data_home() / 'steerloop' / 'sessions.db'}"


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def store_url(value: str, base: Path | None = None) -> str:
    """A store URL; a bare file path (no ``scheme:``) means an SQLite database there
    (a relative one is taken from ``base``, else from the working directory)."""
    if _SCHEME.match(value):
        return value
    path = Path(value).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return f"sqlite:///{path.resolve()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the command line runs with; every field has a default."""

    store: str = field(default_factory=default_store_url)
    model: str | None = None
    persona: str = "You are a helpful, concise assistant working in the user's project."
    max_parallel_tool_calls: int = 10
    max_tokens: int | None = None  # cap on output tokens per request
    approve: str = "ask"
    providers: dict[str, Any] = field(default_factory=dict)
    #: ``[request]``: request options of every request (``AgentOptions.call``).
    request: dict[str, Any] = field(default_factory=dict)
    #: ``[mcp.servers.NAME]`` tables, checked (see ``_mcp.parse_mcp_table``).
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: Path | None = None


def _positive_int(name: str) -> Callable[[Any], int]:
    def read(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**53:
            raise ValueError(f"{name} must be a positive integer")
        return value

    return read


def _string(name: str) -> Callable[[Any], str]:
    def read(value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
        return value

    return read


def _approve(value: Any) -> str:
    if value not in ("ask", "auto", "read-only"):
        raise ValueError("approve must be ask, auto or read-only")
    return str(value)


def _table(name: str) -> Callable[[Any], dict[str, Any]]:
    def read(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ValueError(f"{name} must be a table")
        return dict(value)

    return read


def _request(value: Any) -> dict[str, Any]:
    from ..agent._options import validate_call

    if not isinstance(value, dict):
        raise ValueError("request must be a table")
    validate_call(value, "request")
    return dict(value)


_READERS: dict[str, Callable[[Any], Any]] = {
    "store": _string("store"),
    "model": _string("model"),
    "persona": _string("persona"),
    "max_parallel_tool_calls": _positive_int("max_parallel_tool_calls"),
    "max_tokens": _positive_int("max_tokens"),
    "approve": _approve,
    "providers": _table("providers"),
    "request": _request,
    "mcp": lambda value: value,  # checked by parse_mcp_table, which names the file
}


def load_settings(cwd: Path | None = None) -> Settings:
    """Read the first config file found; raises ``ValueError`` for an invalid one."""
    cwd = cwd or Path.cwd()
    for path in (cwd / "steerloop.toml", _config_home() / "steerloop" / "config.toml"):
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"{path}: {exc}") from None
            unknown = set(data) - set(_READERS)
            if unknown:
                raise ValueError(f"{path}: unknown setting(s) {', '.join(sorted(unknown))}")
            values: dict[str, Any] = {}
            for key, raw in data.items():
                try:
                    values[key] = _READERS[key](raw)
                except ValueError as exc:
                    raise ValueError(f"{path}: {exc}") from None
            if "store" in values:  # a relative path is relative to the file that names it
                values["store"] = store_url(values["store"], path.parent)
            if "mcp" in values:
                values["mcp_servers"] = parse_mcp_table(path, values.pop("mcp"))
            return Settings(**values, source=path)
    return Settings()
