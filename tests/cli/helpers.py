"""Helpers for driving the command line: OpenAI wire replies, a clean environment, tmux."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.llm import openai_wire as wire
from tests.llm.sse_server import Reply, SSEServer

CLI = [sys.executable, "-m", "steerloop.cli"]
WAIT = 20.0  # seconds; every wait is bounded and polls

_PROVIDER_VARS = (
    "DEEPSEEK_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "STEERLOOP_OPENAI_BASE_URL",
    "STEERLOOP_OPENAI_API_KEY",
    "STEERLOOP_OPENAI_MODEL",
    "STEERLOOP_MODEL",
)


# --- OpenAI chat-completions wire -----------------------------------------------------------


def text_reply(
    *pieces: str, prompt_tokens: int = 11, completion_tokens: int = 7, **kwargs: Any
) -> Reply:
    """A complete streamed text answer with usage (``kwargs`` go to ``sse_reply``)."""
    return wire.text_reply(
        *pieces, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, **kwargs
    )


def request_text(server: SSEServer, index: int) -> str:
    """Every message text of request ``index`` (0-based), joined."""
    parts: list[str] = []
    for message in server.requests[index].json()["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
    return "\n".join(parts)


# --- processes ------------------------------------------------------------------------------


def clean_env(tmp_path: Path, server: SSEServer | None = None, **extra: str) -> dict[str, str]:
    """The environment of a user whose home and XDG dirs live in ``tmp_path``."""
    # The terminal describes itself (tmux sets TERM; pytest sets COLUMNS/LINES to 80x24).
    dropped = {*_PROVIDER_VARS, "TERM", "COLUMNS", "LINES"}
    env = {k: v for k, v in os.environ.items() if k not in dropped and "PYTEST" not in k}
    home = tmp_path / "home"
    for sub in ("config", "data", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
        PYTHONUNBUFFERED="1",
    )
    if server is not None:
        env.update(STEERLOOP_OPENAI_BASE_URL=f"{server.url}/v1", STEERLOOP_OPENAI_MODEL="m")
    env.update(extra)
    return env


async def run_cli(
    *args: str, env: Mapping[str, str], cwd: Path, timeout: float = 60
) -> tuple[int, str, str]:
    """Run ``steerloop ARGS`` to completion (the event loop keeps serving meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def wait_for(
    predicate: Callable[[], Any], what: str, timeout: float = WAIT, interval: float = 0.05
) -> Any:
    """Poll ``predicate`` until it is truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


class Tmux:
    """A private tmux server (own socket) running one command in a 120x40 terminal."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.screen = ""
        self.env: dict[str, str] | None = None  # the server inherits the first client's env

    async def _tmux(self, *args: str, check: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            "tmux",
            "-S",
            str(self.socket),
            *args,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if check and proc.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {err.decode()}")
        return out.decode()

    async def start(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> None:
        command = " ".join(shlex.quote(a) for a in argv)
        self.env = dict(env)
        exports = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
        await self._tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "120", "-y", "40",
            "-c", str(cwd), *exports, command,
        )  # fmt: skip
        await self._tmux("set-option", "-t", "t", "remain-on-exit", "on")

    async def send(self, *keys: str) -> None:
        await self._tmux("send-keys", "-t", "t", *keys)

    async def type(self, text: str) -> None:
        """Type ``text`` literally, then Enter."""
        await self._tmux("send-keys", "-t", "t", "-l", text)
        await self._tmux("send-keys", "-t", "t", "Enter")

    async def capture(self) -> str:
        self.screen = await self._tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", "t")
        return self.screen

    async def wait_screen(self, *texts: str, timeout: float = WAIT) -> str:
        """Poll the pane until every one of ``texts`` is on it."""
        deadline = time.monotonic() + timeout
        while True:
            screen = await self.capture()
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                missing = [t for t in texts if t not in screen]
                raise AssertionError(f"not on screen: {missing!r}\n--- screen ---\n{screen}")
            await asyncio.sleep(0.05)

    async def pane_dead(self) -> bool:
        out = await self._tmux("display-message", "-p", "-t", "t", "#{pane_dead}", check=False)
        return out.strip() == "1"

    async def kill(self) -> None:
        await self._tmux("kill-server", check=False)
