"""Replay a recorded session as an eval: the same input, with its timing, to another model or
prompt; tools answered from the recording; a report of where the new run diverged.

```python
from steerloop.evals import replay
report = await replay(rt, "s-1", agent_options=AgentOptions(provider="openai", model="gpt-4.1"))
print(report.diverged_at)          # None, or the first (turn, step, what differed)
print(report.to_markdown())
```

``export_bundle`` (``steerloop sessions export ID --format bundle``) writes a stored session
as one file, ``load_bundle`` imports it into any store, and ``assert_replay`` makes such a
bundle a regression test.
"""

from ._assert import assert_replay
from ._bundle import export_bundle, load_bundle
from ._records import (
    CallMatch,
    CallRecord,
    CancelReplay,
    Delivery,
    Divergence,
    ReplayTotals,
    TurnReport,
    TurnRun,
)
from ._replay import replay
from ._report import ReplayReport

__all__ = [
    "CallMatch",
    "CallRecord",
    "CancelReplay",
    "Delivery",
    "Divergence",
    "ReplayReport",
    "ReplayTotals",
    "TurnReport",
    "TurnRun",
    "assert_replay",
    "export_bundle",
    "load_bundle",
    "replay",
]
