"""The HTTP + SSE service (extra ``steerloop[server]``): ``create_app`` and ``Profile``."""

from ._app import create_app
from ._profile import Profile

__all__ = ["Profile", "create_app"]
