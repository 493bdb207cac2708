"""Goals: a long-term objective that continues an agent round by round (a plugin).

```python
from steerloop.goals import install_goals

driver = install_goals(rt)                       # goal-round driver + the model's goal tools
goal = driver.goal_of(agent)                     # the SessionGoal of a live agent
goal.create("make the tests pass", round_cap=5, expected_revision=goal.revision)
await driver.when_settled(agent)                 # rounds run until complete / blocked / paused
goal.pause(goal.revision); goal.resume(goal.revision); goal.clear(goal.revision)
await driver.unload()                            # disarm all, cancel rounds (cause parent)
```

Built only on public hooks (CONTRACTS §7.11: goals + a goal-round driver, not a change to
the driver's kick). Durable state is the fold of ``goal/change`` events (ignorable, see
``_model``); "armed" is process memory, so a resumed or forked session keeps its goal but
runs no round until ``resume``. Goal-round prompts are ``user/message``s with
``source.kind == "goal"`` queued from host context (``without_initiator``).
"""

from __future__ import annotations

from ._domain import DEFAULT_ROUND_CAP, SessionGoal
from ._driver import (
    GOAL_PLUGIN,
    ROUND_CAP_REACHED,
    ROUND_FAILED,
    ROUND_REJECTED,
    GoalDriver,
    default_prompt,
    install_goals,
)
from ._model import (
    GOAL_CHANGE,
    Goal,
    GoalBlock,
    GoalError,
    GoalLogError,
    GoalPhase,
    GoalRevisionError,
    GoalStateError,
    replay_goal,
)
from ._tools import BLOCKED_BY_MODEL, goal_tools

__all__ = [
    "BLOCKED_BY_MODEL",
    "DEFAULT_ROUND_CAP",
    "GOAL_CHANGE",
    "GOAL_PLUGIN",
    "ROUND_CAP_REACHED",
    "ROUND_FAILED",
    "ROUND_REJECTED",
    "Goal",
    "GoalBlock",
    "GoalDriver",
    "GoalError",
    "GoalLogError",
    "GoalPhase",
    "GoalRevisionError",
    "GoalStateError",
    "SessionGoal",
    "default_prompt",
    "goal_tools",
    "install_goals",
    "replay_goal",
]
