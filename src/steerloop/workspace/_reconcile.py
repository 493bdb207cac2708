"""Whether a write of the file tools landed, told by the file alone (their ``reconcile``).

At recovery a ``write_file`` or ``edit`` whose outcome is unknown (the process died after
its ``tool/call`` was durable, before its result was) is checked against the file as it is
now. Only a file that shows the call's effect is reported as done; anything else — the old
content, a torn write, content changed since, a case the file cannot decide — stays unknown.

* ``write_file``: the SHA-256 of the file equals that of the content the call was to write.
* ``edit``: the file is the result of this edit applied to some text the edit would have
  accepted, and is not itself such a text (then the edit may still be to come). Its
  occurrences of ``new_string`` are tried as the replaced one; a check that would read more
  than ``MAX_WORK`` characters stays unknown (it is bounded).

``shell`` has no reconcile: a command's effects are whatever the command did, and nothing
left on disk tells whether it ran.
"""

from __future__ import annotations

import hashlib

__all__ = ["MAX_WORK", "edit_landed", "write_landed"]

MAX_WORK = 50_000_000
"""Characters an ``edit`` check may go through (candidates × file length) before it gives
up (unknown)."""


def write_landed(current: bytes, content: str) -> bool:
    """Whether a file holding ``current`` is what writing ``content`` left."""
    wanted = content.encode("utf-8")
    if len(current) != len(wanted):
        return False
    return hashlib.sha256(current).digest() == hashlib.sha256(wanted).digest()


def edit_landed(text: str, old: str, new: str, replace_all: bool) -> bool:
    """Whether ``text`` is what replacing ``old`` by ``new`` left (see the module note)."""
    if replace_all:
        # A text the edit accepts has at least one ``old``, and the edit leaves none unless
        # ``new`` brings it back: then a file with ``old`` cannot be told from one to come.
        if old in text or old in new:
            return False
        if not new:
            return True  # every ``old`` is gone, which is all this deletion does
        before = text.replace(new, old)
        return old in before and before.replace(old, new) == text
    if text.count(old) == 1:
        return False  # the edit would still apply to this very text: it may not have run
    starts = _occurrences(text, new, MAX_WORK // (len(text) + 1))
    if starts is None:
        return False
    for start in starts:
        before = text[:start] + old + text[start + len(new) :]
        if before.count(old) == 1 and before.replace(old, new) == text:
            return True
    return False


def _occurrences(text: str, needle: str, bound: int) -> list[int] | None:
    """Start offsets of ``needle`` in ``text`` (overlapping ones too); ``None`` when there
    are more than ``bound``."""
    if not needle:
        positions = len(text) + 1
        return list(range(positions)) if positions <= bound else None
    found: list[int] = []
    start = text.find(needle)
    while start != -1:
        if len(found) == bound:
            return None
        found.append(start)
        start = text.find(needle, start + 1)
    return found
