"""``steerloop serve`` as a real process (API.md "Command line"): the embedded default on a
fresh machine, ``--profiles MODULE:ATTR``, and the refusal of a public bind without a token."""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from .pgworkers import SERVE, env_for
from .served import WAIT, turn_ends
from .test_attachments import png

pytestmark = pytest.mark.timeout(90)


@contextmanager
def serve(home: Path, *args: str, **env: str) -> Iterator[str]:
    """Start ``steerloop serve --port 0 ARGS`` in ``home``; yield its base URL; kill it."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [*SERVE, "--port", "0", *args],
        cwd=home,
        env=env_for(home, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = _bounded_readline(proc)
        found = re.search(r"listening on (http://\S+)", line)
        assert found, f"no listening line: {line!r} / {proc.stderr.read() if proc.stderr else ''}"
        yield found.group(1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def _bounded_readline(proc: subprocess.Popen[str]) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=60):
            raise AssertionError("steerloop serve printed nothing within 60 s")
    return proc.stdout.readline()


async def _wait_turns(client: httpx.AsyncClient, sid: str, n: int) -> list[dict[str, object]]:
    async with asyncio.timeout(WAIT):
        while True:
            events = (await client.get(f"/v1/sessions/{sid}/log")).json()["events"]
            if turn_ends(events) >= n:
                return list(events)
            await asyncio.sleep(0.05)


async def test_serve_with_no_flags_starts_on_a_fresh_machine(tmp_path: Path) -> None:
    """No config, no server: the embedded SQLite store under XDG_DATA_HOME; without a
    configured provider the ``default`` profile has no model, and creating a session says so
    (503 ``NO_MODEL``, ``tests/service/test_serve_default.py``)."""
    home = tmp_path / "home"
    with serve(home) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            health = (await client.get("/healthz")).json()
            assert health["ok"] is True
            assert health["role"] == "all"
            answer = await client.post("/v1/sessions", json={})
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "NO_MODEL"
            assert (await client.get("/v1/sessions")).json() == {"sessions": []}
    assert (home / ".local" / "share" / "steerloop" / "sessions.db").is_file()


async def test_serve_with_a_profiles_module_runs_turns(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    args = ("--store", store, "--profiles", "tests.service.profiles:profiles")
    with serve(tmp_path / "home", *args) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            created = await client.post("/v1/sessions", json={"session_id": "s", "input": "hi"})
            assert created.status_code == 201
            await _wait_turns(client, "s", 1)
            await client.post("/v1/sessions/s/messages", json={"mode": "followup", "content": "2"})
            events = await _wait_turns(client, "s", 2)
            texts = [
                e["data"]["message"]["content"][0]["text"]  # type: ignore[index]
                for e in events
                if e["type"] == "assistant/message"
            ]
            assert texts == ["reply 1", "reply 2"]


async def test_serve_takes_the_attachment_caps(tmp_path: Path) -> None:
    """``--max-attachment-bytes`` / ``--max-message-attachment-bytes`` are the runtime's caps:
    the page is told them, and an image over the first is refused 413."""
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    args = ("--store", store, "--profiles", "tests.service.profiles:profiles")
    caps = ("--max-attachment-bytes", "2000", "--max-message-attachment-bytes", "3000")
    with serve(tmp_path / "home", *args, *caps) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            page = (await client.get("/")).text
            assert 'data-max-attachment-bytes="2000"' in page
            assert 'data-max-message-attachment-bytes="3000"' in page
            assert (await client.post("/v1/sessions", json={"session_id": "s"})).status_code == 201
            image = base64.b64encode(png(30, 30)).decode()
            answer = await client.post(
                "/v1/sessions/s/messages",
                json={"mode": "followup", "content": [{"type": "image", "data": image}]},
            )
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                413,
                "attachment_too_large",
            )


async def test_serve_with_an_async_profiles_callable(tmp_path: Path) -> None:
    """API.md round 3 "Service": ``--profiles MODULE:ATTR`` naming ``async def profiles(rt)``
    (which awaits ``install_mcp`` of a real MCP server over stdio) is awaited by ``steerloop
    serve``: the profile serves, and its turn calls the MCP server's tool."""
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    args = ("--store", store, "--profiles", "tests.service.async_profiles:profiles")
    with serve(tmp_path / "home", *args) as url:
        async with httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            created = await client.post("/v1/sessions", json={"session_id": "s", "input": "time?"})
            assert created.status_code == 201, created.text
            events = await _wait_turns(client, "s", 1)
    results = [e for e in events if e["type"] == "tool/result"]
    assert len(results) == 1
    message = results[0]["data"]["message"]  # type: ignore[index]
    assert message["call_id"] == "t1" and not message.get("is_error")
    (text,) = [
        block["text"]
        for e in events
        if e["type"] == "assistant/message"
        for block in e["data"]["message"]["content"]  # type: ignore[index]
        if block.get("type") == "text"
    ]
    assert text.startswith("the server said ") and '"timezone": "UTC"' in text


