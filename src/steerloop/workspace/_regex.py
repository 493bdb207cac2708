"""Pattern matching the model controls: RE2 for ``grep`` regexes and for globs.

Why RE2 (the ``google-re2`` package) and not Python's ``re``: a backtracking engine takes
exponential time on patterns such as ``(a+)+$`` and holds the GIL meanwhile, so one grep call
stalls the event loop, every agent, the store writers and the lease heartbeats. RE2 matches in
time linear in the text, so no pattern can stall anything; the price is the features that need
backtracking (lookaround, backreferences), which are refused as ``INVALID_PATTERN`` with a
message the model can act on. A subprocess running ``re`` would keep those features but costs
a process per call and a kill path; the refusal is the smaller surface.
"""

from __future__ import annotations

from typing import Protocol

import re2  # type: ignore[import-untyped]

from ._paths import INVALID_PATTERN, WorkspaceError

__all__ = ["Matcher", "compile_glob", "compile_regex"]


class Matcher(Protocol):
    """What the tools use of a compiled RE2 pattern."""

    def search(self, text: str) -> object | None: ...

    def fullmatch(self, text: str) -> object | None: ...


def _options(*, ignore_case: bool = False, dot_nl: bool = False) -> object:
    options = re2.Options()
    options.log_errors = False  # the refusal is reported to the model, not on stderr
    options.case_sensitive = not ignore_case
    options.dot_nl = dot_nl
    return options


def compile_regex(pattern: str, *, ignore_case: bool = False) -> Matcher:
    """``pattern`` compiled with RE2 (linear-time matching).

    Raises:
        WorkspaceError: ``INVALID_PATTERN`` for a syntax error or a feature RE2 lacks.
    """
    try:
        matcher: Matcher = re2.compile(pattern, _options(ignore_case=ignore_case))
    except re2.error as exc:
        raise WorkspaceError(
            INVALID_PATTERN,
            f"invalid regex {pattern!r}: {_message(exc)} (RE2 syntax: no lookaround or "
            "backreferences)",
        ) from None
    return matcher


def compile_glob(pattern: str) -> Matcher:
    """A glob over ``/``-separated relative paths as an RE2 pattern (use ``fullmatch``).

    ``*`` and ``?`` stay within one path segment, ``**/`` matches any number of directories
    (zero included), a trailing ``**`` everything below, ``[abc]``/``[!abc]`` a character class.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                if pattern.startswith("**/", i):
                    out.append("(?:.*/)?")
                    i += 3
                else:
                    out.append(".*")
                    i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re2.escape(c))
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\").replace("[", "\\[")
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(re2.escape(c))
        i += 1
    try:
        matcher: Matcher = re2.compile("".join(out), _options(dot_nl=True))
    except re2.error as exc:
        raise WorkspaceError(
            INVALID_PATTERN, f"invalid glob {pattern!r}: {_message(exc)}"
        ) from None
    return matcher


def _message(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
