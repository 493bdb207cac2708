"""The layering of ``steerloop``: imports only point down, and no module imports itself back.

Every import counts, ``TYPE_CHECKING`` and function-local ones included: they are the graph a
reader and mypy see. The layers are the ones ``steerloop/__init__.py`` describes; a module of a
layer may import modules of its own layer or of lower ones, never of a higher one, and the graph
of all modules has no cycle (which also forbids cycles inside one layer).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "steerloop"

# Lowest first. A module belongs to the longest prefix that names it.
LAYERS: tuple[tuple[str, ...], ...] = (
    # primitives: errors, signal, ids, messages, the records the log and the model share, hooks
    (
        "steerloop.errors",
        "steerloop._signal",
        "steerloop._cancel",
        "steerloop._ids",
        "steerloop._records",
        "steerloop._hooks",
        "steerloop._owned",
        "steerloop._procs",
        "steerloop._redact",
        "steerloop._media",
        "steerloop._binary",
        "steerloop.messages",
        "steerloop._model",
    ),
    ("steerloop.session",),
    ("steerloop.llm",),
    ("steerloop.tools", "steerloop.prompt"),
    ("steerloop.agent",),
    ("steerloop._runtime",),
    ("steerloop",),  # the package facade re-exports the layers below it
    # plugins on the public hooks
    (
        "steerloop.llm.retry",
        "steerloop.llm.config",
        "steerloop.testing",
        "steerloop.goals",
        "steerloop.subagents",
        "steerloop.workspace",
        "steerloop.context",
        "steerloop.mcp",
        "steerloop.telemetry",
        "steerloop.service",
        "steerloop.evals",
    ),
    ("steerloop.cli",),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """``(imported steerloop module, line)`` for every import in ``path``, however nested."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield _nearest(alias.name, known), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: len(base_parts) - node.level + 1]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                # ``from pkg import submodule`` imports the submodule, not only the package.
                yield (sub if sub in known else _nearest(target, known)), node.lineno


def _nearest(name: str, known: dict[str, Path]) -> str:
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def _graph() -> dict[str, dict[str, int]]:
    known = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges = graph.setdefault(module, {})
        for target, line in _imports(module, path, known):
            if target != module:
                edges.setdefault(target, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        _layer_of(module)


def test_imports_only_point_down() -> None:
    """No module imports a module of a higher layer (``TYPE_CHECKING`` and lazy imports count)."""
    upward = [
        f"{module} (layer {_layer_of(module)}) imports {target} (layer {_layer_of(target)}) "
        f"at line {line}"
        for module, edges in sorted(_graph().items())
        for target, line in sorted(edges.items())
        if _layer_of(target) > _layer_of(module)
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b": 1}, "b": {"a": 1}}, [["a", "b"]]),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}, [["a", "b", "c"]]),
    ],
)
def test_cycle_finder(graph: dict[str, dict[str, int]], expected: list[list[str]]) -> None:
    """The checker itself: a cycle is found, a chain is not."""
    assert _cycles(graph) == expected


def test_upward_import_is_seen(tmp_path: Path) -> None:
    """The checker sees a ``TYPE_CHECKING`` import and a function-local one."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .._runtime import Runtime\n"
        "def f():\n"
        "    from ..agent import _driver\n",
        encoding="utf-8",
    )
    known = {"steerloop._runtime": source, "steerloop.agent._driver": source}
    found = list(_imports("steerloop.session.m", source, known))
    assert found == [("steerloop._runtime", 3), ("steerloop.agent._driver", 5)]
