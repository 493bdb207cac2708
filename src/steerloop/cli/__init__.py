"""The ``steerloop`` command line (typer + rich + prompt_toolkit).

``main`` answers ``steerloop --version`` before typer is imported (typer and click cost more
than the interpreter's own start: ``bench/cli_start.py``); ``app`` is loaded on first use.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``steerloop`` script."""
    if sys.argv[1:] == ["--version"]:
        from ._version import package_version

        print(f"steerloop {package_version()}")
        return
    from ._app import main as run

    run()


def __getattr__(name: str) -> Any:
    if name == "app":
        from ._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
