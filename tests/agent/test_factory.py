"""§7.1–7.2 creation transaction, configuration validation and teardown (factory ownership)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from steerloop import (
    Agent,
    AgentHandle,
    AgentOptions,
    AgentScope,
    CallConfig,
    Disposer,
    Runtime,
    SessionPersistenceNotFoundError,
    TextBlock,
    Tool,
    ToolExec,
    define_tool,
    user_message,
)
from steerloop.agent._config import start_configured_agents, validate_agent_entries
from steerloop.session._store import MemoryStore
from steerloop.testing import (
    HANG,
    ScriptedAdapter,
    text_response,
    tool_call_response,
    wait_all_tasks_blocked,
)

from ..conftest import Harness, compact, events_of, settle, within

OPTIONS = AgentOptions(provider="mock", model="m")
EMPTY_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def tool(name: str, body: Callable[[Any, ToolExec], Any] | None = None) -> Tool:
    async def default(args: Any, exec: ToolExec) -> str:
        return name

    return define_tool(name=name, description="", parameters=EMPTY_ARGS, execute=body or default)


async def make(h: Harness, *script: Any, session_id: str = "s-1", **kwargs: Any) -> AgentHandle:
    """Like ``h.agent`` but returns the handle (for dispose)."""
    h.adapter.add(*script)
    return await h.rt.agents.create(session_id=session_id, agent_options=OPTIONS, **kwargs)


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


def _assert_unpublished(rt: Runtime, session_id: str = "s-1") -> None:
    assert rt.agents.get(session_id) is None
    assert rt.sessions.get(session_id) is None
    assert rt.agents.list() == ()
    assert rt.sessions.list() == ()


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
    _assert_unpublished(rt)
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
    _assert_unpublished(rt)
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
    _assert_unpublished(rt)


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
    _assert_unpublished(h.rt, "a")
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


# --- C7.2-13 … C7.2-18: creation transaction -----------------------------------------------


async def test_publication_order(h: Harness) -> None:
    """C7.2-13: setup → commit → session registered → agent registered → agent/created
    listeners awaited one after another → agent/session-start → driver unlocked → return."""
    rt = h.rt
    trace: list[str] = []

    def where() -> str:
        session = rt.sessions.get("s-1") is not None
        return f"sessions={session} agents={rt.agents.get('s-1') is not None}"

    async def created_1(payload: Any) -> None:
        trace.append(f"created-1 {where()}")
        await asyncio.sleep(0)
        payload.agent.followup(user_message("u1"))
        trace.append("created-1 end")

    def created_2(payload: Any) -> Any:
        trace.append("created-2")

        async def later() -> None:
            await asyncio.sleep(0)
            trace.append("created-2 awaitable end")

        return later()

    def session_start(payload: Any) -> None:
        trace.append(f"session-start turns={compact(payload.agent.session, only=('T',))}")

    rt.hooks.on("agent/created", created_1)
    rt.hooks.on("agent/created", created_2)
    rt.hooks.on("agent/session-start", session_start)

    def setup(scope: AgentScope) -> Callable[[], None]:
        trace.append(f"setup {where()}")
        return lambda: trace.append(f"commit {where()}")

    h.adapter.add(text_response("a"))
    handle = await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    trace.append(f"returned turns={compact(handle.agent.session, only=('T',))}")
    assert trace == [
        "setup sessions=False agents=False",
        "commit sessions=False agents=False",
        "created-1 sessions=True agents=True",
        "created-1 end",
        "created-2",
        "created-2 awaitable end",
        "session-start turns=[]",
        "returned turns=['T+1']",
    ]
    await settle(handle.agent)


async def test_agent_is_in_maintenance_during_initialisation(h: Harness) -> None:
    """C7.2-14: during agent/created and agent/session-start the agent reports idle and
    run_maintenance raises; a followup is queued without a turn, then replayed once."""
    rt = h.rt
    observed: list[Any] = []

    async def job(signal: Any) -> None:
        return None

    def probe(name: str) -> Callable[[Any], None]:
        def listener(payload: Any) -> None:
            agent = payload.agent
            observed.append((name, agent.status))
            with pytest.raises(RuntimeError):
                agent.run_maintenance(job)
            if name == "created":
                agent.followup(user_message("u1"))
            observed.append((name, compact(agent.session)))

        return listener

    rt.hooks.on("agent/created", probe("created"))
    rt.hooks.on("agent/session-start", probe("session-start"))
    agent = await h.agent(text_response("a"))
    await settle(agent)

    assert observed == [
        ("created", "idle"),
        ("created", ["ins(nt,u1)"]),
        ("session-start", "idle"),
        ("session-start", ["ins(nt,u1)"]),
    ]
    assert compact(agent.session, only=("ins", "claim", "T")) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "T-1:completed",
    ]
    assert len(h.adapter.requests) == 1


async def test_inject_from_session_start_waits_for_a_waking_send(h: Harness) -> None:
    """C7.2-15: an inject from agent/session-start stages context without a turn; the first
    turn a later waking send opens admits it."""
    rt = h.rt
    rt.hooks.on("agent/session-start", lambda p: p.agent.inject(user_message("c1")))
    agent = await h.agent(text_response("a"))
    await settle(agent)
    assert compact(agent.session) == ["ins(ns,c1)"]
    assert h.adapter.requests == []

    agent.followup(user_message("u1"))
    await settle(agent)
    assert compact(agent.session, only=("ins", "claim", "T", "user")) == [
        "ins(ns,c1)",
        "ins(nt,u1)",
        "T+1",
        "claim(ns,c1)",
        "claim(nt,u1)",
        "user(c1)",
        "user(u1)",
        "T-1:completed",
    ]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_raising_created_listener_rolls_back(h: Harness, kind: str) -> None:
    """C7.2-16: a failing agent/created listener rolls creation back: create() raises it,
    both registries are empty, agent/disposed pairs agent/created, the scope is undone."""
    rt = h.rt
    boom = LookupError("listener failed")
    trace: list[str] = []
    starts: list[str] = []

    def sync_listener(payload: Any) -> None:
        raise boom

    async def async_listener(payload: Any) -> None:
        await asyncio.sleep(0)
        raise boom

    rt.hooks.on("agent/created", lambda p: trace.append(f"created {p.agent.id}"))
    remove_failing = rt.hooks.on(
        "agent/created", sync_listener if kind == "sync" else async_listener
    )
    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(
            f"disposed {p.agent.id} tool={rt.tools.get('scoped_tool') is not None} "
            f"agent={rt.agents.get(p.agent.id)} session={rt.sessions.get(p.agent.id) is not None}"
        ),
    )
    rt.hooks.on("agent/session-start", lambda p: starts.append(p.source))

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))
        scope.hooks.on("agent/status", lambda p: trace.append("scoped status"))

    with pytest.raises(LookupError) as info:
        await rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    assert info.value is boom
    # agent/disposed keeps its meaning: after the scope unwound, before the session detaches.
    assert trace == ["created s-1", "disposed s-1 tool=False agent=None session=True"]
    assert starts == []
    _assert_unpublished(rt)
    assert rt.tools.get("scoped_tool") is None

    # The id is free again and the old scoped listener stays silent.
    remove_failing()
    agent = await h.agent(text_response("a"))
    agent.followup(user_message("u1"))
    await settle(agent)
    assert "scoped status" not in trace


async def test_close_waits_for_created_listener_before_teardown(h: Harness) -> None:
    """C7.2-17: rt.close() while an agent/created listener awaits: the listener finishes with
    scoped tools and the session usable; teardown begins only after it returned."""
    rt = h.rt
    entered = asyncio.Event()
    release = asyncio.Event()
    trace: list[str] = []

    async def listener(payload: Any) -> None:
        agent = payload.agent
        trace.append("listener start")
        entered.set()
        await release.wait()
        trace.append(
            f"listener resumed tool={rt.tools.get('scoped_tool', agent.id) is not None} "
            f"session={rt.sessions.get(agent.id) is agent.session}"
        )
        agent.inject(user_message("c1"))
        await asyncio.sleep(0)
        trace.append("listener end")

    rt.hooks.on("agent/created", listener)
    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(f"disposed tool={rt.tools.get('scoped_tool') is not None}"),
    )

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    creating = asyncio.ensure_future(
        rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    )
    await within(entered.wait())
    closing = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not closing.done()
    trace.append("release")
    release.set()
    await within(closing)
    assert trace == [
        "listener start",
        "release",
        "listener resumed tool=True session=True",
        "listener end",
        "disposed tool=False",
    ]
    handle = creating.result()
    assert compact(handle.agent.session) == ["ins(ns,c1)", "drop(ns,c1)"]
    _assert_unpublished(rt)


async def test_close_during_setup_rolls_creation_back(h: Harness) -> None:
    """C7.2-18: rt.close() while create() waits on setup: create() raises RuntimeError,
    nothing is published, the partial scope is undone, close() returns after the rollback;
    later create/resume/restore_or_create raise RuntimeError."""
    rt = h.rt
    entered = asyncio.Event()
    never = asyncio.Event()
    created: list[Agent] = []
    rt.hooks.on("agent/created", lambda p: created.append(p.agent))

    async def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("early"))
        entered.set()
        await never.wait()
        scope.tools.register(tool("late"))

    creating = asyncio.ensure_future(
        rt.agents.create(session_id="s-1", agent_options=OPTIONS, setup=setup)
    )
    await within(entered.wait())
    assert rt.tools.get("early") is not None
    await within(rt.close())

    assert creating.done()
    with pytest.raises(RuntimeError):
        creating.result()
    assert created == []
    _assert_unpublished(rt)
    assert rt.tools.get("early") is None

    with pytest.raises(RuntimeError):
        await rt.agents.create(session_id="s-2", agent_options=OPTIONS)
    with pytest.raises(RuntimeError):
        await rt.agents.resume(resume_session_id="s-2", agent_options=OPTIONS)
    with pytest.raises(RuntimeError):
        await rt.agents.restore_or_create(session_id="s-2", agent_options=OPTIONS)

    # The abandoned setup finishing later leaves nothing registered behind.
    never.set()
    await wait_all_tasks_blocked()
    assert rt.tools.get("late") is None


async def test_create_after_close_began_raises(h: Harness) -> None:
    """C7.2-18: creation calls made while close() is still running raise RuntimeError."""
    rt = h.rt
    entered = asyncio.Event()
    release = asyncio.Event()

    async def body(args: Any, exec: ToolExec) -> str:
        entered.set()
        await release.wait()
        return "ok"

    rt.tools.register(tool("slow", body))
    agent = await h.agent(tool_call_response("c1", "slow", {}))
    agent.followup(user_message("u1"))
    await within(entered.wait())
    closing = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not closing.done()
    with pytest.raises(RuntimeError):
        await rt.agents.create(session_id="s-2", agent_options=OPTIONS)
    with pytest.raises(RuntimeError):
        await rt.agents.restore_or_create(session_id="s-2", agent_options=OPTIONS)
    release.set()
    await within(closing)
    assert rt.sessions.get("s-2") is None


# --- C7.2-20 … C7.2-27: teardown -----------------------------------------------------------


def _traced_tool_registry(
    monkeypatch: pytest.MonkeyPatch,
    rt: Runtime,
    trace: list[str],
    fail: BaseException | None = None,
) -> None:
    """Record (and optionally fail) the undo of every tool registration."""
    original = rt.tools.register

    def register(t: Tool, *, owner: str | None = None) -> Disposer:
        inner = original(t, owner=owner)

        def undo() -> None:
            inner()
            trace.append(f"undo {t.name}")
            if fail is not None:
                raise fail

        return Disposer(undo)

    monkeypatch.setattr(rt.tools, "register", register)


def _traced_close(
    monkeypatch: pytest.MonkeyPatch,
    agent: Agent,
    trace: list[str],
    fail: BaseException | None = None,
) -> None:
    original = agent.session.close

    async def close() -> None:
        await original()
        trace.append("session close")
        if fail is not None:
            raise fail

    monkeypatch.setattr(agent.session, "close", close)


async def test_dispose_runs_steps_in_order(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """C7.2-20: cancel(disposed) → when_idle → undo scope → close write handle →
    unregister agent (agent/disposed) → unregister session → drop bookkeeping."""
    rt = h.rt
    trace: list[str] = []
    _traced_tool_registry(monkeypatch, rt, trace)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, HANG, setup=setup)
    agent = handle.agent
    _traced_close(monkeypatch, agent, trace)
    original_cancel = agent.cancel

    def cancel(cause: Any, keep_inbox: bool = False) -> None:
        trace.append(f"cancel {cause.kind}")
        original_cancel(cause, keep_inbox)

    monkeypatch.setattr(agent, "cancel", cancel)

    def on_event(payload: Any) -> None:
        if payload.event.type == "turn/end":
            trace.append(f"turn/end {payload.event.data.reason.kind}")

    rt.hooks.on("session/event", on_event)
    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(
            f"disposed agent={rt.agents.get('s-1')} session={rt.sessions.get('s-1') is not None}"
        ),
    )
    agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    await within(handle.dispose())
    trace.append(f"returned session={rt.sessions.get('s-1')}")
    assert trace == [
        "cancel disposed",
        "turn/end aborted",
        "undo scoped_tool",
        "session close",
        "disposed agent=None session=True",
        "returned session=None",
    ]
    # Bookkeeping dropped: the id is free for a new lifecycle immediately.
    again = await rt.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
    assert rt.agents.get("s-1") is again.agent


async def test_dispose_waits_for_publication(h: Harness) -> None:
    """C7.2-20: the first teardown step waits for publication to finish (a parent's dispose
    reaching a child whose agent/created listener still awaits)."""
    rt = h.rt
    parent = await make(h)
    entered = asyncio.Event()
    release = asyncio.Event()
    trace: list[str] = []

    async def listener(payload: Any) -> None:
        if payload.agent.id != "child":
            return
        entered.set()
        await release.wait()
        trace.append("child created end")

    rt.hooks.on("agent/created", listener)
    rt.hooks.on("agent/disposed", lambda p: trace.append(f"disposed {p.agent.id}"))
    creating = asyncio.ensure_future(
        rt.agents.create(session_id="child", agent_options=OPTIONS, parent=parent.agent)
    )
    await within(entered.wait())
    disposing = asyncio.ensure_future(parent.dispose())
    await wait_all_tasks_blocked()
    assert trace == []
    release.set()
    await within(disposing)
    assert trace == ["child created end", "disposed child", "disposed s-1"]
    assert (await within(creating)).agent.id == "child"
    _assert_unpublished(rt, "child")


async def test_inside_disposed_listener(h: Harness) -> None:
    """C7.2-21: in agent/disposed the log ends with turn/end{aborted, disposed}, scoped tools
    are gone, rt.agents.get is None and rt.sessions.get still returns the session.
    Counterexample: a tool registered on rt.tools is still present."""
    rt = h.rt
    rt.tools.register(tool("global_tool"))
    seen: dict[str, Any] = {}

    def on_disposed(payload: Any) -> None:
        agent = payload.agent
        last = agent.session.events[-1]
        seen["last"] = (last.type, last.data.reason.kind, last.data.reason.reason.kind)
        seen["compact"] = compact(agent.session, only=("T",))
        seen["scoped"] = rt.tools.get("scoped_tool")
        seen["global"] = rt.tools.get("global_tool") is not None
        seen["agent"] = rt.agents.get(agent.id)
        seen["session"] = rt.sessions.get(agent.id) is agent.session

    rt.hooks.on("agent/disposed", on_disposed)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, HANG, setup=setup)
    handle.agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    await within(handle.dispose())
    assert seen == {
        "last": ("turn/end", "aborted", "disposed"),
        "compact": ["T+1", "T-1:aborted"],
        "scoped": None,
        "global": True,
        "agent": None,
        "session": True,
    }


async def test_draining_tool_can_use_scope_until_quiescent(h: Harness) -> None:
    """C7.2-22: a tool body draining after its signal aborted can still call other scoped
    tools and read scoped state; the scope is undone strictly after when_idle()."""
    rt = h.rt
    draining = asyncio.Event()
    release = asyncio.Event()
    trace: list[str] = []

    async def helper(args: Any, exec: ToolExec) -> str:
        return "helped"

    async def slow(args: Any, exec: ToolExec) -> str:
        await exec.signal.wait()
        draining.set()
        await release.wait()
        found = rt.tools.get("helper", exec.agent.id)
        trace.append(f"helper visible={found is not None}")
        assert found is not None
        trace.append(await found.execute({}, exec))
        trace.append(f"section={'SCOPED' in await rt.system_prompt.assemble(exec.agent)}")
        return "drained"

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("slow", slow))
        scope.tools.register(tool("helper", helper))
        scope.system_prompt.add_section("mine", "SCOPED")

    rt.hooks.on(
        "agent/disposed",
        lambda p: trace.append(f"disposed helper={rt.tools.get('helper') is not None}"),
    )
    handle = await make(h, tool_call_response("c1", "slow", {}), setup=setup)
    handle.agent.followup(user_message("u1"))
    disposing: asyncio.Future[None] | None = None
    started = asyncio.Event()
    rt.hooks.on("session/event", lambda p: started.set() if p.event.type == "tool/call" else None)
    await within(started.wait())
    disposing = asyncio.ensure_future(handle.dispose())
    await within(draining.wait())
    await wait_all_tasks_blocked()
    assert not disposing.done()
    assert rt.tools.get("helper") is not None
    release.set()
    await within(disposing)
    assert trace == [
        "helper visible=True",
        "helped",
        "section=True",
        "disposed helper=False",
    ]
    assert compact(handle.agent.session, only=("result", "T")) == [
        "T+1",
        "result(c1,ABORTED)",
        "T-1:aborted",
    ]


async def test_dispose_is_memoised(h: Harness) -> None:
    """C7.2-23: concurrent and sequential dispose() calls run teardown once and share the
    outcome."""
    rt = h.rt
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    handle = await make(h, HANG)
    handle.agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    first = asyncio.ensure_future(handle.dispose())
    second = asyncio.ensure_future(handle.dispose())
    assert await within(asyncio.gather(first, second)) == [None, None]
    await within(handle.dispose())
    assert disposed == ["s-1"]
    assert compact(handle.agent.session, only=("T",)) == ["T+1", "T-1:aborted"]


async def test_dispose_memoises_the_failure(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """C7.2-23: every caller, concurrent or later, sees the same exception object."""
    rt = h.rt
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    handle = await make(h)
    boom = OSError("flush failed")
    trace: list[str] = []
    _traced_close(monkeypatch, handle.agent, trace, fail=boom)
    results = await within(
        asyncio.gather(handle.dispose(), handle.dispose(), return_exceptions=True)
    )
    assert results[0] is boom and results[1] is boom
    with pytest.raises(OSError) as info:
        await within(handle.dispose())
    assert info.value is boom
    assert trace == ["session close"]
    assert disposed == ["s-1"]


async def test_teardown_collects_failures_in_step_order(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C7.2-24: undo and close both fail: registry removal and bookkeeping still happen, and
    dispose() raises an ExceptionGroup holding both errors in step order."""
    rt = h.rt
    trace: list[str] = []
    undo_error = ValueError("undo failed")
    close_error = OSError("close failed")
    _traced_tool_registry(monkeypatch, rt, trace, fail=undo_error)
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, setup=setup)
    _traced_close(monkeypatch, handle.agent, trace, fail=close_error)
    with pytest.raises(ExceptionGroup) as info:
        await within(handle.dispose())
    assert list(info.value.exceptions) == [undo_error, close_error]
    assert trace == ["undo scoped_tool", "session close"]
    assert disposed == ["s-1"]
    _assert_unpublished(rt)
    assert rt.tools.get("scoped_tool") is None
    again = await rt.agents.create(session_id="s-1", agent_options=OPTIONS)
    assert rt.agents.get("s-1") is again.agent


