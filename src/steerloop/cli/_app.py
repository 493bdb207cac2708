"""The ``steerloop`` command."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .._runtime import Runtime
from ..errors import SessionPersistenceError, SteerloopError
from ..messages import TextBlock
from ..session._events import SessionEvent
from ..session._sqlite import _sqlite_path
from ._render import EventRenderer
from ._settings import Settings, load_settings

__all__ = ["app", "main"]

app = typer.Typer(
    name="steerloop",
    help="A durable, steerable agent loop: talk to an agent while it runs.",
    no_args_is_help=True,
    add_completion=False,
)
sessions_app = typer.Typer(help="Browse stored sessions.", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

StoreOption = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: the embedded SQLite store).")
]


def _settings(store: str | None) -> Settings:
    try:
        settings = load_settings()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if store is not None:
        from dataclasses import replace

        settings = replace(settings, store=store)
    _ensure_store_dir(settings.store)
    return settings


def _ensure_store_dir(url: str) -> None:
    if not url.startswith("sqlite:"):
        return
    try:
        path = _sqlite_path(url)
    except ValueError:
        return  # Runtime.open reports the bad URL
    Path(path).parent.mkdir(parents=True, exist_ok=True)


def _fail(console: Console, message: str, code: int = 1) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


@app.command()
def demo(store: StoreOption = None) -> None:
    """Run an offline scenario (scripted model, no API key) on the embedded store."""
    from ._demo import run_demo

    console = Console()
    settings = _settings(store)
    try:
        session_id = asyncio.run(run_demo(settings.store, console))
    except SteerloopError as exc:
        raise _fail(console, str(exc)) from None
    console.print(f"\nsession [bold]{session_id}[/bold] is stored in {settings.store}")
    console.print(
        "try: [bold]steerloop sessions ls[/bold]  ·  "
        f"[bold]steerloop sessions show {session_id}[/bold]"
    )


async def _with_store(url: str, job: Any) -> Any:
    async with await Runtime.open(store=url) as rt:
        store = rt.sessions.persistence
        assert store is not None
        return await job(store)


@sessions_app.command("ls")
def sessions_ls(store: StoreOption = None) -> None:
    """List stored sessions."""
    console = Console()
    settings = _settings(store)

    async def job(backend: Any) -> list[tuple[str, str, str, str]]:
        rows = []
        for session_id in await backend.list():
            info = await backend.info(session_id)  # the last event only, not the whole log
            parent = info.header.get("parent_session") or "-"
            rows.append((session_id, str(info.events), _when(info.last_time or 0), parent))
        return rows

    try:
        rows = asyncio.run(_with_store(settings.store, job))
    except SessionPersistenceError as exc:
        raise _fail(console, str(exc)) from None
    table = Table("session", "events", "last activity", "parent")
    for row in rows:
        table.add_row(*row)
    console.print(table if rows else "no sessions stored yet — try [bold]steerloop demo[/bold]")


def _when(ms: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def _load(settings: Settings, session_id: str, console: Console) -> tuple[SessionEvent, ...]:
    async def job(backend: Any) -> tuple[SessionEvent, ...]:
        events: tuple[SessionEvent, ...] = await backend.load(session_id)
        return events

    try:
        return asyncio.run(_with_store(settings.store, job))
    except SessionPersistenceError as exc:
        raise _fail(console, str(exc)) from None


@sessions_app.command("show")
def sessions_show(session_id: str, store: StoreOption = None) -> None:
    """Show a session as the chat renders it."""
    console = Console()
    EventRenderer(console).render_all(_load(_settings(store), session_id, console))


@sessions_app.command("export")
def sessions_export(
    session_id: str,
    format: Annotated[str, typer.Option("--format", help="jsonl or markdown")] = "jsonl",
    store: StoreOption = None,
) -> None:
    """Export a session's log (jsonl: every event; markdown: the conversation)."""
    console = Console()
    if format not in ("jsonl", "markdown"):
        raise typer.BadParameter("--format must be jsonl or markdown")
    events = _load(_settings(store), session_id, console)
    if format == "jsonl":
        for event in events:
            sys.stdout.write(json.dumps(event.to_json(), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(_markdown(session_id, events))


def _markdown(session_id: str, events: tuple[SessionEvent, ...]) -> str:
    from ..session._session import Session

    lines = [f"# Session {session_id}", ""]
    for message in Session(session_id, seed=events, repair=False).derive_messages():
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        if message.role == "assistant":
            calls = [f"`{b.name}({b.arguments})`" for b in message.content if b.type == "tool-call"]
            text = "\n".join(filter(None, [text, *calls]))
        lines += [f"**{message.role}**", "", text or "_(empty)_", ""]
    return "\n".join(lines)


@sessions_app.command("replay")
def sessions_replay(
    session_id: str,
    speed: Annotated[float, typer.Option(help="Playback speed factor.")] = 4.0,
    store: StoreOption = None,
) -> None:
    """Replay a session with its original timing (sped up)."""
    import time

    console = Console()
    if speed <= 0:
        raise typer.BadParameter("--speed must be positive")
    events = _load(_settings(store), session_id, console)
    renderer = EventRenderer(console)
    previous = events[0].time if events else 0
    for event in events:
        time.sleep(min(max(event.time - previous, 0) / 1000 / speed, 1.0))
        previous = event.time
        renderer.render(event)


_EXIT_CODES = {"completed": 0, "error": 1, "max-tokens": 3, "blocked": 4, "aborted": 130}

ModelOption = Annotated[
    str | None, typer.Option("--model", "-m", help="PROVIDER/MODEL, e.g. deepseek/deepseek-chat.")
]
SessionOption = Annotated[
    str | None, typer.Option("--session", "-s", help="Session id to continue (or create).")
]
ApproveOption = Annotated[
    str | None,
    typer.Option("--approve", help="Tool approval: ask, auto or read-only (default from config)."),
]


def _approve_mode(settings: Settings, approve: str | None) -> str:
    mode = approve or settings.approve
    if mode not in ("ask", "auto", "read-only"):
        raise typer.BadParameter("--approve must be ask, auto or read-only")
    return mode


@app.command()
def run(
    prompt: Annotated[str | None, typer.Argument(help="The prompt (optional with --goal).")] = None,
    model: ModelOption = None,
    session: SessionOption = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="Stream the session events as JSON lines.")
    ] = False,
    approve: ApproveOption = None,
    store: StoreOption = None,
    goal: Annotated[
        str | None,
        typer.Option("--goal", help="Pursue this goal round by round (after the prompt, if any)."),
    ] = None,
) -> None:
    """Run one turn (or a goal); the exit status follows the turn's end reason.

    0 completed · 1 error · 3 max-tokens · 4 blocked · 130 aborted (Ctrl-C). With --goal:
    0 goal complete · 4 goal blocked · 130 goal paused (Ctrl-C).
    """
    from ._run import run_once

    if prompt is None and goal is None:
        raise typer.BadParameter("give a PROMPT, --goal TEXT, or both")
    console = Console(stderr=json_lines)
    settings = _settings(store)
    mode = _approve_mode(settings, approve)
    if mode == "ask" and not sys.stdin.isatty():
        mode = "read-only"
    try:
        kind = asyncio.run(
            run_once(
                settings,
                prompt or "",
                model=model,
                session_id=session,
                approve=mode,
                json_lines=json_lines,
                console=console,
                goal=goal,
            )
        )
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc), 2) from None
    raise typer.Exit(_EXIT_CODES.get(kind, 1))


