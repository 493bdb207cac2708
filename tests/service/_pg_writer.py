"""A writer in another process for the PostgreSQL feed tests: a Runtime on a
``PostgresStore(notify=True)`` with a ``LivePublisher``, driven by lines on stdin.

    python -m tests.service._pg_writer URL SESSION_ID

Commands (one per line; each answers one line ``ok …`` or ``error …``):
    create            create the session (no turn yet)             → ok <last_seq>
    turn TEXT         a followup answered by one text reply       → ok <last_seq>
    stream            a followup whose reply streams 4 chunks then hangs: waits until the
                      frames are published                        → ok <after_seq> <n>
    cancel            cancel the hanging step                     → ok <last_seq>
    quit
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from steerloop import AgentOptions, CancelCause, Runtime, user_message
from steerloop.service._pg._live import LivePublisher
from steerloop.service._pg._schema import ServiceTables, service_migrations
from steerloop.session.store.postgres import PostgresStore
from steerloop.testing import ScriptedAdapter, hang_after, text_response
from steerloop.testing._scripted import _text

WAIT = 20.0

STREAM_CHUNKS = [*_text(0, "a")[:2], *_text(0, "b")[1:2], *_text(0, "c")[1:2]]
"""Four chunks: block start, three text deltas (the block never ends: the step hangs).
With the attempt's ``start`` frame that is five live frames."""
FRAMES = 1 + len(STREAM_CHUNKS)


async def main(url: str, session_id: str) -> None:
    store = PostgresStore(url, notify=True)
    rt = await Runtime.open(store=store)
    model = ScriptedAdapter()
    rt.llm.register_adapter(["w"], model)
    tables = ServiceTables(store.schema)
    await store.migrate(service_migrations(tables))
    publisher = LivePublisher(await store.pool(), tables, rt)
    publisher.start()
    handle: Any = None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := (await reader.readline()).decode().strip():
            command, _, arg = line.partition(" ")
            if command == "quit":
                break
            agent: Any = handle.agent if handle is not None else None
            if command == "create":
                handle = await rt.agents.create(
                    session_id=session_id, agent_options=AgentOptions(provider="w", model="m")
                )
                await handle.agent.session.flush()
                # What a worker's session has on a served database: its spec row (the API
                # side finds sessions there).
                await (await store._acquire_pool()).execute(
                    f"INSERT INTO {tables.specs} (session_id, profile, profile_version, "
                    "status) VALUES ($1, 'default', 1, 'idle')",
                    session_id,
                )
                answer = f"ok {handle.agent.session.next_seq - 1}"
            elif command == "turn":
                model.add(text_response(f"re: {arg}"))
                agent.followup(user_message(arg))
                await asyncio.wait_for(agent.when_idle(), WAIT)
                await agent.session.flush()
                answer = f"ok {agent.session.next_seq - 1}"
            elif command == "stream":
                model.add(hang_after(STREAM_CHUNKS))
                before = publisher.published
                agent.followup(user_message("stream"))
                async with asyncio.timeout(WAIT):
                    while publisher.published < before + FRAMES:
                        await asyncio.sleep(0.01)
                await agent.session.flush()
                answer = f"ok {agent.session.next_seq - 1} {FRAMES}"
            elif command == "cancel":
                agent.cancel(CancelCause.user())
                await asyncio.wait_for(agent.when_idle(), WAIT)
                await agent.session.flush()
                answer = f"ok {agent.session.next_seq - 1}"
            else:
                answer = f"error unknown command {command!r}"
            print(answer, flush=True)
    finally:
        await publisher.close()
        await rt.close()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
