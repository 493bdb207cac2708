"""Plugins are built on public names only: no module of a plugin package imports a private
module (a ``_name`` path component) of another package, whether at the top, under
``TYPE_CHECKING`` or inside a function. Its own package's private modules are its own.

The exceptions are listed with their reason; each must still be needed (a stale entry fails).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# The plugin layer of tests/test_layers.py: packages built on the runtime's public hooks.
PLUGINS = (
    "steerloop.context",
    "steerloop.evals",
    "steerloop.goals",
    "steerloop.llm.config",
    "steerloop.llm.retry",
    "steerloop.mcp",
    "steerloop.service",
    "steerloop.subagents",
    "steerloop.telemetry",
    "steerloop.testing",
    "steerloop.workspace",
)
# (plugin, private module) -> why the plugin may reach it.
ALLOWED: dict[tuple[str, str], str] = {
    ("steerloop.service", "steerloop.session._json"): (
        "the stores' JSON codec (orjson, depth-bounded, lone surrogates kept): the service's "
        "rows and frames must round-trip exactly as the log's do"
    ),
    ("steerloop.service", "steerloop.session.store.postgres._schema"): (
        "the PostgreSQL host's tables live in the store's migrations until the store takes a "
        "component's migrations (issue 25, the floor plan)"
    ),
    ("steerloop.service", "steerloop.session.store.postgres._store"): (
        "the PostgreSQL host shares the store's feed channel and its payload format "
        "(FEED_CHANNEL, parse_feed_payload) to follow appends"
    ),
    ("steerloop.service", "steerloop.session.store.postgres._writer"): (
        "a worker writes a resident session's log through the store's writer under its lease"
    ),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _files(plugin: str) -> list[Path]:
    base = SRC.joinpath(*plugin.split("."))
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def _imported(module: str, is_package: bool, source: str) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import in ``source`` (the text of ``module``),
    however nested; a name imported from a package counts as its submodule when it is one."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source, filename=module)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:
                if SRC.joinpath(*f"{target}.{alias.name}".split(".")).with_suffix(".py").exists():
                    yield f"{target}.{alias.name}", node.lineno


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _violations() -> tuple[list[str], set[tuple[str, str]]]:
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for plugin in PLUGINS:
        for path in _files(plugin):
            module = _module_name(path)
            source = path.read_text(encoding="utf-8")
            for target, line in _imported(module, path.name == "__init__.py", source):
                own = target == plugin or target.startswith(plugin + ".")
                if own or target.split(".")[0] != "steerloop" or not _is_private(target):
                    continue
                if (plugin, target) in ALLOWED:
                    used.add((plugin, target))
                else:
                    found.append(f"{module}:{line} imports {target}")
    return found, used


def test_plugins_import_no_private_module_of_another_package() -> None:
    found, used = _violations()
    assert found == []
    assert set(ALLOWED) - used == set(), "allow-list entries no longer needed"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_scan_sees_every_kind_of_import() -> None:
    """Relative imports resolve, function-local and ``TYPE_CHECKING`` ones count, and a
    private submodule imported from its package is named."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..session._session import Session\n"
        "def f():\n"
        "    from ..agent import _agent\n"
        "    import steerloop._hooks\n"
        "from . import _plan\n"
    )
    targets = {target for target, _ in _imported("steerloop.context._x", False, source)}
    assert {
        "steerloop.session._session",
        "steerloop.agent._agent",
        "steerloop._hooks",
        "steerloop.context._plan",
    } <= targets
    assert not _is_private("steerloop.session.events")
