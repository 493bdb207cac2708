"""503 ``NO_MODEL``: a profile with no model to send requests to (``steerloop serve`` with no
provider configured) refuses new sessions and messages instead of queuing them forever."""

from __future__ import annotations

from typing import Any

from ._errors import ApiError
from ._profile import Profile

__all__ = ["NO_MODEL", "has_model", "require_model", "require_session_model"]

NO_MODEL = "NO_MODEL"

_HOW = (
    "give the server a model: set a provider key in its environment (DEEPSEEK_API_KEY, "
    "OPENAI_API_KEY, ANTHROPIC_API_KEY, or STEERLOOP_OPENAI_BASE_URL for a local "
    'OpenAI-compatible server), put model = "PROVIDER/MODEL" in steerloop.toml, or start it '
    "with steerloop serve --model PROVIDER/MODEL; then restart it"
)


def has_model(profile: Profile) -> bool:
    return profile.options.provider is not None and profile.options.model is not None


def require_model(profile: Profile) -> None:
    """Raises the 503 ``NO_MODEL`` answer for a profile without a model."""
    if not has_model(profile):
        message = f"no model is configured for profile {profile.name!r}: {_HOW}"
        raise ApiError(503, NO_MODEL, message)


async def require_session_model(host: Any, session_id: str) -> None:
    """``require_model`` for the profile of a stored session (read only when a served
    profile lacks a model)."""
    profiles: dict[str, Profile] = host.profiles
    if all(has_model(p) for p in profiles.values()):
        return
    profile = profiles.get((await host.describe(session_id))["profile"])
    if profile is not None:
        require_model(profile)
