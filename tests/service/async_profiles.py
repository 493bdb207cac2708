"""An ``async def profiles(rt)`` module (``--profiles tests.service.async_profiles:profiles``):
it awaits ``install_mcp`` of the real ``mcp-server-time`` (PyPI, the test extra) over stdio
before returning its profile, and its scripted model calls that server's tool once, then
answers with the tool's result."""

from __future__ import annotations

import shutil
from typing import Any

from steerloop import AgentOptions
from steerloop.llm import GenerateRequest
from steerloop.mcp import MCPServer, install_mcp
from steerloop.messages import TextBlock, ToolResultMessage
from steerloop.service import Profile
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response


def _answer(request: GenerateRequest) -> Any:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if not results:
        return tool_call_response("t1", "time__get_current_time", {"timezone": "UTC"})
    text = "".join(b.text for b in results[-1].content if isinstance(b, TextBlock))
    return text_response(f"the server said {text}")


async def profiles(rt: Any) -> list[Profile]:
    command = shutil.which("mcp-server-time")
    if command is None:
        raise RuntimeError("mcp-server-time is not installed: pip install -e '.[test]'")
    server = MCPServer.stdio("time", command=command, args=["--local-timezone", "UTC"])
    await install_mcp(rt, [server])
    rt.llm.register_adapter(["mock"], ScriptedAdapter([_answer] * 100))
    return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]
