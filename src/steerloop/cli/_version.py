"""The installed distribution's version, read from its metadata."""

from __future__ import annotations

__all__ = ["package_version"]


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("steerloop")
    except PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
        return "(not installed)"
