"""One record per HTTP operation (``Operation``): the app's routes (``_dispatch``) and its
OpenAPI document (``_openapi``) are both built from one table of them (``_routes``), so
neither can name a route the other lacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from ._answers import Accepted
from ._api import Host

__all__ = [
    "Answer",
    "Handler",
    "OpenHandler",
    "Operation",
    "Param",
    "body_model",
    "command",
]

Handler = Callable[[Request, Host], Awaitable[Response]]
"""An API endpoint: the request and the running host → the answer; refusals raise."""
OpenHandler = Callable[[Request], Awaitable[Response]]
"""An endpoint that needs neither the token nor the host (``/healthz``, ``/openapi.json``)."""
BodyModel = type[BaseModel] | Callable[[], type[BaseModel]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Param:
    """A query or header parameter an operation reads."""

    name: str
    where: Literal["query", "header"]
    description: str
    pattern: str | None = None
    """A string parameter's pattern; ``None``: an integer of at least ``minimum``."""
    minimum: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """One success answer: its status, its JSON model (``None``: no JSON body, see
    ``media``), and the headers it carries."""

    status: int
    description: str
    model: type[BaseModel] | None = None
    media: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    """``(name, description)`` of each header it carries."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Operation:
    """An HTTP operation: where it is, what runs it, and what it reads and answers.

    Exactly one of ``handler`` (behind the token, given the host) and ``public`` (open, like
    ``/healthz``) is set. ``errors``: the error statuses of this operation itself; the ones
    every guarded operation may answer (401, 403, 503, ...) are added by ``_openapi``.
    """

    method: Literal["GET", "POST"]
    path: str
    """A Starlette path (``{session_id:str}`` convertors)."""
    summary: str
    handler: Handler | None = None
    public: OpenHandler | None = None
    body: BodyModel | None = None
    """The body's model, or a function that imports it (a model of a module loaded late)."""
    body_optional: bool = False
    answers: tuple[Answer, ...] = ()
    errors: frozenset[int] = frozenset()
    params: tuple[Param, ...] = ()
    streams: bool = False
    """Answers ``text/event-stream`` (never ends by itself: left out of fuzzing)."""

    def __post_init__(self) -> None:
        if (self.handler is None) == (self.public is None):
            raise ValueError(f"{self.method} {self.path}: one of handler and public")


def body_model(op: Operation) -> type[BaseModel] | None:
    """The model of ``op``'s request body (imported now if ``op`` names it by a function)."""
    if op.body is None or isinstance(op.body, type):
        return op.body
    return op.body()


def command(
    path: str,
    summary: str,
    handler: Handler,
    body: type[BaseModel],
    errors: frozenset[int],
    *,
    body_optional: bool = False,
) -> Operation:
    """A POST that queues a command of a session: 202 ``Accepted`` once it is durable."""
    return Operation(
        method="POST",
        path=path,
        summary=summary,
        handler=handler,
        body=body,
        body_optional=body_optional,
        answers=(Answer(status=202, description="Accepted as durable.", model=Accepted),),
        errors=errors,
    )