def test_an_idle_connection_outlives_uvicorns_default_keep_alive(tmp_path: Path) -> None:
    """Pins ``KEEP_ALIVE_SECONDS``: a connection idle for 6 s (past uvicorn's default 5 s)
    still carries the next request, so a client expiring its idle connections after 5 s
    (httpx) never reuses one the server is closing (the keep-alive race)."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with serve(tmp_path / "home") as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
            answers = []
            for pause in (0.0, 6.0):
                time.sleep(pause)
                sock.sendall(request)
                answers.append(_read_response(sock).split(b"\r\n", 1)[0])
    assert answers == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK"]


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (headers, then ``content-length`` bytes) off ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    found = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    assert found is not None, head
    length = int(found.group(1))
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk, f"the server closed the connection: {data!r}"
        body += chunk
    return head


def refused(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run ``steerloop serve FLAGS`` in a fresh home to its end (bounded); it exits 2."""
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [*SERVE, *flags],
        cwd=home,
        env=env_for(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    return done


def test_a_public_bind_without_a_token_is_refused(tmp_path: Path) -> None:
    done = refused(tmp_path, "--host", "0.0.0.0", "--port", "0")
    assert "STEERLOOP_API_TOKEN" in done.stdout + done.stderr
    assert "refusing" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--capacity", "0"], "--capacity must be >= 1"),
        (["--drain-timeout", "-1"], "--drain-timeout must be >= 0"),
    ],
)
def test_a_bad_capacity_or_drain_timeout_is_refused(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    """``--capacity`` below 1 and a negative ``--drain-timeout`` exit 2 saying which."""
    done = refused(tmp_path, *flags)
    assert said in done.stdout + done.stderr


async def test_serve_without_a_token_says_so_and_answers_only_its_names(tmp_path: Path) -> None:
    """Without a token the second line says what that means and how to set one; the
    server answers its loopback names and ``--allowed-host`` names and refuses any other
    ``Host`` with 403 (DNS rebinding)."""
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    args = ("--store", store, "--profiles", "tests.service.profiles:profiles")
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen(
        [*SERVE, "--port", "0", *args, "--allowed-host", "proxy.test"],
        cwd=home,
        env=env_for(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # Both lines may already sit in the pipe's buffer: read them in a thread (bounded).
        first = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        found = re.search(r"listening on (http://\S+)", first)
        assert found, first
        note = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert "no API token" in note
        assert "any process on this machine can drive the agents" in note
        assert "STEERLOOP_API_TOKEN=" in note
        async with httpx.AsyncClient(base_url=found.group(1), timeout=WAIT) as client:
            for host, status in (
                ("127.0.0.1", 200),
                ("localhost", 200),
                ("proxy.test", 200),
                ("proxy.test.evil", 403),
                ("other.test", 403),
            ):
                answer = await client.get("/healthz", headers={"Host": host})
                assert answer.status_code == status, host
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-connections", "0"], "--max-connections must be an integer >= 1"),
        (["--max-streams", "0"], "--max-streams must be an integer >= 1"),
        (["--max-streams-per-session", "-1"], "--max-streams-per-session must be"),
        (["--header-timeout", "0"], "--header-timeout must be a finite number of seconds"),
        (["--body-timeout", "inf"], "--body-timeout must be a finite number of seconds"),
        (["--allowed-origin", "evil.test"], "scheme://host[:port], not 'evil.test'"),
        (["--allowed-host", "*"], "an allowed host must be a name"),
        (["--max-attachment-bytes", "0"], "--max-attachment-bytes must be a positive number"),
        (["--max-message-attachment-bytes", "-5"], "--max-message-attachment-bytes must be"),
    ],
)
def test_a_bad_edge_setting_is_refused(tmp_path: Path, flags: list[str], said: str) -> None:
    """Each bound and allow-list flag with a bad value exits 2 naming it."""
    done = refused(tmp_path, *flags)
    assert said in done.stdout + done.stderr


def test_the_edge_flags_show_the_defaults_of_limits() -> None:
    """``serve --help`` shows each bound's default in brackets: those of ``Limits()``."""
    from typer.testing import CliRunner

    from steerloop.cli import app
    from steerloop.service import Limits

    shown = " ".join(CliRunner().invoke(app, ["serve", "--help"]).output.split())
    defaults = Limits()
    for flag, value in (
        ("--max-connections", defaults.max_connections),
        ("--max-streams", defaults.max_streams),
        ("--max-streams-per-session", defaults.max_streams_per_session),
        ("--header-timeout", defaults.header_timeout),
        ("--body-timeout", defaults.body_timeout),
    ):
        found = re.search(re.escape(flag) + r" <\w+> [^\[]*\[([^\]]+)\]", shown)
        assert found is not None and found.group(1) == f"{value:g}", (flag, shown)
