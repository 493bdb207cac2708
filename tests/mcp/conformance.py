"""The official MCP conformance suite as the tests use it: its CLI (npm
``@modelcontextprotocol/conformance`` on the Node 22 from npm, both installed into
.test-servers/conformance by scripts/install_test_servers.sh) and its scenario servers."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2

from .helpers import REPO

SUITE = REPO / ".test-servers" / "conformance" / "node_modules"
NODE = SUITE / ".bin" / "node"
CLI = SUITE / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
#: The protocol revision the suite checks steerloop's client at.
REVISION = "2026-07-28"


def suite() -> list[str]:
    """The command that runs the suite's CLI.

    Raises:
        AssertionError: the suite or its Node is not installed.
    """
    if not (NODE.exists() and CLI.exists()):
        raise AssertionError(
            f"{CLI} or the Node 22 it runs on is missing: run scripts/install_test_servers.sh"
            " (the CI does)"
        )
    return [str(NODE), str(CLI)]


def check_statuses(results: Path) -> dict[str, set[str]]:
    """Each check id of the ``checks.json`` files under ``results``, with its statuses."""
    statuses: dict[str, set[str]] = {}
    for checks in sorted(results.glob("**/checks.json")):
        for check in json.loads(checks.read_text()):
            statuses.setdefault(check["id"], set()).add(check["status"])
    return statuses


def failing_checks(results: Path) -> list[str]:
    """The failed and warning checks of every ``checks.json`` under ``results``."""
    failing = []
    for checks in sorted(results.glob("**/checks.json")):
        for check in json.loads(checks.read_text()):
            if check["status"] in ("FAILURE", "WARNING"):
                detail = check.get("errorMessage") or check.get("description", "")
                failing.append(f"{check['status']} {check['id']}: {detail}")
    return failing


@asynccontextmanager
async def scenario_server(scenario: str, results: Path) -> AsyncIterator[str]:
    """A scenario's server (and authorization server) run by the suite; yields its MCP URL.

    On leaving, the suite stops it and writes the scenario's checks under ``results``.
    """
    proc = await asyncio.create_subprocess_exec(
        *suite(), "client", "--scenario", scenario, "--spec-version", REVISION, "--force",
        "-o", str(results),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=REPO,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        url = None
        while url is None:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line:
                raise AssertionError(f"the suite ended before serving {scenario}")
            if line.startswith(b"Server URL: "):
                url = line.decode().removeprefix("Server URL: ").strip()
        yield url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # the suite's shutdown writes the checks
        try:
            await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def follow_to_redirect(authorization_url: str) -> str:
    """A person at the browser who consents: where the authorization endpoint sends them."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=30.0) as http:
        response = await http.get(authorization_url)
    location: Any = response.headers.get("location")
    assert response.is_redirect and isinstance(location, str), response.status_code
    return location
