"""A ``--profiles MODULE:ATTR`` module for the failover tests (``test_pg_failover.py``).

The model is a rule, the same in every worker process, so whichever worker takes a session
over answers alike:

* the last message is the takeover message (``source.plugin == "steerloop/takeover"``) →
  text ``continued after takeover``;
* the last message is a user message ``gate NAME`` → a call of the tool ``gate`` (call id
  ``call-NAME``);
* the last message is ``sleep MS`` → a call of the tool ``sleep`` (call id ``nap-<n>``);
* the last message is ``pick NAME`` → a call of the client's tool ``pick_color`` (call id
  ``pick-NAME``; the client declares the tool in its AG-UI run);
* the last message is a tool result → text ``after tools``;
* anything else → text ``echo <text>``.

Every request is appended as one JSON line to ``$STEERLOOP_FAILOVER_DIR/requests-<pid>.jsonl``
(the session id and each message's JSON form), so a test can read what the model received.

The tool ``gate`` holds a call "mid-tool": it creates ``gate-NAME.<pid>`` in that directory
and waits (cooperatively: the call's abort signal ends the wait) until ``open-NAME`` exists;
then it creates ``passed-NAME.<pid>`` and returns.

With ``$STEERLOOP_TEST_COMMITS`` set, the process's PostgreSQL store records every batch it
commits (``record_commits``): per session, the lease token the batch was fenced with and
the seqs it stored, read from the database inside the batch's transaction.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from steerloop import AgentOptions, define_tool
from steerloop.llm import GenerateRequest
from steerloop.llm.chunks import StreamChunk
from steerloop.messages import TextBlock, message_to_json
from steerloop.service import Profile
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

TAKEOVER_PLUGIN = "steerloop/takeover"
_naps = itertools.count(1)


def _dir() -> Path:
    return Path(os.environ["STEERLOOP_FAILOVER_DIR"])


def _text(message: Any) -> str:
    return "".join(b.text for b in getattr(message, "content", ()) if isinstance(b, TextBlock))


def decide(request: GenerateRequest) -> list[StreamChunk]:
    """The rule model's answer to ``request`` (see the module docstring)."""
    last = request.messages[-1]
    if last.role == "tool":
        return text_response("after tools")
    text = _text(last)
    source = getattr(last, "source", None)
    if getattr(source, "plugin", None) == TAKEOVER_PLUGIN:
        return text_response("continued after takeover")
    if text.startswith("gate "):
        name = text.split()[1]
        return tool_call_response(f"call-{name}", "gate", {"name": name})
    if text.startswith("pick "):
        name = text.split()[1]
        return tool_call_response(f"pick-{name}", "pick_color", {"hint": name})
    if text.startswith("sleep "):
        return tool_call_response(
            f"nap-{os.getpid()}-{next(_naps)}", "sleep", {"ms": int(text.split()[1])}
        )
    return text_response(f"echo {text}")


class RuleModel(ScriptedAdapter):
    """A ``ScriptedAdapter`` whose every entry is ``decide(request)``; records requests."""

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamChunk]:
        line = json.dumps(
            {
                "session": request.session_id,
                "messages": [message_to_json(m) for m in request.messages],
            }
        )
        with open(_dir() / f"requests-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
            out.write(line + "\n")
        self.requests.clear()  # the file is the record; keep memory flat
        self.add(decide(request))
        async for chunk in super().stream(request):
            yield chunk


async def _gate(args: Any, exec: Any) -> str:
    name = str(args["name"])
    (_dir() / f"gate-{name}.{os.getpid()}").write_text(exec.call_id)
    opened = _dir() / f"open-{name}"
    while not opened.exists():
        if exec.signal.aborted:
            return f"gate {name} abandoned"
        await asyncio.sleep(0.02)
    (_dir() / f"passed-{name}.{os.getpid()}").write_text(exec.call_id)
    return f"gate {name} passed"


async def _sleep(args: Any, exec: Any) -> str:
    loop = asyncio.get_running_loop()
    until = loop.time() + min(int(args.get("ms", 0)), 2000) / 1000
    while loop.time() < until:
        if exec.signal.aborted:
            return "woken early"
        await asyncio.sleep(0.01)
    return "slept"


def record_commits(store: Any, path: str) -> None:
    """Append one JSON line per session per batch transaction of ``store`` to ``path``:
    ``{pid, key, xact, session, token, first, last, n}``, where the events are the rows this
    transaction inserted (``xmin``) and ``token`` the lease token its fence held. The line
    is written inside the transaction, before its COMMIT is sent, so no committed batch
    goes unrecorded even if the process is killed; whether ``xact`` committed is asked of
    the server afterwards (``pg_xact_status``)."""
    inner = store._commit_in
    t = store.tables

    async def commit_in(conn: Any, units: Any) -> Any:
        lost = await inner(conn, units)
        rows = await conn.fetch(
            f"SELECT e.session_id, min(e.seq) AS first, max(e.seq) AS last, count(*) AS n, "
            f"l.token, pg_current_xact_id()::text AS xact FROM {t.events} e "
            f"JOIN {t.leases} l USING (session_id) WHERE e.xmin = pg_current_xact_id()::xid "
            "GROUP BY e.session_id, l.token"
        )
        if rows:
            lines = [
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "key": store.owner_key,
                        "xact": row["xact"],
                        "session": row["session_id"],
                        "token": row["token"],
                        "first": row["first"],
                        "last": row["last"],
                        "n": row["n"],
                    }
                )
                + "\n"
                for row in rows
            ]
            with open(path, "a", encoding="utf-8") as out:
                out.write("".join(lines))
        return lost

    store._commit_in = commit_in


def profiles(rt: Any) -> list[Profile]:
    commits = os.environ.get("STEERLOOP_TEST_COMMITS")
    if commits:
        record_commits(rt.store, commits)
    rt.llm.register_adapter(["mock"], RuleModel())
    rt.tools.register(
        define_tool(
            name="gate",
            description="waits until the test opens the gate",
            parameters={"type": "object"},
            execute=_gate,
        )
    )
    rt.tools.register(
        define_tool(
            name="sleep",
            description="sleeps a few milliseconds",
            parameters={"type": "object"},
            execute=_sleep,
        )
    )
    return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]
