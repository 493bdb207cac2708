"""CLI settings: ``steerloop.toml`` in the project, else ``~/.config/steerloop/config.toml``."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._mcp import parse_mcp_table

__all__ = ["Settings", "default_store_url", "load_settings"]


def _data_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME")
    return Path(base) if base else Path.home() / ".local" / "share"


def _config_home() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME")
    return Path(base) if base else Path.home() / ".config"


def default_store_url() -> str:
    """The embedded store under the XDG data directory."""
    return f"sqlite:///{_data_home() / 'steerloop' / 'sessions.db'}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the command line runs with; every field has a default."""

    store: str = field(default_factory=default_store_url)
    model: str | None = None
    persona: str = "You are a helpful, concise assistant working in the user's project."
    max_parallel_tool_calls: int = 10
    approve: str = "ask"
    providers: dict[str, Any] = field(default_factory=dict)
    #: ``[mcp.servers.NAME]`` tables, checked (see ``_mcp.parse_mcp_table``).
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: Path | None = None


_KEYS = {"store", "model", "persona", "max_parallel_tool_calls", "approve", "providers", "mcp"}


def load_settings(cwd: Path | None = None) -> Settings:
    """Read the first config file found; raises ``ValueError`` for an invalid one."""
    cwd = cwd or Path.cwd()
    for path in (cwd / "steerloop.toml", _config_home() / "steerloop" / "config.toml"):
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"{path}: {exc}") from None
            unknown = set(data) - _KEYS
            if unknown:
                raise ValueError(f"{path}: unknown setting(s) {', '.join(sorted(unknown))}")
            parallel = data.get("max_parallel_tool_calls", 10)
            if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
                raise ValueError(f"{path}: max_parallel_tool_calls must be a positive integer")
            if data.get("approve", "ask") not in ("ask", "auto", "read-only"):
                raise ValueError(f"{path}: approve must be ask, auto or read-only")
            store = data.get("store", default_store_url())
            return Settings(
                store=str(store),
                model=data.get("model"),
                persona=str(data.get("persona", Settings().persona)),
                max_parallel_tool_calls=parallel,
                approve=data.get("approve", "ask"),
                providers=dict(data.get("providers", {})),
                mcp_servers=parse_mcp_table(path, data.get("mcp")),
                source=path,
            )
    return Settings()
