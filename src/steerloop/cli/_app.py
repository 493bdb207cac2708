"""The ``steerloop`` command."""

from __future__ import annotations

# Imports are lazy: ``steerloop --version`` and ``--help`` load typer and this module only
# (``tests/cli/test_startup.py`` pins the set). A command imports what it needs inside its
# function (its own ``_command`` module, rich, the runtime); a sub-app module imported here
# (``_mcp``) imports only typer and the standard library at its top. So none of that is paid
# by the commands that do not run.
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._mcp import mcp_app
from ._version import package_version

if TYPE_CHECKING:
    from rich.console import Console

    from ..session._events import SessionEvent
    from ._session_setup import LiveOptions
    from ._settings import Settings

__all__ = ["app", "main"]

# Plain (click) help: typer's rich help labels every flag ``<bool>``.
app = typer.Typer(
    name="steerloop",
    help="A durable, steerable agent loop: talk to an agent while it runs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
sessions_app = typer.Typer(
    help="Browse stored sessions.", no_args_is_help=True, rich_markup_mode=None
)
eval_app = typer.Typer(
    help="Evaluate a model or prompt on recorded sessions.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(sessions_app, name="sessions")
app.add_typer(eval_app, name="eval")
app.add_typer(mcp_app, name="mcp")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Store URL, or a file path for SQLite (default: the embedded SQLite store).",
    ),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"steerloop {package_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """A durable, steerable agent loop: talk to an agent while it runs."""


def _settings(store: str | None, *, create: bool = True) -> Settings:
    """The settings with ``--store`` applied. ``create``: make the SQLite file's directory
    (the commands that write); the ``sessions`` commands read, and refuse a missing file."""
    from ._settings import load_settings, store_url

    try:
        settings = load_settings()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if store is not None:
        from dataclasses import replace

        settings = replace(settings, store=store_url(store))
    path = _sqlite_file(settings.store)
    if path is not None:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            raise _Missing(path)
    return settings


class _Missing(Exception):
    """The SQLite database a read-only command names does not exist."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"no session store at {path}")
        self.path = path


def _sqlite_file(url: str) -> Path | None:
    if not url.startswith("sqlite:"):
        return None
    from ..session._sqlite import _sqlite_path

    try:
        return Path(_sqlite_path(url))
    except ValueError:
        return None  # Runtime.open reports the bad URL


def _without_password(url: str) -> str:
    """``url`` fit for the screen: a password in it becomes ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def _fail(console: Console, message: str, code: int = 1) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


@app.command()
def demo(store: StoreOption = None) -> None:
    """Run an offline scenario (scripted model, no API key) on the embedded store."""
    import asyncio
    import shlex

    from rich.console import Console
    from rich.markup import escape

    from ..errors import SteerloopError
    from ._demo import run_demo

    console = Console()
    settings = _settings(store)
    try:
        session_id = asyncio.run(run_demo(settings.store, console))
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc)) from None
    if settings.store.startswith("memory:"):
        # Nothing outlives this process: a hint to list the store would find nothing.
        console.print(f"\nsession [bold]{session_id}[/bold] lived in memory and is gone")
        return
    shown = escape(_without_password(settings.store))
    console.print(f"\nsession [bold]{session_id}[/bold] is stored in {shown}")
    hint = "" if store is None else escape(f" --store {shlex.quote(_without_password(store))}")
    console.print(
        f"try: [bold]steerloop sessions ls{hint}[/bold]  ·  "
        f"[bold]steerloop sessions show {session_id}{hint}[/bold]"
    )


async def _with_store(url: str, job: Any) -> Any:
    from .._runtime import Runtime

    async with await Runtime.open(store=url) as rt:
        store = rt.sessions.persistence
        assert store is not None
        return await job(store)


@sessions_app.command("ls")
def sessions_ls(store: StoreOption = None) -> None:
    """List stored sessions."""
    import asyncio

    from rich.console import Console
    from rich.table import Table

    from ..errors import SessionPersistenceError

    console = Console()
    try:
        settings = _settings(store, create=False)
    except _Missing as exc:
        console.print(f"no sessions stored yet ({exc}) — try [bold]steerloop demo[/bold]")
        return

    async def job(backend: Any) -> list[tuple[str, str, str, str]]:
        rows = []
        for session_id in await backend.list():
            info = await backend.info(session_id)  # the last event only, not the whole log
            parent = info.header.get("parent_session") or "-"
            rows.append((session_id, str(info.events), _when(info.last_time or 0), parent))
        return rows

    try:
        rows = asyncio.run(_with_store(settings.store, job))
    except (ValueError, SessionPersistenceError) as exc:
        raise _fail(console, str(exc)) from None
    table = Table("session", "events", "last activity", "parent")
    for row in rows:
        table.add_row(*row)
    console.print(table if rows else "no sessions stored yet — try [bold]steerloop demo[/bold]")


def _when(ms: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "-"


def _load(store: str | None, session_id: str, console: Console) -> tuple[SessionEvent, ...]:
    import asyncio

    from ..errors import SessionPersistenceError

    try:
        settings = _settings(store, create=False)
    except _Missing as exc:
        raise _fail(console, str(exc)) from None

    async def job(backend: Any) -> tuple[SessionEvent, ...]:
        events: tuple[SessionEvent, ...] = await backend.load(session_id)
        return events

    try:
        return asyncio.run(_with_store(settings.store, job))
    except (ValueError, SessionPersistenceError) as exc:
        raise _fail(console, str(exc)) from None


@sessions_app.command("show")
def sessions_show(session_id: str, store: StoreOption = None) -> None:
    """Show a session as the chat renders it."""
    from rich.console import Console

    from ._render import EventRenderer

    console = Console()
    EventRenderer(console).render_all(_load(store, session_id, console))


@sessions_app.command("export")
def sessions_export(
    session_id: str,
    format: Annotated[
        str, typer.Option("--format", metavar="FORMAT", help="jsonl, markdown or bundle")
    ] = "jsonl",
    store: StoreOption = None,
    attachments: Annotated[
        Path | None,
        typer.Option(
            "--attachments",
            metavar="DIR",
            help="With markdown: write the session's images and files into DIR and link them.",
        ),
    ] = None,
) -> None:
    """Export a session's log (jsonl: every event; markdown: the conversation, naming its
    images and files; bundle: the session as one file that steerloop.evals.load_bundle
    imports into any store)."""
    import asyncio
    import json

    from rich.console import Console

    from ..errors import SessionPersistenceError

    console = Console()
    if format not in ("jsonl", "markdown", "bundle"):
        raise typer.BadParameter("--format must be jsonl, markdown or bundle")
    if attachments is not None and format != "markdown":
        raise typer.BadParameter("--attachments goes with --format markdown")
    if format == "bundle":
        _export_bundle(store, session_id, console)
        return
    events = _load(store, session_id, console)
    if format == "jsonl":
        for event in events:
            sys.stdout.write(json.dumps(event.to_json(), ensure_ascii=False) + "\n")
        return
    links: dict[str, str] = {}
    if attachments is not None:
        from ._attach import write_attachments

        async def job(backend: Any) -> dict[str, str]:
            return await write_attachments(backend, session_id, events, attachments)

        try:
            links = asyncio.run(_with_store(_settings(store, create=False).store, job))
        except (OSError, SessionPersistenceError) as exc:
            raise _fail(console, f"writing the attachments: {exc}") from None
    sys.stdout.write(_markdown(session_id, events, links))


def _export_bundle(store: str | None, session_id: str, console: Console) -> None:
    import asyncio

    from ..errors import SessionPersistenceError
    from ..evals._bundle import export_bundle

    try:
        settings = _settings(store, create=False)
    except _Missing as exc:
        raise _fail(console, str(exc)) from None

    async def job(backend: Any) -> int:
        count: int = await export_bundle(backend, session_id, sys.stdout)
        return count

    try:
        asyncio.run(_with_store(settings.store, job))
    except (ValueError, SessionPersistenceError) as exc:
        raise _fail(console, str(exc)) from None


def _markdown(
    session_id: str, events: tuple[SessionEvent, ...], links: dict[str, str] | None = None
) -> str:
    from ..messages import TextBlock
    from ..session._session import Session
    from ._attach import markdown_attachments

    lines = [f"# Session {session_id}", ""]
    for message in Session._create(session_id, seed=events, repair=False).derive_messages():
        text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
        if message.role == "assistant":
            calls = [f"`{b.name}({b.arguments})`" for b in message.content if b.type == "tool-call"]
            text = "\n".join(filter(None, [text, *calls]))
        files = markdown_attachments(message.content, links or {})
        text = "\n\n".join(filter(None, [text, *files]))
        lines += [f"**{message.role}**", "", text or "_(empty)_", ""]
    return "\n".join(lines)


@sessions_app.command("replay")
def sessions_replay(
    session_id: str,
    speed: Annotated[
        float, typer.Option("--speed", metavar="FACTOR", help="Playback speed factor.")
    ] = 4.0,
    store: StoreOption = None,
) -> None:
    """Replay a session with its original timing (sped up)."""
    import time

    from rich.console import Console

    from ._render import EventRenderer

    console = Console()
    if speed <= 0:
        raise typer.BadParameter("--speed must be positive")
    events = _load(store, session_id, console)
    renderer = EventRenderer(console)
    previous = events[0].time if events else 0
    for event in events:
        time.sleep(min(max(event.time - previous, 0) / 1000 / speed, 1.0))
        previous = event.time
        renderer.render(event)


_EXIT_CODES = {"completed": 0, "error": 1, "max-tokens": 3, "blocked": 4, "aborted": 130}

ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", metavar="P/M", help="PROVIDER/MODEL, e.g. deepseek/deepseek-chat."
    ),
]
SessionOption = Annotated[
    str | None,
    typer.Option("--session", "-s", metavar="ID", help="Session id to continue (or create)."),
]
ApproveOption = Annotated[
    str | None,
    typer.Option(
        "--approve",
        metavar="MODE",
        help="Tool approval: ask, auto or read-only (default from config).",
    ),
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        metavar="N",
        help="Cap on output tokens per request (default: max_tokens of the config file).",
    ),
]
NoToolsOption = Annotated[
    bool, typer.Option("--no-tools", help="Register no workspace tools (a shorter prompt).")
]
NoRetryOption = Annotated[
    bool,
    typer.Option("--no-retry", help="Do not retry a failed model request (retry is on)."),
]
TemperatureOption = Annotated[
    float | None,
    typer.Option(
        "--temperature", metavar="T", help="Sampling temperature of every request (0 to 2)."
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="A request option of every request (repeatable): top_p=0.9, "
        "tool_choice=required, parallel_tool_calls=false, or any provider field; "
        "VALUE is JSON, else a string. Over [request] of steerloop.toml.",
    ),
]


def _request_options(temperature: float | None, sets: list[str] | None) -> dict[str, Any]:
    """``--set KEY=VALUE`` (repeatable) and ``--temperature``: request options."""
    import json

    from ..agent._options import validate_call

    call: dict[str, Any] = {}
    for item in sets or ():
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"--set takes KEY=VALUE, not {item!r}")
        try:
            call[key] = json.loads(raw)
        except ValueError:
            call[key] = raw  # a bare word: tool_choice=required
    if temperature is not None:
        call["temperature"] = temperature
    try:
        validate_call(call, "request")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return call


def _approve_mode(settings: Settings, approve: str | None) -> str:
    mode = approve or settings.approve
    if mode not in ("ask", "auto", "read-only"):
        raise typer.BadParameter("--approve must be ask, auto or read-only")
    return mode


def _live_options(
    command: str,
    approve: str,
    max_tokens: int | None,
    no_tools: bool,
    no_retry: bool,
    call: dict[str, Any],
) -> LiveOptions:
    from ._session_setup import LiveOptions

    if max_tokens is not None and not 0 < max_tokens < 2**53:
        raise typer.BadParameter("--max-tokens must be a positive integer")
    return LiveOptions(
        approve=approve,
        max_tokens=max_tokens,
        tools=not no_tools,
        retry=not no_retry,
        prefix=command,
        call=call,
    )


@app.command()
def run(
    prompt: Annotated[
        str | None,
        typer.Argument(metavar="PROMPT", help="The prompt (optional with --goal)."),
    ] = None,
    model: ModelOption = None,
    session: SessionOption = None,
    json_lines: Annotated[
        bool,
        typer.Option(
            "--json", help="Write the session events and live stream frames as JSON lines."
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option("--full", help="With --json: keep each message's raw stream records (large)."),
    ] = False,
    approve: ApproveOption = None,
    store: StoreOption = None,
    goal: Annotated[
        str | None,
        typer.Option(
            "--goal",
            metavar="TEXT",
            help="Pursue this goal round by round (after the prompt, if any).",
        ),
    ] = None,
    max_tokens: MaxTokensOption = None,
    no_tools: NoToolsOption = False,
    no_retry: NoRetryOption = False,
    temperature: TemperatureOption = None,
    set_: SetOption = None,
    output_schema: Annotated[
        Path | None,
        typer.Option(
            "--output-schema", help="A JSON-schema file; print the validated JSON answer."
        ),
    ] = None,
    attach: Annotated[
        list[Path] | None,
        typer.Option(
            "--attach",
            metavar="FILE",
            help="Send an image (PNG, JPEG, GIF, WEBP) or a file (PDF, text) with the prompt; "
            "repeatable.",
        ),
    ] = None,
) -> None:
    """Run one turn (or a goal); the exit status follows the turn's end reason.

    0 completed · 1 error · 3 max-tokens · 4 blocked · 130 aborted (Ctrl-C). With --goal:
    0 goal complete · 4 goal blocked · 130 goal paused (Ctrl-C).
    """
    import asyncio

    from rich.console import Console

    from ..errors import SteerloopError
    from ._run import run_once

    if prompt is None and goal is None:
        raise typer.BadParameter("give a PROMPT, --goal TEXT, or both")
    from ._attach import load_attachment

    try:
        attachments = [load_attachment(path) for path in attach or ()]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--attach") from None
    schema = None
    if output_schema is not None:
        if prompt is None or goal is not None:
            raise typer.BadParameter("--output-schema takes a PROMPT and no --goal")
        schema = _read_schema(output_schema)
    # The validated JSON is stdout's last line; rendered events go to stderr then.
    console = Console(stderr=json_lines or schema is not None)
    settings = _settings(store)
    mode = _approve_mode(settings, approve)
    if mode == "ask" and not sys.stdin.isatty():
        mode = "read-only"
    call = _request_options(temperature, set_)
    options = _live_options("run", mode, max_tokens, no_tools, no_retry, call)
    try:
        kind = asyncio.run(
            run_once(
                settings,
                prompt or "",
                model=model,
                session_id=session,
                options=options,
                json_lines=json_lines,
                console=console,
                goal=goal,
                full=full,
                output_schema=schema,
                attachments=attachments,
            )
        )
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc), 2) from None
    raise typer.Exit(_EXIT_CODES.get(kind, 1))


def _read_schema(path: Path) -> dict[str, Any]:
    import json

    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"cannot read the output schema {path}: {exc}") from None
    if not isinstance(schema, dict):
        raise typer.BadParameter(f"the output schema {path} is not a JSON object")
    return schema


@app.command()
def chat(
    model: ModelOption = None,
    session: SessionOption = None,
    approve: ApproveOption = None,
    store: StoreOption = None,
    max_tokens: MaxTokensOption = None,
    no_tools: NoToolsOption = False,
    no_retry: NoRetryOption = False,
    temperature: TemperatureOption = None,
    set_: SetOption = None,
) -> None:
    """Chat with an agent; type while it runs to steer it (Enter), /help for commands."""
    import asyncio

    from rich.console import Console

    from ..errors import SteerloopError
    from ._chat import run_chat

    console = Console()
    settings = _settings(store)
    mode = _approve_mode(settings, approve)
    call = _request_options(temperature, set_)
    options = _live_options("chat", mode, max_tokens, no_tools, no_retry, call)
    try:
        asyncio.run(
            run_chat(settings, model=model, session_id=session, options=options, console=console)
        )
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc), 2) from None


@app.command()
def serve(
    store: StoreOption = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="P/M",
            help="PROVIDER/MODEL of the default profile (default: the config's, as chat).",
        ),
    ] = None,
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
    capacity: Annotated[
        int,
        typer.Option(
            "--capacity", help="Sessions this process hosts at most (PostgreSQL workers)."
        ),
    ] = 100,
    drain_timeout: Annotated[
        float,
        typer.Option(
            "--drain-timeout",
            help="On shutdown (PostgreSQL), seconds running turns get to end before they "
            "are handed to another worker.",
        ),
    ] = 10.0,
    no_retry: Annotated[bool, typer.Option("--no-retry", help="No retry policy.")] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name to answer besides loopback and --host (repeatable; for a "
            "reverse proxy; *.domain for every name under it).",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            help="A browser origin (scheme://host[:port]) allowed besides the server's own "
            "(repeatable; gets CORS headers).",
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option("--max-connections", help="Open connections at most, then 503 [512]."),
    ] = None,
    max_streams: Annotated[
        int | None, typer.Option("--max-streams", help="SSE streams at most, then 503 [256].")
    ] = None,
    max_streams_per_session: Annotated[
        int | None,
        typer.Option(
            "--max-streams-per-session", help="SSE streams of one session, then 429 [16]."
        ),
    ] = None,
    header_timeout: Annotated[
        float | None,
        typer.Option("--header-timeout", help="Seconds to receive a request head, then 408 [10]."),
    ] = None,
    body_timeout: Annotated[
        float | None,
        typer.Option("--body-timeout", help="Seconds to receive a request body, then 408 [30]."),
    ] = None,
    max_attachment_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-attachment-bytes", help="Bytes of one image or file, then 413 [10485760]."
        ),
    ] = None,
    max_message_attachment_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-message-attachment-bytes",
            help="Bytes of all the images and files of one message, then 413 [20971520].",
        ),
    ] = None,
    temperature: TemperatureOption = None,
    set_: SetOption = None,
) -> None:
    """Serve sessions over HTTP + SSE (extra steerloop[server])."""
    from rich.console import Console

    from ..errors import SteerloopError
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
            capacity=capacity,
            drain_timeout=drain_timeout,
            retry=not no_retry,
            allowed_hosts=allowed_host or (),
            allowed_origins=allowed_origin or (),
            limits=_edge_limits(
                max_connections=max_connections,
                max_streams=max_streams,
                max_streams_per_session=max_streams_per_session,
                header_timeout=header_timeout,
                body_timeout=body_timeout,
            ),
            attachments=_attachment_caps(
                max_attachment_bytes=max_attachment_bytes,
                max_message_attachment_bytes=max_message_attachment_bytes,
            ),
            model=model,
            call=_request_options(temperature, set_),
        )
    except (ValueError, SteerloopError) as exc:
        raise _fail(console, str(exc), 2) from None


def _attachment_caps(**flags: int | None) -> dict[str, int]:
    """``create_app``'s attachment caps from the serve flags given; a bad one names its flag."""
    for name, value in flags.items():
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be a positive number of bytes, not {value}")
    return {name: value for name, value in flags.items() if value is not None}


