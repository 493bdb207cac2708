"""``python -m steerloop.cli``."""

from . import main

main()
