"""The HTTP + SSE service (extra ``steerloop[server]``): ``create_app``, ``Profile`` and the
edge's ``Limits``."""

from ._app import create_app
from ._limits import Limits
from ._profile import Profile

__all__ = ["Limits", "Profile", "create_app"]
