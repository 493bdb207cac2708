"""Approvals over HTTP (API.md "Service", EVENTS.md §2.4a): ``GET /v1/sessions/{id}`` lists
the pending calls, ``POST /v1/sessions/{id}/approvals/{call_id}`` decides one as the
session's next command; the SSE feed and AG-UI show the two durable events. Real uvicorn on
127.0.0.1:0 over a SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import EventType

from steerloop import AgentOptions, Runtime, define_tool
from steerloop.service import Profile, create_app
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response
from steerloop.workspace import install_approval
from tests.agent.test_approvals_crash import kill_while_pending

from .aguisupport import agui_run, run_input, user, wire
from .served import read_sse, served, turn_ends, types, wait_for_log

pytestmark = pytest.mark.timeout(90)
REASON = "'write' may change the workspace"
APPROVAL_TYPES = ("tool/call", "tool/approval-requested", "tool/approval-decided", "tool/result")


class Asking:
    """A profile whose ``write`` tool is held by ``install_approval(rt, "ask")``."""

    def __init__(self, *script: Any) -> None:
        self.adapter = ScriptedAdapter(list(script))
        self.ran: list[str] = []

    def profiles(self, rt: Runtime) -> list[Profile]:
        rt.llm.register_adapter(["mock"], self.adapter)

        def write(args: Any, exec: Any) -> str:
            self.ran.append(exec.call_id)
            return "written"

        rt.tools.register(
            define_tool(
                name="write", description="writes", parameters={"type": "object"}, execute=write
            )
        )
        install_approval(rt, "ask")
        return [Profile(name="default", options=AgentOptions(provider="mock", model="m"))]


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


def asked(events: list[dict[str, Any]]) -> bool:
    return "tool/approval-requested" in types(events)


def approval_log(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for e in events:
        data = e["data"]
        if e["type"] == "tool/result":
            error = data.get("error") or {}
            out.append(("result", data["message"]["call_id"], error.get("code")))
        elif e["type"] == "tool/approval-decided":
            out.append(("decided", data["call_id"], data["decision"], data.get("by")))
        elif e["type"] in APPROVAL_TYPES:
            out.append((e["type"].split("/")[-1], data["call_id"]))
    return out


async def test_allow_over_http_runs_the_call_and_the_feed_shows_both_events(
    tmp_path: Path,
) -> None:
    """GET lists the pending call; hostile decisions are refused (422 bad decision or
    field, 404 unknown call or session) with nothing written; allow → 202, applied as a
    command: requested · decided(allow, by http) · result; a second decision → 409."""
    model = Asking(tool_call_response("c1", "write", {"path": "a"}), text_response("done"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        events = await wait_for_log(client, "s", asked)
        info = (await client.get("/v1/sessions/s")).json()
        assert info["status"] == "running"
        assert info["pending_approvals"] == [
            {"call_id": "c1", "name": "write", "arguments": '{"path": "a"}', "reason": REASON}
        ]
        base = "/v1/sessions/s/approvals"
        for path, body, status, code in [
            (f"{base}/c1", {"decision": "maybe"}, 422, "invalid_decision"),
            (f"{base}/c1", {}, 422, "invalid_decision"),
            (f"{base}/c1", {"decision": "allow", "by": "me"}, 422, "invalid_body"),
            (f"{base}/c1", {"decision": "allow", "reason": 7}, 422, "invalid_body"),
            (f"{base}/nope", {"decision": "allow"}, 404, "approval_not_found"),
            ("/v1/sessions/nope/approvals/c1", {"decision": "allow"}, 404, "session_not_found"),
        ]:
            answer = await client.post(path, json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), body
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == events
        assert model.ran == []
        answer = await client.post(f"{base}/c1", json={"decision": "allow"})
        assert answer.status_code == 202
        assert set(answer.json()) == {"cmd_seq"}
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert approval_log(events) == [
            ("call", "c1"),
            ("approval-requested", "c1"),
            ("decided", "c1", "allow", "http"),
            ("result", "c1", None),
        ]
        assert model.ran == ["c1"]
        assert events[-1]["data"]["reason"]["kind"] == "completed"
        again = await client.post(f"{base}/c1", json={"decision": "deny"})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "ALREADY_DECIDED")
        assert (await client.get("/v1/sessions/s")).json()["pending_approvals"] == []
        feed = await read_sse(client, "/v1/sessions/s/events", lambda e: e.event == "turn/end")
        shown = [e.event for e in feed if e.event in APPROVAL_TYPES]
        assert shown == list(APPROVAL_TYPES)
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == events


async def test_deny_over_http_answers_denied_and_a_queued_second_decision_is_409(
    tmp_path: Path,
) -> None:
    """deny with a reason → result DENIED carrying it; a second POST right after the first
    is refused 409 (queued or applied, never two decisions)."""
    model = Asking(tool_call_response("c1", "write", {}), text_response("ok"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        await wait_for_log(client, "s", asked)
        first = await client.post(
            "/v1/sessions/s/approvals/c1", json={"decision": "deny", "reason": "not now"}
        )
        second = await client.post("/v1/sessions/s/approvals/c1", json={"decision": "allow"})
        assert first.status_code == 202
        assert (second.status_code, second.json()["error"]["code"]) == (409, "ALREADY_DECIDED")
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert approval_log(events) == [
            ("call", "c1"),
            ("approval-requested", "c1"),
            ("decided", "c1", "deny", "http"),
            ("result", "c1", "DENIED"),
        ]
        (result,) = [e for e in events if e["type"] == "tool/result"]
        assert result["data"]["message"]["content"] == [{"type": "text", "text": "not now"}]
        assert model.ran == []


async def test_a_decision_after_the_turn_was_cancelled_is_404(tmp_path: Path) -> None:
    """Cancel while pending: the call ends ABORTED_BEFORE_DISPATCH with no decision, the
    turn ends aborted, nothing is pending, and a later decision is refused (404)."""
    model = Asking(tool_call_response("c1", "write", {}))
    async with served(create_app(sqlite_url(tmp_path), model.profiles)) as client:
        await client.post("/v1/sessions", json={"session_id": "s", "input": "go"})
        await wait_for_log(client, "s", asked)
        assert (await client.post("/v1/sessions/s/cancel", json={})).status_code == 202
        events = await wait_for_log(client, "s", lambda ev: turn_ends(ev) == 1)
        assert approval_log(events) == [
            ("call", "c1"),
            ("approval-requested", "c1"),
            ("result", "c1", "ABORTED_BEFORE_DISPATCH"),
        ]
        assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
        assert (await client.get("/v1/sessions/s")).json()["pending_approvals"] == []
        late = await client.post("/v1/sessions/s/approvals/c1", json={"decision": "allow"})
        assert (late.status_code, late.json()["error"]["code"]) == (404, "approval_not_found")
        assert (await client.get("/v1/sessions/s/log")).json()["events"] == events
        assert model.ran == []


async def test_an_unloaded_crashed_session_lists_its_stored_pending_approval(
    tmp_path: Path,
) -> None:
    """A session whose process was killed while an approval was pending: unloaded, GET
    lists the request from the stored log; a decision loads (and repairs) the session, so
    the call is answered TOOL_NOT_STARTED and the decision is refused (404)."""
    path = tmp_path / "sessions.db"
    acked = await kill_while_pending(path)
    model = Asking(text_response("unused"))
    async with served(create_app(f"sqlite:///{path}", model.profiles)) as client:
        info = (await client.get("/v1/sessions/s")).json()
        assert (info["status"], info["last_seq"]) == ("unloaded", acked)
        assert info["pending_approvals"] == [
            {"call_id": "c1", "name": "write", "arguments": "{}", "reason": REASON}
        ]
        late = await client.post("/v1/sessions/s/approvals/c1", json={"decision": "allow"})
        assert (late.status_code, late.json()["error"]["code"]) == (404, "approval_not_found")
        events = (await client.get("/v1/sessions/s/log")).json()["events"]
        assert types(events)[acked:] == ["tool/result", "step/end", "turn/end", "session/end-seed"]
        assert events[acked]["data"]["error"]["code"] == "TOOL_NOT_STARTED"
        assert (await client.get("/v1/sessions/s")).json()["pending_approvals"] == []
        assert model.ran == []


async def test_ag_ui_ends_a_run_with_the_approval_interrupt(tmp_path: Path) -> None:
    """AG-UI 1.0: a held call ends the run with ``outcome interrupt`` (the call, its
    arguments, the reason); a decision over HTTP is the same decision a ``resume`` makes,
    and the next run shows the turn going on from its waiting step."""
    model = Asking(tool_call_response("c1", "write", {}), text_response("done"))
    async with served(create_app(sqlite_url(tmp_path), model.profiles)) as client:
        first = await agui_run(client, run_input("t1", "r1", user("u1", "start")))
        assert first[-1].type == EventType.RUN_FINISHED
        (interrupt,) = wire(first[-1])["outcome"]["interrupts"]
        assert (interrupt["id"], interrupt["reason"]) == ("c1", "tool_approval")
        assert interrupt["metadata"] == {"tool": "write", "arguments": "{}"}
        decided = await client.post("/v1/sessions/t1/approvals/c1", json={"decision": "allow"})
        assert decided.status_code == 202
        # a resume for the decided call is not an error and decides nothing more
        resume = [{"interruptId": "c1", "status": "resolved", "payload": {"decision": "deny"}}]
        second = await agui_run(client, run_input("t1", "r2", resume=resume))
        assert wire(second[-1])["outcome"] == {"type": "success"}
        assert [e.type for e in second if e.type == EventType.TOOL_CALL_RESULT] in (
            [EventType.TOOL_CALL_RESULT],
            [],  # the result was committed before the run began: it is in the snapshot
        )
        log = (await client.get("/v1/sessions/t1/log")).json()["events"]
        assert [e["data"] for e in log if e["type"] == "tool/approval-decided"] == [
            {"call_id": "c1", "decision": "allow", "by": "http"}
        ]


async def test_the_default_serve_profile_asks_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``steerloop serve``'s default profile holds writers with ``ToolDecision.ask`` (answered
    over HTTP) instead of refusing them read-only; reads are not asked about."""
    from steerloop import ToolDecision, hooks
    from steerloop._signal import AbortController
    from steerloop.cli._serve import default_profiles
    from steerloop.cli._settings import load_settings
    from steerloop.tools import ToolExec, ToolHookPayload

    (tmp_path / "steerloop.toml").write_text(
        'model = "local/m"\n\n[providers.local]\nkind = "openai"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    rt = await Runtime.open()
    try:
        profiles = await default_profiles(load_settings(tmp_path))(rt)
        assert [p.name for p in profiles] == ["default"]

        async def decide(name: str) -> Any:
            exec = ToolExec(
                call_id="c1", name=name, arguments={"path": "a"}, raw_arguments="{}",
                signal=AbortController().signal, agent=None,  # type: ignore[arg-type]
            )  # fmt: skip
            return await rt.hooks.serial(hooks.TOOLS_PRE_EXECUTE, ToolHookPayload(exec))

        assert await decide("write_file") == ToolDecision.ask(
            "'write_file' may change the workspace"
        )
        assert await decide("read_file") is None
    finally:
        await rt.close(timeout=30)
