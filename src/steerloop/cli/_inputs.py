"""Input requests on the terminal: how a server's question reads, and how a typed line
answers it (``agent.answer_input``, ``by="terminal"``).

A form answer is a JSON object, or ``key=value`` words (values converted by the schema: a
number, ``true``/``false``, comma-separated lists), or, for a form of one field, just the
value. Fields left out take the schema's defaults. ``decline`` and ``cancel`` answer so; a
URL request or a sampling request is answered ``y`` (accept) or ``n`` (decline).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from ..errors import InputError
from ..session._input_events import InputAction, InputRequest

__all__ = ["INPUT_BY", "answer_line", "describe_request", "prompt_label"]

#: ``input/answered.by`` of an answer typed in the terminal.
INPUT_BY = "terminal"

_YES = ("y", "yes", "accept", "ok")
_NO = ("n", "no", "decline")


def _fields(request: InputRequest) -> Mapping[str, Any]:
    properties = (request.schema or {}).get("properties")
    return properties if isinstance(properties, Mapping) else {}


def describe_request(request: InputRequest) -> str:
    """The question as the terminal shows it: who asks, what, the fields, how to answer."""
    head = f"MCP server {request.server!r} asks: {request.message}"
    if request.kind == "sampling":
        return f"{head}\n  answer y to let it use the model, n to refuse"
    if request.url is not None:
        return f"{head}\n  open {request.url}\n  answer y when done, n to decline, cancel"
    required = set((request.schema or {}).get("required", ()))
    rows = []
    for name, spec in _fields(request).items():
        spec = spec if isinstance(spec, Mapping) else {}
        kind = spec.get("type", "any")
        if "enum" in spec:
            kind = " | ".join(str(v) for v in spec["enum"])
        elif "oneOf" in spec:
            kind = " | ".join(str(o.get("const")) for o in spec["oneOf"] if isinstance(o, Mapping))
        notes = [kind, "required" if name in required else "optional"]
        if "default" in spec:
            notes.append(f"default {json.dumps(spec['default'])}")
        about = spec.get("description") or spec.get("title") or ""
        rows.append(f"  {name} ({', '.join(notes)}){': ' + about if about else ''}")
    how = "  answer key=value … (or a JSON object), or decline / cancel"
    return "\n".join([head, *rows, how])


def prompt_label(request: InputRequest) -> str:
    return "allow? [y/N] ❯ " if request.kind == "sampling" or request.url else "answer ❯ "


def _convert(spec: Any, text: str) -> Any:
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "boolean":
        if text.lower() in ("true", "yes", "y", "1"):
            return True
        if text.lower() in ("false", "no", "n", "0"):
            return False
        raise ValueError(f"{text!r} is not true or false")
    if kind == "array":
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _content(request: InputRequest, line: str) -> dict[str, Any]:
    fields = _fields(request)
    if line.startswith("{"):
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError("a JSON answer must be an object")
        content: dict[str, Any] = value
    elif len(fields) == 1 and "=" not in line:
        (name,) = fields
        content = {name: _convert(fields[name], line)} if line else {}
    else:
        content = {}
        for word in shlex.split(line):
            name, sep, text = word.partition("=")
            if not sep or name not in fields:
                raise ValueError(f"{word!r}: write key=value with a key of the form")
            content[name] = _convert(fields[name], text)
    for name, spec in fields.items():
        if name not in content and isinstance(spec, Mapping) and "default" in spec:
            content[name] = spec["default"]
    return content


def answer_line(agent: Any, request: InputRequest, line: str) -> str | None:
    """Answer ``request`` with the typed ``line``; the reason it could not, or ``None``."""
    word = line.strip().lower()
    action: InputAction
    content: dict[str, Any] | None = None
    if word == "cancel":
        action = "cancel"
    elif word in _NO:
        action = "decline"
    elif request.kind == "sampling" or request.url is not None or request.schema is None:
        if word not in _YES:
            return "answer y or n (or cancel)"
        action = "accept"
    else:
        action = "accept"
        try:
            content = _content(request, line.strip())
        except ValueError as exc:
            return str(exc)
    try:
        agent.answer_input(request.id, action, content, by=INPUT_BY)
    except (ValueError, InputError) as exc:
        return str(exc)
    return None
