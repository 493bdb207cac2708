"""Text the service accepts: no NUL (PostgreSQL ``text`` and ``jsonb`` cannot hold it) and no
lone surrogate (it is not Unicode text: no UTF-8 encoder can write it back out)."""

from __future__ import annotations

from typing import Any

from ._errors import ApiError

__all__ = ["check_text", "check_texts", "text_problem"]


def text_problem(value: str) -> str | None:
    """What makes ``value`` unacceptable as text, or ``None``."""
    if "\x00" in value:
        return "contains a NUL character"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone surrogate (not Unicode text)"
    return None


def _first_problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first ``(path, problem)`` among every string of a JSON value, keys included."""
    if isinstance(value, str):
        problem = text_problem(value)
        return None if problem is None else (path, problem)
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_problem(key, f"{path} (a key)") or _first_problem(
                item, f"{path}.{key[:40]}"
            )
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            found = _first_problem(item, f"{path}[{n}]")
            if found is not None:
                return found
    return None


def check_texts(value: Any, where: str) -> None:
    """Refuse a JSON value holding a string that is not acceptable text.

    Raises:
        ApiError: 422 ``invalid_text`` naming the field.
    """
    found = _first_problem(value, "")
    if found is not None:
        path, problem = found
        raise ApiError(422, "invalid_text", f"{where}{path} {problem}".strip())


def check_text(value: str | None, where: str) -> None:
    """``check_texts`` for one optional string."""
    if value is not None:
        check_texts(value, where)
