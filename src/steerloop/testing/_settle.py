"""``wait_all_tasks_blocked``: return once nothing else on the loop can run."""

from __future__ import annotations

import asyncio
from collections.abc import Sized

__all__ = ["wait_all_tasks_blocked"]


async def wait_all_tasks_blocked(*, settle: int = 3, max_iterations: int = 10_000) -> None:
    """Yield to the running loop until every other task is blocked, then return.

    "Blocked" means waiting on something not yet ready: a future, an event, a lock, a
    timer, a socket. The check is on the loop's ready queue: each time this task resumes,
    nothing else may be scheduled to run in the current iteration; once that holds for
    ``settle`` consecutive iterations (so callbacks those iterations scheduled, and I/O
    the selector reports ready at once, get their turn), the loop is quiet.

    Limits, all by design of asyncio rather than of this helper:

    - threads (``to_thread``, executors, SQLite writer threads) are not tasks; a task
      awaiting one counts as blocked until the thread calls back into the loop;
    - I/O counts as blocked until the operating system reports it ready, so data still
      in flight on a loopback socket may arrive after this returns;
    - timers count as blocked however short, as trio's sleeping tasks do;
    - a task that never blocks (a ``sleep(0)`` spin) keeps the queue busy: after
      ``max_iterations`` this raises ``RuntimeError`` rather than wait forever; so does
      a second task calling this at the same time (each keeps the other runnable), so
      call it from the test's own task only, never from inside the code under test.

    Needs an event loop with asyncio's ready queue (the standard ``asyncio`` loops);
    other loops raise ``TypeError``.
    """
    if settle < 1 or max_iterations < settle:
        raise ValueError("need 1 <= settle <= max_iterations")
    loop = asyncio.get_running_loop()
    # The one private read: asyncio has no public "is anything runnable" query.
    ready = getattr(loop, "_ready", None)
    if not isinstance(ready, Sized):
        raise TypeError(
            f"wait_all_tasks_blocked needs an asyncio event loop, got {type(loop).__name__}"
        )
    quiet = 0
    for _ in range(max_iterations):
        await asyncio.sleep(0)
        # Our own wake-up handle was popped to resume us; anything left is another
        # callback or task step that can still run in this iteration.
        quiet = quiet + 1 if len(ready) == 0 else 0
        if quiet >= settle:
            return
    raise RuntimeError(
        f"the loop did not settle within {max_iterations} iterations: some task or "
        "callback keeps rescheduling itself (a busy loop never blocks)"
    )
