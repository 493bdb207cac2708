"""``python -m steerloop.cli``."""

from ._app import main

main()