@app.command()
def chat(
    model: ModelOption = None,
    session: SessionOption = None,
    approve: ApproveOption = None,
    store: StoreOption = None,
) -> None:
    """Chat with an agent; type while it runs to steer it (Enter), /help for commands."""
    from ._chat import run_chat

    console = Console()
    settings = _settings(store)
    mode = _approve_mode(settings, approve)
    try:
        asyncio.run(
            run_chat(settings, model=model, session_id=session, approve=mode, console=console)
        )
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc), 2) from None


@app.command()
def serve(
    store: StoreOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port (0 picks a free one).")] = 8421,
    role: Annotated[str, typer.Option("--role", help="all, api or worker.")] = "all",
    profiles: Annotated[
        str | None, typer.Option("--profiles", help="MODULE:ATTR naming the profiles.")
    ] = None,
    token_env: Annotated[
        str, typer.Option("--token-env", help="Env var holding the API bearer token.")
    ] = "STEERLOOP_API_TOKEN",
    idle_unload: Annotated[
        float, typer.Option("--idle-unload", help="Unload a session idle this many seconds.")
    ] = 300.0,
    no_retry: Annotated[bool, typer.Option("--no-retry", help="No retry policy.")] = False,
) -> None:
    """Serve sessions over HTTP + SSE (extra steerloop[server])."""
    from ._serve import serve_main

    console = Console()
    settings = _settings(store)
    try:
        serve_main(
            settings,
            host=host,
            port=port,
            role=role,
            profiles=profiles,
            token_env=token_env,
            idle_unload=idle_unload,
            retry=not no_retry,
        )
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc), 2) from None


def main() -> None:
    """Entry point of the ``steerloop`` script."""
    app()
