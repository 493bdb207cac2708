"""Ids and the clock of the runtime, public: ``new_id("msg")`` gives an id from the runtime's
id factory (deterministic under ``Runtime(ids=counting_ids())`` in tests)."""

from __future__ import annotations

from ._ids import Clock, IdFactory, counting_ids, default_clock, default_ids, new_id

__all__ = ["Clock", "IdFactory", "counting_ids", "default_clock", "default_ids", "new_id"]
