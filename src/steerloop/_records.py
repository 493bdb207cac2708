"""Faster construction for the frozen, slotted records on the hot paths.

A frozen dataclass's generated ``__init__`` routes every field through
``object.__setattr__``; on this runtime's per-event and per-chunk paths that dominates.
``fast_init`` swaps in an ``__init__`` with the same signature that writes each slot
through its member descriptor. Equality, hashing, ``repr``, immutability and
``dataclasses.replace`` are untouched (they never go through ``__init__``'s internals).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init"]

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen slots dataclass ``cls`` a faster ``__init__``; returns ``cls``.

    Classes with ``__post_init__`` or ``default_factory`` fields are left as they are.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen slots dataclass")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or any(
        f.default_factory is not dataclasses.MISSING for f in fields
    ):
        return cls
    namespace: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        setter = f"_set_{f.name}"
        namespace[setter] = getattr(cls, f.name).__set__
        default = f"_default_{f.name}"
        if f.default is not dataclasses.MISSING:
            namespace[default] = f.default
        if not f.init:
            body.append(f"    {setter}(self, {default})")
            continue
        param = f.name if f.default is dataclasses.MISSING else f"{f.name}={default}"
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    {setter}(self, {f.name})")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({signature}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 - replacing a method on purpose
    return cls