async def test_single_teardown_failure_is_not_wrapped(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C7.2-24 (counterexample): a single failure is raised as itself."""
    rt = h.rt
    trace: list[str] = []
    undo_error = ValueError("undo failed")
    _traced_tool_registry(monkeypatch, rt, trace, fail=undo_error)

    def setup(scope: AgentScope) -> None:
        scope.tools.register(tool("scoped_tool"))

    handle = await make(h, setup=setup)
    _traced_close(monkeypatch, handle.agent, trace)
    with pytest.raises(ValueError) as info:
        await within(handle.dispose())
    assert info.value is undo_error
    assert trace == ["undo scoped_tool", "session close"]
    _assert_unpublished(rt)


async def test_dispose_discards_queued_work(h: Harness) -> None:
    """C7.2-25: pending followups are removed with outcome="canceled" and no further turn
    starts once the current turn is aborted."""
    rt = h.rt
    discarded: list[str] = []
    rt.hooks.on("agent/inbox/discarded", lambda p: discarded.append(p.message.content[0].text))
    handle = await make(h, HANG, text_response("never"))
    agent = handle.agent
    agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    agent.followup(user_message("u2"))
    agent.followup(user_message("u3"))
    await within(handle.dispose())
    assert compact(agent.session, only=("ins", "claim", "drop", "T")) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "ins(nt,u2)",
        "ins(nt,u3)",
        "drop(nt,u2)",
        "drop(nt,u3)",
        "T-1:aborted",
    ]
    assert discarded == ["u2", "u3"]
    assert len(h.adapter.requests) == 1


async def test_send_after_disposal_began_is_not_latched(h: Harness) -> None:
    """C7.2-26: a followup from an abort observer during disposal writes its ins event but
    starts no turn, and teardown issues no further model request."""
    rt = h.rt
    sent: list[str] = []

    def on_request(payload: Any, next_: Any) -> Any:
        agent = payload.agent

        def observer(reason: Any) -> None:
            agent.followup(user_message("late"))
            sent.append(reason.kind)

        payload.signal.add_listener(observer)
        return next_()

    rt.hooks.on("agent/request", on_request)
    handle = await make(h, HANG, text_response("never"))
    agent = handle.agent
    agent.followup(user_message("u1"))
    await wait_all_tasks_blocked()
    assert len(h.adapter.requests) == 1
    await within(handle.dispose())
    assert sent == ["disposed"]
    assert compact(agent.session, only=("ins", "claim", "drop", "T")) == [
        "ins(nt,u1)",
        "T+1",
        "claim(nt,u1)",
        "ins(nt,late)",
        "T-1:aborted",
    ]
    assert len(h.adapter.requests) == 1


async def test_close_disposes_every_agent_and_is_idempotent(h: Harness) -> None:
    """C7.2-27: rt.close() disposes every live agent per C7.2-20; closing again is a no-op."""
    rt = h.rt
    disposed: list[str] = []
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    a = await make(h, HANG, session_id="a")
    b = await make(h, HANG, session_id="b")
    idle = await make(h, session_id="c")
    a.agent.followup(user_message("u1"))
    b.agent.followup(user_message("u2"))
    await wait_all_tasks_blocked()
    await within(rt.close())
    assert sorted(disposed) == ["a", "b", "c"]
    for handle in (a, b):
        assert compact(handle.agent.session, only=("T",)) == ["T+1", "T-1:aborted"]
        assert handle.agent.session.events[-1].data.reason.reason.kind == "disposed"
    assert compact(idle.agent.session) == []
    assert rt.agents.list() == () and rt.sessions.list() == ()
    await within(rt.close())
    assert sorted(disposed) == ["a", "b", "c"]


async def test_concurrent_close_callers_share_completion(h: Harness) -> None:
    """C7.2-27: a second close() while the first is still disposing awaits the same
    completion instead of returning early."""
    rt = h.rt
    entered = asyncio.Event()
    release = asyncio.Event()

    async def body(args: Any, exec: ToolExec) -> str:
        entered.set()
        await release.wait()
        return "ok"

    rt.tools.register(tool("slow", body))
    handle = await make(h, tool_call_response("c1", "slow", {}))
    handle.agent.followup(user_message("u1"))
    await within(entered.wait())
    first = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    second = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not first.done()
    assert not second.done()
    release.set()
    await within(asyncio.gather(first, second))
    _assert_unpublished(rt)


async def test_close_waits_for_inflight_creation(h: Harness) -> None:
    """C7.2-27: close() waits for a creation whose agent/created listener is in flight, then
    disposes the agent it published."""
    rt = h.rt
    entered = asyncio.Event()
    release = asyncio.Event()
    disposed: list[str] = []

    async def listener(payload: Any) -> None:
        entered.set()
        await release.wait()

    rt.hooks.on("agent/created", listener)
    rt.hooks.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    creating = asyncio.ensure_future(rt.agents.create(session_id="s-1", agent_options=OPTIONS))
    await within(entered.wait())
    closing = asyncio.ensure_future(rt.close())
    await wait_all_tasks_blocked()
    assert not closing.done()
    release.set()
    await within(closing)
    assert creating.done()
    assert disposed == ["s-1"]
    _assert_unpublished(rt)


async def test_close_reports_several_failures_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """C7.2-27: failures of several agents are reported in one ExceptionGroup; the outcome
    is memoised, so a later close() reports the same group."""
    rt = await Runtime.open()
    rt.llm.register_adapter(["mock"], ScriptedAdapter())
    errors = {"a": OSError("a failed"), "b": OSError("b failed")}
    handles = []
    for session_id, error in errors.items():
        handle = await rt.agents.create(session_id=session_id, agent_options=OPTIONS)
        _traced_close(monkeypatch, handle.agent, [], fail=error)
        handles.append(handle)
    await rt.agents.create(session_id="ok", agent_options=OPTIONS)

    with pytest.raises(ExceptionGroup) as info:
        await within(rt.close())
    assert sorted(map(str, info.value.exceptions)) == ["a failed", "b failed"]
    assert rt.agents.list() == () and rt.sessions.list() == ()
    with pytest.raises(ExceptionGroup) as again:
        await within(rt.close())
    assert again.value is info.value


async def test_session_start_source_resume_for_restored_lifecycles() -> None:
    """C7.1-14: resume() and the restore path of restore_or_create() fire
    agent/session-start once with source "resume", after agent/created."""
    runtime = await Runtime.open(store="memory://")
    try:
        trace: list[tuple[str, str]] = []
        runtime.hooks.on("agent/created", lambda p: trace.append(("created", p.agent.id)))
        runtime.hooks.on(
            "agent/session-start", lambda p: trace.append(("start:" + p.source, p.agent.id))
        )
        first = await runtime.agents.create(session_id="s-1", agent_options=OPTIONS)
        await within(first.dispose())
        resumed = await runtime.agents.resume(resume_session_id="s-1", agent_options=OPTIONS)
        await within(resumed.dispose())
        restored = await runtime.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
        await within(restored.dispose())
        assert trace == [
            ("created", "s-1"),
            ("start:startup", "s-1"),
            ("created", "s-1"),
            ("start:resume", "s-1"),
            ("created", "s-1"),
            ("start:resume", "s-1"),
        ]
    finally:
        await within(runtime.close())


async def test_failed_creation_leaves_no_stored_artifact() -> None:
    """C7.1-10 / C7.2-16: with a persistent store, a raising setup or a raising agent/created
    listener leaves no artifact; a following restore_or_create takes the create path."""
    runtime = await Runtime.open(store="memory://")
    try:
        store = runtime.sessions.persistence
        assert store is not None
        starts: list[str] = []
        runtime.hooks.on("agent/session-start", lambda p: starts.append(p.source))

        def failing_setup(scope: AgentScope) -> None:
            raise KeyError("setup failed")

        with pytest.raises(KeyError):
            await runtime.agents.create(
                session_id="s-1", agent_options=OPTIONS, setup=failing_setup
            )
        assert not await store.exists("s-1")

        def failing_listener(payload: Any) -> None:
            payload.agent.inject(user_message("c1"))
            raise LookupError("listener failed")

        remove = runtime.hooks.on("agent/created", failing_listener)
        with pytest.raises(LookupError):
            await runtime.agents.create(session_id="s-1", agent_options=OPTIONS)
        remove()
        assert not await store.exists("s-1")

        handle = await runtime.agents.restore_or_create(session_id="s-1", agent_options=OPTIONS)
        assert starts == ["startup"]
        assert compact(handle.agent.session) == []
    finally:
        await within(runtime.close())


async def test_disposed_listener_sees_the_whole_log_stored() -> None:
    """C7.2-21: with a persistent store, inside agent/disposed the store already holds every
    event of the log (the write handle was flushed and closed)."""
    runtime = await Runtime.open(store="memory://")
    adapter = ScriptedAdapter([HANG])
    runtime.llm.register_adapter(["mock"], adapter)
    try:
        store = runtime.sessions.persistence
        assert isinstance(store, MemoryStore)
        seen: list[tuple[int, int]] = []

        def on_disposed(payload: Any) -> None:
            seen.append((len(store.raw(payload.agent.id)), len(payload.agent.session.events)))

        runtime.hooks.on("agent/disposed", on_disposed)
        handle = await runtime.agents.create(session_id="s-1", agent_options=OPTIONS)
        handle.agent.followup(user_message("u1"))
        await wait_all_tasks_blocked()
        await within(handle.dispose())
        (stored, logged) = seen[0]
        assert stored == logged
        assert compact(handle.agent.session, only=("T",)) == ["T+1", "T-1:aborted"]
        reloaded = await store.load("s-1")
        assert [e.type for e in reloaded] == [e.type for e in handle.agent.session.events]
    finally:
        await within(runtime.close())
