"""Profiles: how a served session's agent is built (``--profiles MODULE:ATTR``)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from ..agent import AgentOptions, validate_call

if TYPE_CHECKING:
    from .. import Runtime

__all__ = ["ORIGIN_KIND", "Profile", "load_profiles", "origin_setup"]

OnTakeover = Literal["continue", "idle"]
ORIGIN_KIND = "service"
"""``header.origin.kind`` of a session a service made (its profile and version beside it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A named recipe for a session's agent: its options, an optional ``setup(scope)`` and a
    version stored with every session built from it (a worker serves a session only if it
    has the profile at that version). ``call``: request options sent on every request of
    its sessions, over the ``call`` of ``options`` (``options.call`` holds both after
    construction)."""

    name: str
    options: AgentOptions
    setup: Callable[[Any], Any] | None = None
    version: int = 1
    on_takeover: OnTakeover = "continue"
    call: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 200:
            raise ValueError(f"profile name must be a non-empty string, not {self.name!r}")
        if not isinstance(self.options, AgentOptions):
            raise ValueError(f"profile {self.name!r}: options must be AgentOptions")
        if self.call is not None:
            try:
                validate_call(self.call, "call")
            except ValueError as exc:
                raise ValueError(f"profile {self.name!r}: {exc}") from None
            merged = {**(self.options.call or {}), **self.call}
            object.__setattr__(self, "options", replace(self.options, call=merged))
        if type(self.version) is not int or self.version < 1:
            raise ValueError(f"profile {self.name!r}: version must be an integer >= 1")
        if self.on_takeover not in ("continue", "idle"):
            raise ValueError(
                f"profile {self.name!r}: on_takeover must be 'continue' or 'idle', "
                f"not {self.on_takeover!r}"
            )


def check_profiles(profiles: Sequence[Profile]) -> dict[str, Profile]:
    """The profiles by name; raises ``ValueError`` for a non-profile or a repeated name."""
    by_name: dict[str, Profile] = {}
    for profile in profiles:
        if not isinstance(profile, Profile):
            raise ValueError(f"not a Profile: {profile!r}")
        if profile.name in by_name:
            raise ValueError(f"profile {profile.name!r} is given twice")
        by_name[profile.name] = profile
    return by_name


async def load_profiles(spec: str, rt: Runtime) -> dict[str, Profile]:
    """Resolve ``MODULE:ATTR``: a sequence of ``Profile``, or a callable ``(rt) -> sequence``
    called once with this process's runtime; the callable may be ``async def`` (so it can
    ``await install_mcp(...)`` and the like), its result is awaited.

    Raises:
        ValueError: a malformed spec, a missing module or attribute, or a wrong result.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--profiles must be MODULE:ATTR, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--profiles: cannot import {module_name!r}: {exc}") from None
    try:
        found: Any = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"--profiles: {module_name!r} has no attribute {attr!r}") from None
    if callable(found):
        found = found(rt)
        if inspect.isawaitable(found):
            found = await found
    if isinstance(found, Profile) or not isinstance(found, Sequence) or isinstance(found, str):
        raise ValueError(f"--profiles {spec}: expected a sequence of Profile, got {found!r}")
    return check_profiles(found)


def origin_setup(profile: Profile, meta: dict[str, Any] | None) -> Callable[[Any], Any]:
    """The profile's setup, after recording the profile in a new session's header."""

    def setup(scope: Any) -> Any:
        header = scope.agent.session.header
        if "origin" not in header:  # a resumed session keeps the profile it was made with
            origin: dict[str, Any] = {
                "kind": ORIGIN_KIND,
                "profile": profile.name,
                "profile_version": profile.version,
            }
            if meta:
                origin["meta"] = meta
            header["origin"] = origin
        return profile.setup(scope) if profile.setup is not None else None

    return setup
