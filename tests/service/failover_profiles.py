"""A ``--profiles MODULE:ATTR`` module for the failover tests (``test_pg_failover.py``).

The model is a rule, the same in every worker process, so whichever worker takes a session
over answers alike:

* the last message is the takeover message (``source.plugin == "steerloop/takeover"``) →
  text ``continued after takeover``;
* the last message is a user message ``gate NAME`` → a call of the tool ``gate`` (call id
  ``call-NAME``);
* the last message is ``sleep MS`` → a call of the tool ``sleep`` (call id ``nap-<n>``);
* the last message is a tool result → text ``after tools``;
* anything else → text ``echo <text>``.

Every request is appended as one JSON line to ``$STEERLOOP_FAILOVER_DIR/requests-<pid>.jsonl``
(the session id and each message's JSON form), so a test can read what the model received.

The tool ``gate`` holds a call "mid-tool": it creates ``gate-NAME.<pid>`` in that directory
and waits (cooperatively: the call's abort signal ends the wait) until ``open-NAME`` exists;
then it creates ``passed-NAME.<pid>`` and returns.
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


def profiles(rt: Any) -> list[Profile]:
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
