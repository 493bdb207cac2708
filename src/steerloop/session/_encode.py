"""The lossless JSON form of payload values, with one encoder per class chosen once.

The per-dataclass encoders are generated source (``exec``): every event is encoded once on
its way to the store, and the generic loop over the fields was half of ``Session.append``.
This module is the only place that speed trick lives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..messages import (
    AssistantMessage,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    message_to_json,
)

__all__ = ["encode"]

_SCALARS = (str, int, float, bool)
_MESSAGES = (UserMessage, SystemMessage, AssistantMessage, ToolResultMessage)
_encoders: dict[type, Callable[[Any], Any]] = {}


def encode(value: Any) -> Any:
    """The lossless JSON form of a payload value."""
    if value is None or isinstance(value, _SCALARS):
        return value
    cls = type(value)
    encoder = _encoders.get(cls)
    if encoder is None:
        encoder = _encoders[cls] = _encoder_for(cls)
    return encoder(value)


def _encoder_for(cls: type) -> Callable[[Any], Any]:
    """One encoder per class, chosen once: the hot path is a dict lookup and a call."""
    if issubclass(cls, _MESSAGES):
        return message_to_json
    to_json = getattr(cls, "to_json", None)
    if to_json is not None:
        return to_json  # type: ignore[no-any-return]
    if dataclasses.is_dataclass(cls):
        return _fields_encoder(cls)
    if issubclass(cls, list | tuple):
        return lambda value: [encode(v) for v in value]
    if issubclass(cls, Mapping):
        return lambda value: {str(k): encode(v) for k, v in value.items()}

    def refuse(value: Any) -> Any:
        raise ValueError(f"{type(value).__name__} has no JSON form")

    return refuse


_PLAIN = frozenset((str, int, float, bool))


def _fields_encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    """An encoder written out for one dataclass: a field holding a plain scalar is copied
    without a call, ``None`` fields are left out, anything else goes through ``encode``.

    Every event is encoded once on its way to the store; the generic loop over the
    fields (``getattr`` and an ``encode`` call per field) was half of ``Session.append``.
    """
    lines = ["def encode_fields(value):", "    out = {}"]
    for f in dataclasses.fields(cls):
        if not f.name.isidentifier():  # pragma: no cover - dataclass fields always are
            raise TypeError(f"{cls.__name__}.{f.name} is not an identifier")
        lines += [
            f"    item = value.{f.name}",
            "    if item is not None:",
            f"        out[{f.name!r}] = item if item.__class__ in plain else encode(item)",
        ]
    lines.append("    return out")
    namespace: dict[str, Any] = {"plain": _PLAIN, "encode": encode}
    exec("\n".join(lines), namespace)
    function: Callable[[Any], dict[str, Any]] = namespace["encode_fields"]
    function.__qualname__ = f"encode_fields[{cls.__qualname__}]"
    return function
