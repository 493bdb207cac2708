"""Replay a session from one of its turns with another model or prompt, over HTTP (the web
chat's "Replay from here…").

``GET /v1/profiles`` lists the served profiles (the models a replay can run with);
``POST /v1/sessions/{id}/replays`` runs ``steerloop.evals.replay`` in this process — the
session forked before ``from_turn`` into a new session (the original is never written), its
recorded input fed again, its tools answered from the recording — and answers with the
report (JSON and Markdown) once the replay is done.
"""

from __future__ import annotations

import weakref
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import Runtime
from ..errors import SessionPersistenceNotFoundError
from ..evals import replay
from ._answers import ProfileList, ReplayDone
from ._api import Host
from ._errors import ApiError
from ._no_model import has_model
from ._operation import Answer, Operation
from ._read_body import read_body
from ._text import check_text

__all__ = ["REPLAY_OPERATIONS", "ReplayBody", "list_profiles", "run_replay"]

MAX_REPLAYS = 2
"""Replays one process runs at once (each drives a model through whole turns); more → 429."""
_running: weakref.WeakKeyDictionary[Runtime, int] = weakref.WeakKeyDictionary()
"""Replays running, per runtime (one per served app)."""


class ReplayBody(BaseModel):
    """``POST /v1/sessions/{id}/replays``: the turn to replay from, the served profile whose
    model runs it (``default`` when absent), an optional system prompt (``None``: the
    recorded one) and how unrecorded tool calls are answered."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    from_turn: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    profile: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    system_prompt: Annotated[str, Field(max_length=65536)] | None = None
    tools: Literal["recorded", "live"] = "recorded"


async def list_profiles(request: Request, host: Host) -> Response:
    """``{"profiles": [{"name", "provider", "model"}]}``: the served profiles with a model."""
    rows = [
        {"name": p.name, "provider": p.options.provider, "model": p.options.model}
        for p in host.profiles.values()
        if has_model(p)
    ]
    return JSONResponse({"profiles": rows})


async def run_replay(request: Request, host: Host) -> Response:
    """Run the replay → 201 ``{"session_id" (the new session), "report" (its JSON form),
    "markdown"}``; 422 ``invalid_replay`` for a turn the session has not closed, 429 while
    ``MAX_REPLAYS`` run."""
    session_id = request.path_params["session_id"]
    body = await read_body(request, ReplayBody)
    check_text(body.system_prompt, "system_prompt")
    await host.require(session_id)
    profile = host.profile(body.profile)
    if not has_model(profile):
        raise ApiError(422, "invalid_replay", f"profile {profile.name!r} has no model")
    key = host.rt
    if _running.get(key, 0) >= MAX_REPLAYS:
        raise ApiError(
            429, "too_many_replays", f"{MAX_REPLAYS} replays are running", {"Retry-After": "5"}
        )
    _running[key] = _running.get(key, 0) + 1
    try:
        report = await replay(
            host.rt,
            session_id,
            agent_options=profile.options,
            from_turn=body.from_turn,
            system_prompt=body.system_prompt,
            tools=body.tools,
        )
    except ValueError as exc:
        raise ApiError(422, "invalid_replay", str(exc)) from None
    except SessionPersistenceNotFoundError:
        raise ApiError(404, "session_not_found", f"no session {session_id!r}") from None
    finally:
        _running[key] -= 1
    return JSONResponse(
        {
            "session_id": report.replay_session_id,
            "report": report.to_json(),
            "markdown": report.to_markdown(),
        },
        status_code=201,
    )


REPLAY_OPERATIONS = (
    Operation(
        method="GET",
        path="/v1/profiles",
        summary="List the served profiles a replay can run with",
        handler=list_profiles,
        answers=(Answer(status=200, description="The profiles.", model=ProfileList),),
    ),
    Operation(
        method="POST",
        path="/v1/sessions/{session_id:str}/replays",
        summary="Replay a session from one of its turns into a new session",
        handler=run_replay,
        answers=(Answer(status=201, description="The replay's report.", model=ReplayDone),),
        body=ReplayBody,
        errors=frozenset({404, 422, 429}),
    ),
)
