"""§7.1–7.2 setup(scope) and configuration validation (C7.1-7 … C7.1-11, C7.2-1 … C7.2-4)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from steerloop import (
    Agent,
    AgentOptions,
    AgentScope,
    CallConfig,
    Runtime,
    SessionPersistenceNotFoundError,
    TextBlock,
    user_message,
)
from steerloop.agent._config import start_configured_agents, validate_agent_entries
from steerloop.testing import (
    text_response,
)

from ..conftest import Harness, compact, events_of, settle, within
from .factory_helpers import (
    OPTIONS,
    assert_unpublished,
    tool,
)

# --- C7.1-7 … C7.1-11: setup ---------------------------------------------------------------


async def test_setup_runs_before_publication(h: Harness) -> None:
    """C7.1-7: while setup awaits, nothing is published and no turn has started."""
    rt = h.rt
    created: list[Agent] = []
    rt.hooks.on("agent/created", lambda p: created.append(p.agent))
    entered = asyncio.Event()
    release = asyncio.Event()
    during: dict[str, Any] = {}

    async def setup(scope: AgentScope) -> None:
        entered.set()
        await release.wait()
        during["agent"] = rt.agents.get("s-1")
        during["session"] = rt.sessions.get("s-1")
        during["created"] = list(created)

    task = asyncio.ensure_future(
        rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    )
    await within(entered.wait())
    assert rt.agents.get("s-1") is None
    assert rt.sessions.get("s-1") is None
    assert created == []
    release.set()
    handle = await within(task)
    assert during == {"agent": None, "session": None, "created": []}
    assert compact(handle.agent.session, only=("T",)) == []
    assert created == [handle.agent]


async def test_scoped_registrations_reach_first_prompt(h: Harness) -> None:
    """C7.1-8: scope.tools / scope.hooks / scope.system_prompt registrations from setup are
    visible to the first prompt assembly and request."""
    seen: list[str] = []

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))
        scope.system_prompt.add_section("persona", "SCOPED SECTION")

        async def on_request(payload: Any, next_: Any) -> CallConfig:
            seen.append("agent/request")
            result: CallConfig = await next_()
            return result

        scope.hooks.on("agent/request", on_request)

    agent = await h.agent(text_response("a"), setup=setup)
    agent.followup(user_message("u1"))
    await settle(agent)

    first = h.adapter.requests[0]
    assert [t.name for t in first.tools] == ["scoped_tool"]
    system = [m for m in first.messages if m.role == "system"]
    texts = [b.text for m in system for b in m.content if isinstance(b, TextBlock)]
    assert texts == ["SCOPED SECTION"]
    assert seen == ["agent/request"]


async def test_commit_callable_runs_after_setup_before_publication(h: Harness) -> None:
    """C7.1-9: a returned callable runs synchronously after setup, before any publication
    edge (no registry entry, no agent/created)."""
    rt = h.rt
    trace: list[str] = []
    rt.hooks.on("agent/created", lambda p: trace.append("agent/created"))

    async def setup(scope: AgentScope) -> Callable[[], None]:
        trace.append("setup")
        await asyncio.sleep(0)
        trace.append("setup-end")

        def commit() -> None:
            trace.append(f"commit agents={rt.agents.get('s-1')} sessions={rt.sessions.get('s-1')}")

        return commit

    await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert trace == ["setup", "setup-end", "commit agents=None sessions=None", "agent/created"]


async def test_raising_commit_rolls_creation_back(h: Harness) -> None:
    """C7.1-9: a raising commit re-check makes create() raise it; nothing is published, the
    scope is undone, and the id can be created again at once."""
    rt = h.rt
    created: list[Agent] = []
    rt.hooks.on("agent/created", lambda p: created.append(p.agent))
    scoped_calls: list[Any] = []
    boom = ValueError("commit says no")

    def setup(scope: AgentScope) -> Callable[[], None]:
        scope.tools.register(tool("scoped_tool"))
        scope.system_prompt.add_section("mine", "MINE")
        scope.hooks.on("agent/status", scoped_calls.append)

        def commit() -> None:
            raise boom

        return commit

    with pytest.raises(ValueError) as info:
        await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert info.value is boom
    assert_unpublished(rt)
    assert created == []
    assert rt.tools.get("scoped_tool") is None
    assert await rt.system_prompt.assemble() == ""

    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert created == [agent]
    assert scoped_calls == []
    assert rt.agents.get("s-1") is agent


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_raising_setup_rolls_creation_back(h: Harness, kind: str) -> None:
    """C7.1-10: a raising setup has the C7.1-9 outcome (no store: nothing left to restore,
    restore_or_create takes the create path)."""
    rt = h.rt
    created: list[Agent] = []
    rt.hooks.on("agent/created", lambda p: created.append(p.agent))
    boom = KeyError("setup failed")

    def sync_setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))
        raise boom

    async def async_setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))
        await asyncio.sleep(0)
        raise boom

    setup = sync_setup if kind == "sync" else async_setup
    with pytest.raises(KeyError) as info:
        await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert info.value is boom
    assert_unpublished(rt)
    assert created == []
    assert rt.tools.get("scoped_tool") is None

    starts: list[str] = []
    rt.hooks.on("agent/session-start", lambda p: starts.append(p.source))
    handle = await rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert starts == ["startup"]
    assert rt.agents.get("s-1") is handle.agent


@pytest.mark.parametrize("how", ["followup", "steer", "send-next-turn", "send-next-step"])
async def test_setup_cannot_drive_the_agent(h: Harness, how: str) -> None:
    """C7.1-11: waking sends from setup raise RuntimeError and write nothing."""
    outcome: list[BaseException] = []

    def setup(scope: AgentScope) -> None:
        agent = scope.agent
        message = user_message("u1")
        try:
            if how == "followup":
                agent.followup(message)
            elif how == "steer":
                agent.steer(message)
            elif how == "send-next-turn":
                agent.send(message, "next-turn", True)
            else:
                agent.send(message, "next-step", True)
        except RuntimeError as exc:
            outcome.append(exc)
        outcome.append(RuntimeError(f"events={len(agent.session.events)}"))

    agent = await h.agent(setup=setup)
    assert isinstance(outcome[0], RuntimeError)
    assert str(outcome[1]) == "events=0"
    assert len(outcome) == 2
    assert compact(agent.session) == []
    assert agent.inbox.next_turn == () and agent.inbox.next_step == ()
    await settle(agent)
    assert h.adapter.requests == []


async def test_session_start_fires_once_with_startup_after_created(h: Harness) -> None:
    """C7.1-14: agent/session-start fires once per lifecycle, source "startup" for create()
    and for the create path of restore_or_create(), after agent/created."""
    rt = h.rt
    trace: list[tuple[str, str, str]] = []
    rt.hooks.on("agent/created", lambda p: trace.append(("created", p.agent.id, "")))
    rt.hooks.on("agent/session-start", lambda p: trace.append(("start", p.agent.id, p.source)))

    first = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    second = await rt.agents.restore_or_create(session_id="s-2", agent_options=OPTIONS)
    await within(first.dispose())
    third = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    assert trace == [
        ("created", "s-1", ""),
        ("start", "s-1", "startup"),
        ("created", "s-2", ""),
        ("start", "s-2", "startup"),
        ("created", "s-1", ""),
        ("start", "s-1", "startup"),
    ]
    assert second.agent is not third.agent


# --- C7.2-1 … C7.2-4: configuration validation ---------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True, 2**53])
@pytest.mark.parametrize("entry", ["create", "resume", "restore_or_create"])
async def test_invalid_max_tokens_rejected_before_anything(
    h: Harness, bad: Any, entry: str
) -> None:
    """C7.2-1: invalid max_tokens raises ValueError before setup, publication or storage."""
    rt = h.rt
    trace: list[str] = []
    rt.hooks.on("agent/created", lambda p: trace.append("created"))
    options = AgentOptions(provider="mock", model="m", max_tokens=bad)

    def setup(scope: AgentScope) -> None:
        trace.append("setup")

    with pytest.raises(ValueError):
        if entry == "create":
            await rt.agents.create(session_id="s-1", agent_options=options, setup=setup)
        elif entry == "resume":
            await rt.agents.resume(resume_session_id="s-1", agent_options=options, setup=setup)
        else:
            await rt.agents.restore_or_create(session_id="s-1", agent_options=options, setup=setup)
    assert trace == []
    assert_unpublished(rt)


async def test_largest_safe_max_tokens_is_accepted(h: Harness) -> None:
    """C7.2-1 (counterexample): 2**53 - 1 is accepted."""
    options = AgentOptions(provider="mock", model="m", max_tokens=2**53 - 1)
    handle = await h.rt.agents.create(session_id="s-1", agent_options=options)
    assert h.rt.agents.get("s-1") is handle.agent


async def test_max_tokens_reaches_request_and_header(h: Harness) -> None:
    """C7.2-2: a valid max_tokens is config.max_tokens of the first request and header."""
    agent = await h.agent(
        text_response("a"), agent_options=AgentOptions(provider="mock", model="m", max_tokens=77)
    )
    agent.followup(user_message("u1"))
    await settle(agent)
    request = h.adapter.requests[0]
    assert request.max_tokens == 77
    assert request.config is not None and request.config.max_tokens == 77
    (header,) = events_of(agent.session, "request/header")
    assert header.data.header["config"]["max_tokens"] == 77


async def test_absent_max_tokens_is_absent_from_request_and_header(h: Harness) -> None:
    """C7.2-2 (counterexample): max_tokens=None leaves the field out of both."""
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    request = h.adapter.requests[0]
    assert request.max_tokens is None
    assert request.config is not None and request.config.max_tokens is None
    (header,) = events_of(agent.session, "request/header")
    assert "max_tokens" not in header.data.header["config"]


@pytest.mark.parametrize("bad", [0, -1, 2.5])
async def test_max_parallel_tool_calls_must_be_positive_int(bad: Any) -> None:
    """C7.2-3: 0, -1 and 2.5 raise ValueError when the runtime is opened."""
    with pytest.raises(ValueError):
        await Runtime.open(max_parallel_tool_calls=bad)


async def test_max_parallel_tool_calls_default_is_ten() -> None:
    """C7.2-3: the default is 10; a positive integer is accepted."""
    runtime = await Runtime.open()
    other = await Runtime.open(max_parallel_tool_calls=1)
    try:
        assert runtime.max_parallel_tool_calls == 10
        assert other.max_parallel_tool_calls == 1
    finally:
        await runtime.close()
        await other.close()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"session_id": "a", "resume_session_id": "a", "agent_options": OPTIONS}], "both"),
        ([{"session_id": "", "agent_options": OPTIONS}], "empty"),
        ([{"resume_session_id": "", "agent_options": OPTIONS}], "empty"),
        (
            [
                {"session_id": "a", "agent_options": OPTIONS},
                {"session_id": "b", "agent_options": OPTIONS},
                {"resume_session_id": "a", "agent_options": OPTIONS},
            ],
            "twice",
        ),
        ([{"agent_options": OPTIONS}], "one of"),
    ],
)
async def test_configured_agent_entries_are_validated_before_any_starts(
    h: Harness, entries: list[dict[str, Any]], message: str
) -> None:
    """C7.2-4: both ids, an empty id, or a duplicate id is rejected before any configured
    agent starts: no session is created for any entry."""
    with pytest.raises(ValueError, match=message):
        validate_agent_entries(entries)
    created: list[str] = []
    h.rt.hooks.on("agent/created", lambda p: created.append(p.agent.id))
    with pytest.raises(ValueError, match=message):
        await start_configured_agents(h.rt.agents, entries)
    assert created == []
    assert_unpublished(h.rt, "a")
    assert h.rt.sessions.list() == ()


async def test_valid_configured_agents_start_in_order(h: Harness) -> None:
    """C7.2-4 (counterexample): distinct non-empty exact ids are accepted and started."""
    entries = [
        {"session_id": "a", "agent_options": OPTIONS},
        {"session_id": "b", "agent_options": OPTIONS},
    ]
    validate_agent_entries(entries)
    handles = await start_configured_agents(h.rt.agents, entries)
    assert [handle.agent.id for handle in handles] == ["a", "b"]
    assert [a.id for a in h.rt.agents.list()] == ["a", "b"]


async def test_configured_agents_roll_back_when_one_fails_to_start(h: Harness) -> None:
    """C7.2-4: a resume entry that cannot start (no store) disposes the ones already started."""
    entries = [
        {"session_id": "a", "agent_options": OPTIONS},
        {"resume_session_id": "b", "agent_options": OPTIONS},
    ]
    with pytest.raises(SessionPersistenceNotFoundError):
        await start_configured_agents(h.rt.agents, entries)
    assert h.rt.agents.list() == ()
    assert h.rt.sessions.list() == ()


async def test_runtime_open_starts_its_configured_agents(tmp_path: Any) -> None:
    """C7.2-4: ``Runtime.open(agents=...)`` validates every entry before opening anything
    (a bad entry creates no database file and no session), then starts them in order; a
    resume that cannot start closes the runtime again, disposing what it had started."""
    path = tmp_path / "s.db"
    bad = [
        {"session_id": "a", "agent_options": OPTIONS},
        {"session_id": "a", "agent_options": OPTIONS},
    ]
    with pytest.raises(ValueError, match="twice"):
        await Runtime.open(store=f"sqlite:///{path}", agents=bad)
    assert not path.exists()

    good = [
        {"session_id": "a", "agent_options": OPTIONS},
        {"session_id": "b", "agent_options": OPTIONS},
    ]
    rt = await Runtime.open(store=f"sqlite:///{path}", agents=good)
    assert [a.id for a in rt.agents.list()] == ["a", "b"]
    await rt.close()

    failing = [
        {"session_id": "c", "agent_options": OPTIONS},
        {"resume_session_id": "nope", "agent_options": OPTIONS},
    ]
    with pytest.raises(SessionPersistenceNotFoundError):
        await Runtime.open(store=f"sqlite:///{path}", agents=failing)
    check = await Runtime.open(store=f"sqlite:///{path}")
    # c had started (and stored its creation) before the failing entry; it was disposed
    assert await check.sessions.persistence.list() == ("a", "b", "c")  # type: ignore[union-attr]
    assert check.agents.list() == ()
    await check.close()
