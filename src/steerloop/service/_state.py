"""The app's state, typed: the settings ``create_app`` was given (fixed) and what the
lifespan opens (the host and the feed source), kept on ``app.state.service``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

from starlette.requests import Request

from .. import Runtime
from ..messages import AttachmentLimits
from ._api import ApiError, Host
from ._limits import Limits
from ._profile import Profile
from ._source import FeedSource

if TYPE_CHECKING:
    from ._operation import Operation

__all__ = [
    "ProfilesArg",
    "Role",
    "ServiceState",
    "Settings",
    "host_of",
    "source_of",
    "state_of",
]

Role = Literal["all", "api", "worker"]
ProfilesArg = (
    Sequence[Profile]
    | Callable[[Runtime], Sequence[Profile]]
    | Callable[[Runtime], Awaitable[Sequence[Profile]]]
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """What ``create_app`` was told, checked; ``ident`` is this process's worker id."""

    store: str | None
    profiles: ProfilesArg
    role: Role
    ident: str
    token: str | None
    idle_unload: float | None
    max_unconsumed: int
    retry: bool
    capacity: int
    drain_timeout: float
    body_limit: int
    """The most any body is read up to (what is not attachment data, for a message)."""
    message_limit: int
    """The most a body that may carry attachments is read up to (``body_limit_for``)."""
    attachments: AttachmentLimits
    ping_seconds: float
    send_timeout: float
    limits: Limits
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]

    @property
    def postgres(self) -> bool:
        """Whether the store is a shared PostgreSQL one (every role goes through it)."""
        return isinstance(self.store, str) and self.store.startswith(
            ("postgresql://", "postgres://")
        )


@dataclass(kw_only=True, slots=True)
class ServiceState:
    """One app's state. ``host`` and ``source`` are set by the lifespan (``_lifespan``)
    while it runs and are ``None`` before and after: requests then answer 503."""

    settings: Settings
    operations: tuple[Operation, ...]
    """The app's operation table: its routes and its OpenAPI document."""
    host: Host | None = field(default=None)
    source: FeedSource | None = field(default=None)


def state_of(request: Request) -> ServiceState:
    """The state of the app serving ``request`` (the innermost one when mounted)."""
    return cast(ServiceState, request.app.state.service)


def host_of(request: Request) -> Host:
    """The running host; 503 ``not_ready`` outside the lifespan."""
    host = state_of(request).host
    if host is None:
        raise ApiError(503, "not_ready", "the service is not running")
    return host


def source_of(request: Request) -> FeedSource:
    """The running feed source (``SharedFeeds``); 503 ``not_ready`` outside the lifespan."""
    source = state_of(request).source
    if source is None:
        raise ApiError(503, "not_ready", "the service is not running")
    return source
