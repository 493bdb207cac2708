"""The ``steerloop`` command line (typer + rich + prompt_toolkit)."""

from ._app import app, main

__all__ = ["app", "main"]
