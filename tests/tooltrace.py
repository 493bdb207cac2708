"""Moved to ``tests/support.py`` (one support module); re-exported for branches in flight."""

from .support import Bench, Fault, fail_append, on_event, results_by_call, yield_loop
from .support import open_harness as harness

__all__ = ["Bench", "Fault", "fail_append", "harness", "on_event", "results_by_call", "yield_loop"]
