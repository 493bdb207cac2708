"""``steerloop chat``: talk to an agent while it works.

The prompt stays live while a turn runs. Enter on an idle agent starts a turn (``followup``);
Enter while it runs steers it (``steer``: the next step sees the message). Ctrl-C cancels the
running turn; Ctrl-C when idle, twice within ``_QUIT_WINDOW`` seconds, or Ctrl-D quits.

Ctrl-C keeps what is still queued (``cancel(keep_inbox=True)``): a steer typed a moment before
is something the user asked for, and dropping it silently loses their words. The chat says how
many messages it kept; they go with the next message, or ``/send`` sends them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app_or_none
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.patch_stdout import patch_stdout
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import hooks
from .._cancel import CancelCause
from .._hooks import Disposer
from .._runtime import Runtime
from ..agent._decisions import RequestPayload
from ..agent._factory import AgentHandle
from ..agent._options import AgentOptions
from ..context import estimate_tokens, install_compaction
from ..errors import AbortedError, SteerloopError
from ..goals import GoalError, install_goals
from ..llm._types import CallConfig
from ..llm.config import ProviderConfigError
from ..messages import FileBlock, ImageBlock, TextBlock, user_message
from ..session._session import SessionEventPayload
from ..tools._define import ToolExec
from ._attach import attachment_labels, load_attachment
from ._chat_mcp import McpChat
from ._chat_view import ChatView, Fragments, Screen, help_table, tools_table
from ._inputs import answer_line, describe_request, prompt_label
from ._render import EventRenderer, format_args, summarise
from ._session_setup import LiveOptions, agent_options, open_live, resolve_route
from ._settings import Settings

__all__ = ["run_chat"]

_QUIT_WINDOW = 1.5
_SETTLE_TIMEOUT = 10.0


class _Reported(Exception):
    """A command failed and has already told the user why."""


async def run_chat(
    settings: Settings,
    *,
    model: str | None,
    session_id: str | None,
    options: LiveOptions,
    console: Console,
) -> None:
    """Run the interactive chat until the user quits.

    Raises:
        ProviderConfigError: no usable provider/model (a ``ValueError`` naming what to set).
    """
    chat = _Chat(settings, console, options)
    async with AsyncExitStack() as stack:
        await chat.open(stack, model=model, session_id=session_id)
        with patch_stdout(raw=True):
            try:
                await chat.loop()
            finally:
                await chat.settle()
    await chat.screen.drain()  # anything the runtime's close reported


class _Chat:
    """One chat: a runtime, the current agent, the prompt and its view."""

    def __init__(self, settings: Settings, console: Console, options: LiveOptions) -> None:
        self.settings = settings
        self.console = console
        self.options = options
        self.approve = options.approve
        self.screen = Screen(console)
        self.view = ChatView(self.screen, self._invalidate)
        self.prompt: PromptSession[str] = PromptSession(
            message=self._message,
            bottom_toolbar=self._toolbar,
            erase_when_done=True,
            refresh_interval=0.1,
        )
        self.rt: Runtime
        self.handle: AgentHandle
        self.route: tuple[str, str] = ("", "")
        self.asks: list[tuple[str, asyncio.Future[bool]]] = []
        self.last_interrupt = -_QUIT_WINDOW
        self.quitting = False
        self.attached: list[ImageBlock | FileBlock] = []  # /attach: go with the next message
        self._commands: dict[str, Callable[[str], Awaitable[None]]] = {
            "/queue": self._queue,
            "/send": self._send,
            "/inject": self._inject,
            "/attach": self._attach,
            "/sessions": self._sessions,
            "/resume": self._resume,
            "/fork": self._fork,
            "/model": self._model,
            "/tools": self._tools,
            "/goal": self._goal,
            "/compact": self._compact,
            "/prompts": self._prompts,
            "/help": self._help,
        }
        # The context window of the current route (None: unknown) and whether compaction is
        # installed (it needs a known window: install_compaction follows the route's).
        self.window: int | None = None
        self.compaction: Disposer | None = None
        # /compact runs beside the prompt, as a turn does, so Ctrl-C reaches it as a key.
        self.compacting: asyncio.Task[None] | None = None

    @property
    def agent(self) -> Any:
        return self.handle.agent

    # --- opening and switching -----------------------------------------------------------

    async def open(
        self, stack: AsyncExitStack, *, model: str | None, session_id: str | None
    ) -> None:
        live = await open_live(
            stack,
            self.settings,
            model=model,
            session_id=session_id,
            options=self.options,
            ask=self._ask,
            workspace=Path.cwd(),
            setup=self._setup,
        )
        self.rt, self.handle, self.route = live.rt, live.handle, (live.provider, live.model)
        self.config = live.config
        self.mcp = McpChat(live.mcp)
        self.rt.hooks.on(hooks.REQUEST, self._on_request)
        self.goals = install_goals(self.rt)
        await self._follow_window()
        events = self.agent.session.events
        if events:
            self.screen.emit(lambda c: EventRenderer(c).render_all(events))
        state = f"resumed, {len(events)} events" if events else "new"
        self.screen.print(
            Text.assemble(
                ("steerloop chat", "bold"),
                f" · session {self.agent.id} ({state}) · {live.provider}/{live.model}"
                f" · approve {self.approve}",
            )
        )
        self._note("Enter sends; while the agent works, Enter steers it · /help")

    def _setup(self, scope: Any) -> None:
        scope.hooks.on(hooks.SESSION_EVENT, self._on_event)
        scope.hooks.on(hooks.ASSISTANT_STREAM, self.view.on_frame)
        scope.hooks.on(hooks.STATUS, self.view.on_status)

    def _on_event(self, payload: SessionEventPayload) -> None:
        self.view.on_event(payload)
        if payload.event.type == "context/compacted":
            self._note(_compacted_note(payload.event.data))
        if payload.event.type == "input/requested":
            # A server asks during a call: the next line typed answers it (_handle).
            self.screen.print(Text(describe_request(payload.event.data), style="bold yellow"))
            self._invalidate()
        if payload.event.type == "turn/end":
            self._deny_asks()
            # "Ctrl-C again to quit" is about the turn being cancelled: once it has ended,
            # a Ctrl-C in the next turn cancels that one instead of quitting.
            self.last_interrupt = -_QUIT_WINDOW

    def _agent_options(self) -> AgentOptions:
        """The current route's options, by the recipe ``open_live`` used."""
        provider, model = self.route
        return agent_options(self.settings, self.config, provider, model, self.options)

    async def _on_request(
        self, payload: RequestPayload, next_: Callable[[], Awaitable[CallConfig]]
    ) -> CallConfig:
        config = await next_()
        provider, model = self.route
        if config.provider == provider and config.model == model:
            return config
        # /model switched the route: the output cap and request options follow the new
        # model's; what is per turn (structured output) and the effort stay.
        return (
            self._agent_options()
            .call_config()
            .replace(reasoning_effort=config.reasoning_effort, output_schema=config.output_schema)
        )

    async def _switch(self, session_id: str, note: str) -> None:
        """Dispose the current agent and continue ``session_id`` (stored) instead."""
        previous = self.agent.id
        self._deny_asks()
        await self.handle.dispose()
        self.view.reset()
        try:
            self.handle = await self._resume_agent(session_id)
        except SteerloopError as exc:
            self._error(f"cannot open session {session_id!r}: {exc}")
            self.handle = await self._resume_agent(previous)
            raise _Reported() from None
        self._note(note)

    async def _resume_agent(self, session_id: str) -> AgentHandle:
        return await self.rt.agents.resume(
            resume_session_id=session_id,
            agent_options=self._agent_options(),
            setup=self._setup,
        )

    async def settle(self) -> None:
        """On the way out: stop a running turn (so its log ends cleanly), flush the screen."""
        self._deny_asks()
        if self.agent.status == "running" or self.compacting is not None:
            self.agent.cancel(CancelCause.user())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.agent.when_idle(), _SETTLE_TIMEOUT)
            if self.compacting is not None:
                await asyncio.wait({self.compacting}, timeout=_SETTLE_TIMEOUT)
        await self.screen.drain()

    # --- the input loop ------------------------------------------------------------------

    async def loop(self) -> None:
        loop = asyncio.get_running_loop()
        # Ctrl-C arrives as a key while the prompt reads; between reads (the terminal is
        # briefly in cooked mode) it is a SIGINT, handled the same way.
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        await self.screen.drain()  # the banner (and history) before the first prompt
        try:
            while not self.quitting:
                try:
                    line = await self.prompt.prompt_async()
                except KeyboardInterrupt:
                    self.quitting = self._interrupt()
                    continue
                except EOFError:
                    break
                await self._handle(line.strip())
        finally:
            loop.remove_signal_handler(signal.SIGINT)
        self.screen.print(Text("bye", style="dim"))

    def _on_sigint(self) -> None:
        self.quitting = self._interrupt() or self.quitting
        app = get_app_or_none()
        if self.quitting and app is not None and app.is_running:
            app.exit(exception=EOFError())

    def _interrupt(self) -> bool:
        """Ctrl-C: cancel a running turn or compaction; returns whether to quit instead."""
        now = time.monotonic()
        if self.compacting is not None and now - self.last_interrupt >= _QUIT_WINDOW:
            # A compaction is a maintenance job (the agent reports idle): cancel it as a turn.
            self.last_interrupt = now
            self.agent.cancel(CancelCause.user(), keep_inbox=True)
            self.screen.print(
                Text("cancelling the compaction… (Ctrl-C again to quit)", style="dim yellow")
            )
            return False
        if self.agent.status != "running" or now - self.last_interrupt < _QUIT_WINDOW:
            return True
        self.last_interrupt = now
        self._deny_asks()
        self.agent.cancel(CancelCause.user(), keep_inbox=True)
        kept = self._pending()
        note = "cancelling…"
        if kept:
            note += (
                f" kept {kept} queued message{'s' if kept > 1 else ''}: "
                "they go with your next message, or /send sends them now"
            )
        self.screen.print(Text(f"{note} (Ctrl-C again to quit)", style="dim yellow"))
        return False

    def _pending(self) -> int:
        inbox = self.agent.inbox
        return len(inbox.next_turn) + len(inbox.next_step)

    async def _handle(self, line: str) -> None:
        if not line:
            return
        if self.asks:
            _, answer = self.asks.pop(0)
            if not answer.done():
                answer.set_result(line.lower() in ("y", "yes"))
            return
        if self.agent.pending_inputs:
            refused = answer_line(self.agent, self.agent.pending_inputs[0], line)
            if refused is not None:
                self._error(refused)
            return
        if line.startswith("/"):
            name, _, arg = line.partition(" ")
            if name in ("/quit", "/exit"):
                self.quitting = True
                return
            target = self.mcp.prompt_target(name)
            if target is not None:
                await self._send_prompt(*target, arg.strip())
                return
            command = self._commands.get(name)
            if command is None:
                self._error(f"unknown command {name} — /help lists them")
                return
            try:
                await command(arg.strip())
            except _Reported:
                pass
            except (SteerloopError, ValueError, RuntimeError) as exc:
                self._error(f"{name}: {exc}")
            return
        try:
            message = await self.mcp.attach(line, self.agent) or user_message(line)
        except ValueError as exc:
            self._error(str(exc))
            return
        if self.attached:  # /attach: the staged files go with this message
            blocks = [*message.content, *self.attached]
            message = user_message(blocks, source=message.source, id=message.id)
        if self.agent.status == "running":
            self.agent.steer(message)
            self.screen.print(Text(f"steering: {summarise(line, 100)}", style="dim"))
        else:
            self.agent.followup(message)
        self.attached = []

    def _error(self, message: str) -> None:
        self.screen.print(Text.assemble(("error: ", "red"), message))

    def _note(self, message: str) -> None:
        self.screen.print(Text(message, style="dim"))

    # --- approval ------------------------------------------------------------------------

    async def _ask(self, exec: ToolExec) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (f"{exec.name}({format_args(exec.raw_arguments)})", answer)
        self.asks.append(entry)
        self.view.question = entry[0]
        self._invalidate()
        try:
            return await answer
        finally:
            if entry in self.asks:
                self.asks.remove(entry)
            self.view.question = self.asks[0][0] if self.asks else None
            self._invalidate()

    def _deny_asks(self) -> None:
        asks, self.asks = self.asks, []
        for _, answer in asks:
            if not answer.done():
                answer.set_result(False)
        self.view.question = None

    # --- commands ------------------------------------------------------------------------

    async def _queue(self, text: str) -> None:
        if not text:
            self._error("usage: /queue TEXT")
            return
        running = self.agent.status == "running"
        self.agent.followup(user_message(text))
        if running:
            self._note(f"queued for after this turn: {summarise(text, 100)}")

    async def _send(self, _arg: str) -> None:
        """Send the queued messages a cancel kept (parked until a waking send) now."""
        if self.agent.status == "running" or not self._pending():
            self._note("nothing is waiting to be sent")
            return
        inbox = self.agent.inbox
        # Each queue in order, next-turn first (it was queued before the steers' step came).
        parked = [*inbox.splice("next-turn", 0, len(inbox.next_turn))]
        parked += inbox.splice("next-step", 0, len(inbox.next_step))
        for message in parked:
            self.agent.followup(message)
        self._note(f"sending {len(parked)} queued message{'s' if len(parked) > 1 else ''}")

    async def _attach(self, path: str) -> None:
        """Stage a file for the next message (``/attach`` alone lists what is staged)."""
        if not path:
            labels = attachment_labels(self.attached)
            self._note("attached: " + " ".join(labels) if labels else "nothing is attached")
            return
        block = load_attachment(path)
        self.attached.append(block)
        self._note(f"attached {block.describe()}: it goes with your next message")

    async def _inject(self, text: str) -> None:
        if not text:
            self._error("usage: /inject TEXT")
            return
        self.agent.inject(user_message(text))
        self._note(f"injected into the next step: {summarise(text, 100)}")

    async def _sessions(self, _arg: str) -> None:
        store = self.rt.sessions.persistence
        if store is None:
            self._error("no session store is configured")
            return
        table = Table("session", "events", "")
        for session_id in await store.list():
            current = session_id == self.agent.id
            count = (
                len(self.agent.session.events) if current else (await store.info(session_id)).events
            )
            table.add_row(session_id, str(count), "← current" if current else "")
        self.screen.print(table)

    async def _resume(self, session_id: str) -> None:
        store = self.rt.sessions.persistence
        if not session_id:
            self._error("usage: /resume ID (see /sessions)")
            return
        if session_id == self.agent.id:
            self._note(f"already in session {session_id}")
            return
        if store is None or not await store.exists(session_id):
            self._error(f"no stored session {session_id!r} (see /sessions)")
            return
        await self._switch(session_id, f"resumed session {session_id}")
        events = self.agent.session.events
        self.screen.emit(lambda c: EventRenderer(c).render_all(events))
        self._note(f"── now in session {session_id} ({len(events)} events)")

    async def _fork(self, _arg: str) -> None:
        store = self.rt.sessions.persistence
        events = self.agent.session.events
        if store is None or not events:
            self._error("nothing to fork: the session has no stored events yet")
            return
        parent = self.agent.id
        n = 1
        while await store.exists(f"{parent}-fork{n}"):
            n += 1
        new_id = f"{parent}-fork{n}"
        at_seq = events[-1].seq
        await self.agent.session.flush()
        await self.rt.sessions.fork(parent, at_seq, new_id)
        await self._switch(new_id, f"forked {parent} at seq {at_seq} → now in session {new_id}")

    async def _model(self, choice: str) -> None:
        if not choice:
            provider, model = self.route
            self._note(f"model: {provider}/{model} (change with /model PROVIDER/MODEL)")
            return
        try:
            _config, provider, model = resolve_route(self.settings, choice)
        except ProviderConfigError as exc:
            self._error(str(exc))
            return
        self.route = (provider, model)
        await self._follow_window()
        self._note(f"the next requests use {provider}/{model}")
        if self.compaction is None:
            self._note(f"automatic compaction is off: the context window of {model} is unknown")

    async def _goal(self, arg: str) -> None:
        goal = self.goals.goal_of(self.agent)
        current = goal.current
        verbs = {"pause": goal.pause, "resume": goal.resume, "clear": goal.clear}
        try:
            if not arg:
                if current is None or current.phase == "cleared":
                    self._note("no goal (set one with /goal TEXT)")
                    return
                state: str = current.phase
                if current.blocked is not None:
                    state += f" ({current.blocked.code}: {current.blocked.explanation})"
                armed = "armed" if goal.armed else "not armed: /goal resume"
                self._note(
                    f"goal r{current.revision}: {summarise(current.objective, 80)} · {state} · "
                    f"round {current.rounds_started}/{current.round_cap} · {armed}"
                )
            elif arg in verbs:
                new = verbs[arg](goal.revision)
                self._note(f"goal {new.phase}: {summarise(new.objective, 80)}")
            else:
                if current is not None and current.phase not in ("complete", "cleared"):
                    goal.clear(goal.revision)
                new = goal.create(arg, expected_revision=goal.revision)
                self._note(f"goal set (up to {new.round_cap} rounds): {summarise(arg, 80)}")
        except GoalError as exc:
            self._error(str(exc))

    async def _follow_window(self) -> None:
        """Learn the route's context window; compaction (bounded by it) runs only when known."""
        provider, model = self.route
        try:
            prepared = await self.rt.llm.prepare_call(CallConfig(provider=provider, model=model))
            self.window = prepared.context_window
        except SteerloopError:
            self.window = None
        if self.window is not None and self.compaction is None:
            self.compaction = install_compaction(self.rt, strategy="summarize")
        elif self.window is None and self.compaction is not None:
            self.compaction()
            self.compaction = None

    async def _compact(self, _arg: str) -> None:
        if self.compaction is None:
            provider, model = self.route
            self._error(
                f"/compact needs the context window of {provider}/{model}: in steerloop.toml, "
                f'[providers.{provider}.models."{model}"] context_window = TOKENS'
            )
            return
        if self.compacting is not None:
            self._error("/compact: a compaction is running (Ctrl-C cancels it)")
            return
        job = self.agent.compact()  # RuntimeError at once while a turn runs: reported
        self._note("compacting… (Ctrl-C cancels)")
        self.compacting = asyncio.ensure_future(self._compacted(job))

    async def _compacted(self, job: Awaitable[Any]) -> None:
        """Report the end of a ``/compact`` (it runs beside the prompt)."""
        try:
            event = await job
        except AbortedError:
            self._note("compaction cancelled: the history is unchanged")
            return
        except (SteerloopError, ValueError, RuntimeError) as exc:
            self._error(f"/compact: {exc}")
            return
        finally:
            self.compacting = None
            self._invalidate()
        if event is None:
            self._note("nothing to compact: the history is within what is kept verbatim")

    async def _send_prompt(self, server: str, prompt: str, arguments: str) -> None:
        """``/server:prompt args``: the server's prompt, expanded, sent as the message."""
        try:
            message = await self.mcp.prompt(server, prompt, arguments)
        except ValueError as exc:
            self._error(f"/{server}:{prompt}: {exc}")
            return
        text = " ".join(b.text for b in message.content if isinstance(b, TextBlock))
        self._note(f"/{server}:{prompt} → {summarise(text, 100)}")
        if self.agent.status == "running":
            self.agent.steer(message)
        else:
            self.agent.followup(message)

    async def _prompts(self, _arg: str) -> None:
        rows = await self.mcp.prompts()
        if not rows:
            self._note("no MCP server offers prompts")
            return
        table = Table("prompt", "description", box=None)
        for usage, about in rows:
            table.add_row(usage, summarise(about, 80))
        self.screen.print(table)

    async def _tools(self, _arg: str) -> None:
        self.screen.print(tools_table(self.rt.tools.list(self.agent.id)))

    async def _help(self, _arg: str) -> None:
        self.screen.print(help_table())

    # --- the prompt ----------------------------------------------------------------------

    def _invalidate(self) -> None:
        app = self.prompt.app
        if app.is_running:
            app.invalidate()

    def _message(self) -> FormattedText:
        app = get_app_or_none()
        size = app.output.get_size() if app is not None else None
        width, height = (size.columns, size.rows) if size is not None else (80, 24)
        fragments: Fragments = self.view.live(width, max(height - 4, 3))
        if self.asks:
            fragments.append(("bold fg:ansiyellow", "allow? [y/N] ❯ "))
        elif self.agent.pending_inputs:
            fragments.append(("bold fg:ansiyellow", prompt_label(self.agent.pending_inputs[0])))
        elif self.agent.status == "running":
            fragments.append(("fg:ansiyellow", "steer ❯ "))
        else:
            fragments.append(("bold fg:ansicyan", "❯ "))
        return FormattedText(fragments)

    def _toolbar(self) -> FormattedText:
        provider, model = self.route
        state = "running" if self.agent.status == "running" else "idle"
        used = _tokens(estimate_tokens(self.agent.session))
        context = f"ctx ~{used}/{_tokens(self.window)}" if self.window else f"ctx ~{used}"
        return FormattedText(
            [
                (
                    "",
                    f" {self.agent.id} · {provider}/{model} · {context} · {state} · /help · "
                    "Ctrl-D quits ",
                )
            ]
        )


def _tokens(count: int) -> str:
    """A token count the way the footer shows it: ``950``, ``12.3k``, ``128k``."""
    if count < 1_000:
        return str(count)
    if count < 100_000:
        return f"{count / 1_000:.1f}k".replace(".0k", "k")
    return f"{round(count / 1_000)}k"


def _compacted_note(data: Any) -> str:
    before, after = data.tokens_before, data.tokens_after
    sizes = f": ~{_tokens(before)} → ~{_tokens(after)} tokens" if before and after else ""
    return f"context compacted ({data.strategy}){sizes}"
