"""Pins of the service's floor plan (docs/ARCHITECTURE.md "The service"): both hosts are a
``Host``; the PostgreSQL side never imports the in-process host; the store carries none of
the service's tables."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import steerloop.service as service
from steerloop.service._api import Host
from steerloop.service._local import LocalHost
from steerloop.service._pg._host import PgHost

SERVICE = Path(service.__file__).parent


def both_hosts_are_hosts(local: LocalHost, pg: PgHost) -> tuple[Host, Host]:
    """mypy (strict, on tests too) checks each host against the protocol here."""
    return local, pg


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, relative ones resolved inside ``steerloop``."""
    package = ".".join(path.relative_to(SERVICE.parent.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
            module = ".".join([*base, node.module] if node.module else base)
            found.add(module if node.level else node.module or "")
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_no_pg_module_imports_the_in_process_host() -> None:
    """``_pg`` takes its vocabulary from ``_api`` and its commands from ``_commands``."""
    pg_modules = sorted((SERVICE / "_pg").glob("*.py"))
    assert len(pg_modules) >= 10
    for path in pg_modules:
        imported = _imports(path)
        local = {m for m in imported if m.startswith("steerloop.service._local")}
        assert local == set(), f"{path.name} imports {sorted(local)}"
        assert "steerloop.service._host" not in imported


def test_the_store_carries_no_table_of_the_service() -> None:
    """The service's tables are its own migrations (``_pg/_schema.py``)."""
    store_schema = SERVICE.parent / "session" / "store" / "postgres" / "_schema.py"
    text = store_schema.read_text()
    for table in ("steerloop_workers", "steerloop_specs", "steerloop_commands", "wakeups"):
        assert table not in text
    assert "steerloop_specs" in (SERVICE / "_pg" / "_schema.py").read_text()


def test_the_worker_stamps_leases_through_the_store_seam() -> None:
    """No assignment to ``store.owner_key`` from outside the store."""
    for path in SERVICE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    assert not (isinstance(target, ast.Attribute) and target.attr == "owner_key"), (
                        f"{path.name}:{node.lineno} sets owner_key"
                    )


_SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE|ALTER|DROP)\b")
SQL_HOMES = {"_pg/_sql.py", "_pg/_schema.py"}


def sql_literals(path: Path) -> list[tuple[int, str]]:
    """String literals (f-string parts included) of ``path`` that hold SQL, docstrings and
    other bare string statements left out."""
    tree = ast.parse(path.read_text())
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in prose
            and _SQL.search(node.value)
        ):
            found.append((node.lineno, node.value.strip()[:60]))
    return found


def test_sql_lives_only_in_the_sql_and_schema_modules() -> None:
    """Every statement of the service is a named one of ``_pg/_sql.py`` (or a migration of
    ``_pg/_schema.py``); callers use the names, never SQL strings."""
    stray = {
        str(path.relative_to(SERVICE)): found
        for path in sorted(SERVICE.rglob("*.py"))
        if str(path.relative_to(SERVICE)) not in SQL_HOMES and (found := sql_literals(path))
    }
    assert stray == {}
    assert len(sql_literals(SERVICE / "_pg" / "_sql.py")) >= 40


MAX_FUNCTION_LINES = 60


def long_functions(path: Path) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_of_the_service_is_over_60_lines() -> None:
    """One concern per function (STYLE.md): a longer one is split by concept."""
    found = {
        str(path.relative_to(SERVICE)): long
        for path in sorted(SERVICE.rglob("*.py"))
        if (long := long_functions(path))
    }
    assert found == {}