def _edge_limits(**flags: Any) -> Any:
    """``Limits`` from the serve flags given (the rest keep their defaults, which the flags'
    help shows in brackets); a bad value is refused naming its flag."""
    from ..service._limits import Limits

    try:
        return Limits(**{name: value for name, value in flags.items() if value is not None})
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise ValueError(f"--{name.replace('_', '-')}{str(exc)[len(name) :]}") from None


@eval_app.command("replay")
def eval_replay(
    session_id: str,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", metavar="P/M", help="PROVIDER/MODEL to replay with (default: config)."
        ),
    ] = None,
    from_turn: Annotated[
        int, typer.Option("--from-turn", metavar="N", help="First turn to run again.")
    ] = 1,
    system: Annotated[
        Path | None,
        typer.Option("--system", metavar="FILE", help="System prompt file (default: recorded)."),
    ] = None,
    tools: Annotated[
        str,
        typer.Option(
            "--tools",
            metavar="MODE",
            help="recorded: calls the recording lacks are NOT_RECORDED; live: such calls run "
            "when they only read (workspace and MCP tools).",
        ),
    ] = "recorded",
    as_json: Annotated[bool, typer.Option("--json", help="Write the report as JSON.")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="Write the report to FILE.")
    ] = None,
    max_tokens: MaxTokensOption = None,
    store: StoreOption = None,
) -> None:
    """Run a recorded session again with another model or prompt; report where it diverges.

    The session is read, never written: its turns run in a new session, the recorded input
    fed with its timing, tool calls answered from the recording. The exit status is 0
    whatever the report says; 1 when the replay could not run.
    """
    import asyncio

    from rich.console import Console
    from rich.markup import escape

    from ..errors import SteerloopError
    from ._eval import report_text, run_eval_replay

    console = Console(stderr=True)
    if tools not in ("recorded", "live"):
        raise typer.BadParameter("--tools must be recorded or live")
    if from_turn < 1:
        raise typer.BadParameter("--from-turn must be 1 or more")
    if max_tokens is not None and not 0 < max_tokens < 2**53:
        raise typer.BadParameter("--max-tokens must be a positive integer")
    prompt = None
    if system is not None:
        try:
            prompt = system.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise typer.BadParameter(f"cannot read the system prompt {system}: {exc}") from None
    try:
        settings = _settings(store, create=False)
    except _Missing as exc:
        raise _fail(console, str(exc)) from None
    try:
        report = asyncio.run(
            run_eval_replay(
                settings,
                session_id,
                model=model,
                from_turn=from_turn,
                system_prompt=prompt,
                tools="live" if tools == "live" else "recorded",
                max_tokens=max_tokens,
                console=console,
            )
        )
    except (ValueError, RuntimeError, SteerloopError) as exc:
        raise _fail(console, str(exc)) from None
    text = report_text(report, as_json=as_json)
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _fail(console, f"cannot write {out}: {exc}") from None
    first = report.diverged_at
    console.print(
        f"report written to {escape(str(out))} · "
        + (f"first divergence: {escape(str(first))}" if first else "no divergence")
    )


def main() -> None:
    """Entry point of the ``steerloop`` script."""
    app()
