"""Session bundles (cassettes): export, import into any store, hostile files, assert_replay."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerloop import (
    AgentOptions,
    ImageBlock,
    Runtime,
    SessionConflictError,
    SessionStorageError,
    TextBlock,
    tool,
    user_message,
)
from steerloop.evals import assert_replay, export_bundle, load_bundle, replay
from steerloop.evals._bundle import Blob, read_bundle, write_bundle
from steerloop.session import SessionEvent, SessionStore
from steerloop.testing import ScriptedAdapter, text_response, tool_call_response

from ..media import png
from ..session.backends import POSTGRES_URL, scratch_schema
from ..support import within

REC = AgentOptions(provider="rec", model="old")
NEW = AgentOptions(provider="new", model="candidate")


@tool(concurrency_safe=True)
async def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    return f"{city}: 21 °C"


def _script() -> list[Any]:
    return [
        tool_call_response("c1", "lookup", {"city": "Paris"}),
        text_response("Paris is at 21 °C."),
        text_response("You're welcome."),
    ]


async def record(rt: Runtime, session_id: str = "s-1") -> None:
    rt.tools.register(lookup)
    rt.llm.register_adapter(["rec"], ScriptedAdapter(_script()))
    handle = await rt.agents.create(session_id=session_id, agent_options=REC)
    await within(handle.agent.run("weather in Paris?"))
    await within(handle.agent.run("thanks"))
    await handle.dispose()


async def export_to(store: SessionStore, session_id: str, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as out:
        await export_bundle(store, session_id, out)


async def cassette(tmp_path: Path) -> Path:
    """The recorded session as a bundle file."""
    path = tmp_path / "weather.bundle"
    async with Runtime.open(store="memory://") as rt:
        await record(rt)
        assert rt.sessions.persistence is not None
        await export_to(rt.sessions.persistence, "s-1", path)
    return path


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    async for name in scratch_schema():
        yield name


async def test_a_bundle_round_trip_between_sqlite_and_postgresql(
    tmp_path: Path, pg_schema: str
) -> None:
    """SQLite → bundle → PostgreSQL → bundle → SQLite: the events and the header come back
    as stored; a replay of the imported session reads it like the original."""
    from steerloop.session._postgres import PostgresStore

    sqlite_url = f"sqlite:///{tmp_path / 'a.db'}"
    first, second = tmp_path / "a.bundle", tmp_path / "b.bundle"
    async with Runtime.open(store=sqlite_url) as rt:
        await record(rt)
        store = rt.sessions.persistence
        assert store is not None
        original = await store.load("s-1")
        header = await store.load_header("s-1")
        await export_to(store, "s-1", first)

    postgres = PostgresStore(POSTGRES_URL, schema=pg_schema)
    try:
        async with Runtime.open(store=postgres) as rt:
            assert await load_bundle(first, rt) == "s-1"
            assert await postgres.load("s-1") == original
            assert await postgres.load_header("s-1") == header
            rt.llm.register_adapter(["new"], ScriptedAdapter(_script()))
            report = await within(replay(rt, "s-1", agent_options=NEW))
            assert report.diverged_at is None
            assert report.totals.matched == 1
            await export_to(postgres, "s-1", second)
    finally:
        await postgres.close()  # a store handed to the runtime is the caller's to close

    async with Runtime.open(store=f"sqlite:///{tmp_path / 'b.db'}") as rt:
        assert await load_bundle(second, rt, session_id="copy") == "copy"
        store = rt.sessions.persistence
        assert store is not None
        assert await store.load("copy") == original
        copied = await store.load_header("copy")
        assert {**copied, "id": "s-1"} == header
        with pytest.raises(SessionConflictError):
            await load_bundle(second, rt, session_id="copy")
    assert first.read_text(encoding="utf-8") == second.read_text(encoding="utf-8")


async def test_the_bundle_format(tmp_path: Path) -> None:
    """A first line saying what follows, one line per event as stored, then the blobs."""
    async with Runtime.open(store="memory://") as rt:
        await record(rt)
        store = rt.sessions.persistence
        assert store is not None
        out = io.StringIO()
        assert await export_bundle(store, "s-1", out) == len(await store.load("s-1"))
        events = await store.load("s-1")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["format"] == "steerloop-session-bundle"
    assert lines[0]["version"] == 1
    assert (lines[0]["session_id"], lines[0]["events"], lines[0]["blobs"]) == (
        "s-1",
        len(events),
        0,
    )
    assert lines[1:] == [e.to_json() for e in events]
    data = b"\x89PNG\r\n\x1a\n..."
    blob = Blob("sha256:" + hashlib.sha256(data).hexdigest(), data, "image/png")
    out = io.StringIO()
    write_bundle(out, "s-1", {}, events, [blob])
    path = tmp_path / "with-blob.bundle"
    path.write_text(out.getvalue(), encoding="utf-8")
    assert read_bundle(path).blobs == (blob,)
    assert json.loads(out.getvalue().splitlines()[-1]) == {
        "blob": blob.hash,
        "media_type": "image/png",
        "data": base64.b64encode(data).decode(),
    }


def _bundle_lines(events: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "format": "steerloop-session-bundle",
            "version": 1,
            "session_id": "s-1",
            "header": {},
            "events": events,
            "blobs": 0,
        }
    ]


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _blob_line(data: bytes, name: str | None = None) -> dict[str, Any]:
    return {
        "blob": name or "sha256:" + hashlib.sha256(data).hexdigest(),
        "media_type": None,
        "data": base64.b64encode(data).decode(),
    }


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([{"format": "other"}], "line 1: not a steerloop session bundle"),
        ([{**_bundle_lines()[0], "version": 2}], "bundle version 2 is not one this build reads"),
        ([{**_bundle_lines()[0], "session_id": "a\nb"}], "session_id must be 1 to 128"),
        ([{**_bundle_lines()[0], "events": -1}], "events must be an integer from 0"),
        ([{**_bundle_lines()[0], "events": True}], "events must be an integer from 0"),
        ([{**_bundle_lines()[0], "header": []}], "header must be a JSON object"),
        (_bundle_lines(events=1), "line 2: the bundle ends early"),
        (
            [*_bundle_lines(events=1), {"seq": 2, "time": 0, "type": "turn/start", "data": {}}],
            "seq",
        ),
        ([*_bundle_lines(), {"extra": 1}], "line 2: more lines than the 0 events and 0 blobs"),
        (
            [{**_bundle_lines()[0], "blobs": 1}, _blob_line(b"x", "sha256:" + "0" * 64)],
            "hash to something else",
        ),
        (
            [{**_bundle_lines()[0], "blobs": 1}, {**_blob_line(b"x"), "data": "!!"}],
            "data is not base64",
        ),
        (
            [{**_bundle_lines()[0], "blobs": 1}, {**_blob_line(b"x"), "blob": "md5:x"}],
            "blob must be sha256:<64 lowercase hex>",
        ),
        (
            [{**_bundle_lines()[0], "blobs": 2}, _blob_line(b"x"), _blob_line(b"x")],
            "appears twice",
        ),
    ],
)
async def test_a_hostile_bundle_is_refused_and_stores_nothing(
    tmp_path: Path, lines: list[Any], message: str
) -> None:
    path = _write(tmp_path / "bad.bundle", lines)
    async with Runtime.open(store="memory://") as rt:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            await load_bundle(path, rt)
        assert await rt.sessions.persistence.list() == ()  # type: ignore[union-attr]


async def test_unreadable_bundle_files_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not JSON, not UTF-8, a line past the bound: each a ``ValueError`` naming the line."""
    text = tmp_path / "text.bundle"
    text.write_text("hello\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: not JSON"):
        read_bundle(text)
    binary = tmp_path / "binary.bundle"
    binary.write_bytes(b"\xff\xfe\x00\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        read_bundle(binary)
    import steerloop.evals._bundle as bundle_module

    monkeypatch.setattr(bundle_module, "MAX_LINE", 50)
    long = _write(tmp_path / "long.bundle", [{**_bundle_lines()[0], "header": {"x": "y" * 60}}])
    with pytest.raises(ValueError, match="line 1: a line longer than 50 characters"):
        read_bundle(long)


async def test_a_bundle_carries_the_images_of_its_session(tmp_path: Path) -> None:
    """Export writes each blob the events name once (bytes in base64); an import into another
    store puts them before the events, and a resumed run sends the same bytes."""
    image = ImageBlock("image/png", png(5, 5), name="shot.png")
    async with Runtime.open(store=f"sqlite:///{tmp_path / 'a.db'}") as rt:
        rt.llm.register_adapter(["rec"], ScriptedAdapter([text_response("a square")]))
        agent = (await rt.agents.create(session_id="s-1", agent_options=REC)).agent
        agent.followup(user_message([TextBlock("what?"), image]))
        await within(agent.when_idle())
        assert rt.store is not None
        out = io.StringIO()
        await export_bundle(rt.store, "s-1", out)
    path = tmp_path / "s.bundle"
    path.write_text(out.getvalue(), encoding="utf-8")
    assert read_bundle(path).blobs == (Blob(image.blob or "", png(5, 5), "image/png"),)
    async with Runtime.open(store="memory://") as rt:
        assert await load_bundle(path, rt, session_id="copy") == "copy"
        adapter = ScriptedAdapter([text_response("still a square")])
        rt.llm.register_adapter(["rec"], adapter)
        agent = (await rt.agents.resume(resume_session_id="copy", agent_options=REC)).agent
        agent.followup(user_message("and?"))
        await within(agent.when_idle())
        [sent] = [b for m in adapter.requests[0].messages for b in m.content if b == image]
        assert isinstance(sent, ImageBlock) and sent.data == png(5, 5)


async def test_a_bundle_naming_a_blob_it_does_not_carry_is_not_stored(tmp_path: Path) -> None:
    """Hostile: an event names a blob neither the bundle nor the store holds."""
    ghost = ImageBlock("image/png", png(2, 2))
    event = SessionEvent(
        seq=1, time=1, type="user/message", data=user_message([ghost]), surface_op="append"
    )
    path = _write(tmp_path / "b.bundle", [{**_bundle_lines()[0], "events": 1}, event.to_json()])
    async with Runtime.open(store="memory://") as rt:
        with pytest.raises(SessionStorageError, match=f"references blob {ghost.blob}"):
            await load_bundle(path, rt)
        assert rt.store is not None and not await rt.store.exists("s-1")


async def test_assert_replay_passes_and_fails_with_the_divergence(tmp_path: Path) -> None:
    """A cassette as a regression test: the same model passes (and returns the report); a
    model that calls another tool fails naming the turn, step and call."""
    path = await cassette(tmp_path)

    async with Runtime.open(store="memory://") as rt:
        rt.llm.register_adapter(["new"], ScriptedAdapter(_script()))
        report = await within(assert_replay(path, agent_options=NEW, rt=rt))
        assert report.diverged_at is None
        # The same cassette again in the same runtime: imported under another id.
        rt.llm.register_adapter(
            ["new"],
            ScriptedAdapter(
                [
                    tool_call_response("c1", "lookup", {"city": "Oslo"}),
                    text_response("Oslo is at 9 °C."),
                    text_response("You're welcome."),
                ]
            ),
        )
        with pytest.raises(AssertionError) as failed:
            await within(assert_replay(path, agent_options=NEW, rt=rt))
    message = str(failed.value)
    assert message.startswith(
        f"the replay of {path} with new/candidate diverged at turn 1, step 1: called "
        '`lookup({"city":"Oslo"})` (answered NOT_RECORDED), not in the recording; the '
        'recording called `lookup({"city":"Paris"})`'
    )


async def test_assert_replay_text_and_outcome(tmp_path: Path) -> None:
    """Another final answer passes unless ``same_text``; another outcome always fails."""
    path = await cassette(tmp_path)
    worded = [
        tool_call_response("c1", "lookup", {"city": "Paris"}),
        text_response("21 °C in Paris."),
        text_response("You're welcome."),
    ]
    async with Runtime.open(store="memory://") as rt:
        rt.llm.register_adapter(["new"], ScriptedAdapter(list(worded)))
        report = await within(assert_replay(path, agent_options=NEW, rt=rt))
        assert [d.kind for d in report.divergences] == ["text"]
        rt.llm.register_adapter(["new"], ScriptedAdapter(list(worded)))
        with pytest.raises(AssertionError, match="turn 1, step 2: another final answer"):
            await within(assert_replay(path, agent_options=NEW, rt=rt, same_text=True))
        rt.llm.register_adapter(["new"], ScriptedAdapter(worded[:2]))  # turn 2 fails
        with pytest.raises(AssertionError, match="turn 2, step 1: the turn ended error"):
            await within(assert_replay(path, agent_options=NEW, rt=rt, same_tools=False))
    with pytest.raises(ValueError, match="needs a runtime with a store"):
        async with Runtime.open() as rt:
            await assert_replay(path, agent_options=NEW, rt=rt)


async def test_assert_replay_without_a_runtime_uses_the_configured_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rt=None``: an in-memory runtime with the environment's providers; a provider that is
    not configured fails the turns before any call, so the assertion fails."""
    path = await cassette(tmp_path)
    with pytest.raises(AssertionError, match="turn 1, step 1: the recording called `lookup"):
        await within(assert_replay(path, agent_options=AgentOptions(provider="nobody", model="m")))
