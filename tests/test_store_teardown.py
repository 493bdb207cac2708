"""Every test that opens a store closes it even when it fails (issue 28).

A SQLite store runs a writer thread and a PostgreSQL store a pool; a test that fails (a
bounded wait timing out under load) before its ``close()`` leaves them behind: writer threads
in the next test's timeout dump, connections held. So a test that binds a store or a runtime
over one (``X = await Runtime.open(store=...)``, ``X = SqliteStore(...)``,
``X = PostgresStore(...)``) and then waits with a bound (``settle``, ``within``,
``wait_for``, ``asyncio.timeout``: what fails under load) closes ``X`` in a ``finally`` (or
opens it in ``async with``). A helper that returns or yields ``X`` hands it to its caller;
child-process scripts (``_*.py``, killed on purpose) are exempt.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
OPENERS = {"SqliteStore", "PostgresStore"}
BOUNDED = {"settle", "within", "wait_for", "timeout", "wait_for_log", "run"}


def _opener(node: ast.AST) -> bool:
    if isinstance(node, ast.Await):
        node = node.value
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in OPENERS
    if isinstance(func, ast.Attribute):
        if func.attr in OPENERS:
            return True
        is_runtime = isinstance(func.value, ast.Name) and func.value.id == "Runtime"
        return is_runtime and func.attr == "open" and any(k.arg == "store" for k in node.keywords)
    return False


def _closed_in_finally(function: ast.AST, name: str) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Try):
            for statement in node.finalbody:
                for inner in ast.walk(statement):
                    if (
                        isinstance(inner, ast.Attribute)
                        and inner.attr in ("close", "aclose", "dispose")
                        and isinstance(inner.value, ast.Name)
                        and inner.value.id == name
                    ):
                        return True
    return False


def _waits(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in BOUNDED:
                return True
    return False


def _handed_over(function: ast.AST, name: str) -> bool:
    for node in ast.walk(function):
        value = node.value if isinstance(node, ast.Return | ast.Yield) else None
        if value is not None and any(
            isinstance(n, ast.Name) and n.id == name for n in ast.walk(value)
        ):
            return True
    return False


def unguarded() -> Iterator[str]:
    for path in sorted(TESTS.rglob("*.py")):
        if path.name.startswith("_") and path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not _waits(function):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Assign) or not _opener(node.value):
                    continue
                for target in node.targets:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    for name in names:
                        if (
                            isinstance(name, ast.Name)
                            and not _closed_in_finally(function, name.id)
                            and not _handed_over(function, name.id)
                        ):
                            where = path.relative_to(TESTS.parent)
                            yield f"{where}:{node.lineno} {function.name}: {name.id}"


def test_every_store_a_test_opens_is_closed_in_a_finally() -> None:
    assert list(unguarded()) == []
