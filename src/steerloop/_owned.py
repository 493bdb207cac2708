"""Runtime-owned classes: calling the class is a ``TypeError`` naming the supported way.

``Agent``, ``Session`` and ``Inbox`` are created by the runtime (``rt.agents.create``, the
session registry, the agent) with collaborators a user cannot supply correctly; a direct
call is a mistake, so it fails at once and says what to do instead. Library code creates
them with ``Cls._create(...)``.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar, cast

__all__ = ["RuntimeOwned"]

_T = TypeVar("_T")


class RuntimeOwned(type):
    """Metaclass of the runtime-owned classes (``owned_hint`` says how to get one)."""

    owned_hint: str

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"{cls.__name__} objects are created by the runtime, not directly: "
            f"{getattr(cls, 'owned_hint', 'use the Runtime')}"
        )

    def _create(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        """Construct an instance (library code only)."""
        return cast("_T", type.__call__(cls, *args, **kwargs))
