"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, installed by
scripts/install_test_servers.sh) against steerloop's MCP client, through the driver the
project ships (scripts/mcp_conformance_client.py), at protocol revision 2026-07-28.

Every client scenario the revision scores runs once, a few at a time: the suite's own
``--requirements`` run starts them all at once, which on two shared cores takes longer than
the 30 s the suite gives a client by default (here it gives each 90 s: a loaded machine
takes ~10 s to start a Python process that imports the SDK). A scenario passes when the
suite's exit code says so: no failed or warning check, no timeout, no unexpected client
error.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conformance import REVISION, failing_checks, suite
from .helpers import REPO

DRIVER = REPO / "scripts" / "mcp_conformance_client.py"
#: Scenarios run at once: each is a Node process and a Python one, on two cores.
PARALLEL = 3
#: Milliseconds the suite gives the client of one scenario.
CLIENT_TIMEOUT_MS = 90_000
#: Bound of one scenario run, the client's time included.
SCENARIO_TIMEOUT = 180.0

pytestmark = pytest.mark.timeout(900)


def scored_client_scenarios() -> list[str]:
    """The client scenarios the revision's frozen requirement set scores, in its order."""
    listing = subprocess.run(
        [*suite(), "list", "--requirements", REVISION],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    scenarios: list[str] = []
    section = False
    for line in listing.splitlines():
        if line.startswith("Client scenarios"):
            section = True
        elif section and line.strip().startswith("- "):
            scenarios.append(line.strip()[2:])
        elif section and scenarios:
            break
    return scenarios


@dataclass(frozen=True)
class Outcome:
    scenario: str
    code: int | None
    failing: list[str]
    output: str

    @property
    def passed(self) -> bool:
        return self.code == 0

    def report(self) -> str:
        checks = "\n".join(f"  - {c}" for c in self.failing) or "  (no failing check)"
        return (
            f"{self.scenario}: exit {self.code}\n{checks}\n"
            f"--- suite output (tail) ---\n{self.output[-3000:]}"
        )


def run_scenario(scenario: str, results: Path) -> Outcome:
    out = results / scenario.replace("/", "_")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(DRIVER))}"
    try:
        done = subprocess.run(
            [*suite(), "client", "--command", command, "--scenario", scenario,
             "--spec-version", REVISION, "--force", "--timeout", str(CLIENT_TIMEOUT_MS),
             "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=SCENARIO_TIMEOUT,
            cwd=REPO,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        output = exc.stderr if isinstance(exc.stderr, str) else ""
        return Outcome(scenario, None, [f"no result within {SCENARIO_TIMEOUT}s"], output)
    return Outcome(scenario, done.returncode, failing_checks(out), done.stdout + done.stderr)


#: The client scenarios the 2026-07-28 requirement set scores, in its order. The set is frozen
#: with the revision; ``test_the_pinned_scenarios_are_what_the_suite_scores`` holds the pin
#: to the installed suite.
SCORED = (
    "tools_call",
    "request-metadata",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every scored scenario run once, ``PARALLEL`` at a time."""
    # The first drivers would otherwise all compile steerloop's bytecode at once.
    subprocess.run(
        [sys.executable, "-c", "import steerloop.mcp, steerloop.testing"], check=True, timeout=120
    )
    results = tmp_path_factory.mktemp("conformance")
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        done = pool.map(lambda s: run_scenario(s, results), SCORED)
        yield {o.scenario: o for o in done}


def test_the_pinned_scenarios_are_what_the_suite_scores() -> None:
    """The installed suite's requirement set for the revision is the pinned one."""
    assert tuple(scored_client_scenarios()) == SCORED


@pytest.mark.parametrize("scenario", SCORED)
def test_the_scored_client_scenario_passes(scenario: str, outcomes: dict[str, Outcome]) -> None:
    """The suite's verdict on one scored scenario, with its failing checks if it fails."""
    outcome = outcomes[scenario]
    assert outcome.passed, outcome.report()
