"""A ``--profiles MODULE:ATTR`` module for tests that start ``steerloop serve`` as a process:
a scripted model (provider ``mock``) under the profile ``default``."""

from __future__ import annotations

from typing import Any

from steerloop import AgentOptions
from steerloop.service import Profile
from steerloop.testing import ScriptedAdapter, text_response


def profiles(rt: Any) -> list[Profile]:
    script = [text_response(f"reply {n}") for n in range(1, 20)]
    rt.llm.register_adapter(["mock"], ScriptedAdapter(script))
    return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]
