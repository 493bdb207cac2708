"""What ``steerloop --version`` and ``--help`` import (issue 28): typer and the command line's
own modules, never the runtime, rich, pydantic, asyncio or a provider SDK. Pinned by module
name, not by time (``bench/cli_start.py`` measures the time).

A command imports what it needs inside its function (``cli/_app.py``); a module imported by
``cli/_app.py`` at its top is imported by every command, ``--version`` included: adding one
here is a deliberate choice.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Every steerloop module ``steerloop --version`` and ``--help`` load.
STARTUP_MODULES = [
    "steerloop",
    "steerloop.cli",
    "steerloop.cli._app",
    "steerloop.cli._mcp",
    "steerloop.cli._mcp_table",
    "steerloop.cli._version",
]
#: Packages whose import would make the start slow (each costs tens to hundreds of ms).
NEVER = [
    "anthropic",
    "asyncio",
    "httpx",
    "jsonschema",
    "mcp",
    "openai",
    "orjson",
    "prompt_toolkit",
    "pydantic",
    "re2",
    "rich",
    "sqlite3",
    "starlette",
]

PROBE = """
import json, sys
before = set(sys.modules)
sys.argv = ["steerloop", *json.loads(sys.argv[1])]
from steerloop.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def loaded(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


#: What ``steerloop --version`` loads: it is answered before typer is imported.
VERSION_MODULES = ["steerloop", "steerloop.cli", "steerloop.cli._version"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [(("--version",), VERSION_MODULES), (("--help",), STARTUP_MODULES)],
)
def test_the_start_imports_only_the_command_lines_own_modules(
    args: tuple[str, ...], expected: list[str]
) -> None:
    modules = loaded(*args)
    assert [m for m in modules if m.split(".")[0] == "steerloop"] == expected
    assert not [m for m in modules if m.split(".")[0] in NEVER]


def test_version_loads_no_typer_and_prints_what_the_option_prints() -> None:
    """The fast answer is the one ``--version`` among other options gives (typer's eager
    option), exit status 0 both ways."""
    fast = loaded("--version")
    assert not [m for m in fast if m.split(".")[0] in ("typer", "click")]
    run = [sys.executable, "-c", "from steerloop.cli import main; main()"]
    alone = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=60)
    probe = "import sys; sys.argv[0] = 'steerloop'; from steerloop.cli import app; app()"
    through_typer = subprocess.run(
        [sys.executable, "-c", probe, "--version", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert alone.returncode == through_typer.returncode == 0
    assert alone.stdout == through_typer.stdout
    assert alone.stdout.startswith("steerloop ")


def test_a_commands_help_loads_none_of_its_implementation() -> None:
    """(typer itself builds pydantic adapters for the options of the command it shows.)"""
    modules = loaded("run", "--help")
    assert [m for m in modules if m.split(".")[0] == "steerloop"] == STARTUP_MODULES


def test_the_public_names_load_on_first_use() -> None:
    """``import steerloop`` loads nothing of the runtime; the first public name loads them
    all, with their public module name (``steerloop.Runtime``)."""
    probe = (
        "import sys, steerloop\n"
        "print('steerloop._runtime' in sys.modules)\n"
        "from steerloop import Tool\n"
        "print('steerloop._runtime' in sys.modules, Tool.__module__, steerloop.Runtime.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert out == ["False", "True", "steerloop", "steerloop"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        import steerloop

        steerloop.nope  # noqa: B018
