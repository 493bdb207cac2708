"""``/compact`` and the context footer of ``steerloop chat`` in a real terminal (tmux).

The context window comes from ``steerloop.toml``: ``STEERLOOP_OPENAI_BASE_URL`` is the
provider named ``local`` (README "Model providers"), so its models' facts go under
``[providers.local.models."M"]``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.cli.helpers import CLI, Tmux, clean_env, request_text, text_reply, wait_for
from tests.llm import openai_wire as wire
from tests.llm.sse_server import SSEServer, sse_reply

pytestmark = pytest.mark.timeout(120)


async def chat_two_turns(
    tmp_path: Path, server: SSEServer, tmux: Tmux, toml: str, words: int = 600, second: int = 1500
) -> None:
    """``chat`` over a context window of 3k with two long answers on screen (the second
    request's reported input tokens, ``second``, calibrate the estimate)."""
    long = "word " * words
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "steerloop.toml").write_text('[providers.local.models."m"]\n' + toml)
    env = clean_env(tmp_path, server)
    server.add(
        text_reply(f"First answer about apples. {long}", prompt_tokens=40),
        text_reply(f"Second answer about pears. {long}", prompt_tokens=second),
    )
    store = f"sqlite:///{tmp_path / 's.db'}"
    await tmux.start([*CLI, "chat", "--session", "K1", "--store", store, "--approve", "auto"],
                     env=env, cwd=workspace)  # fmt: skip
    await tmux.wait_screen("session K1 (new)", "/3k")
    await tmux.type("tell me about apples")
    await tmux.wait_screen("turn 1 completed")
    await tmux.type("and pears")
    await tmux.wait_screen("turn 2 completed")


async def test_compact_command_and_context_footer(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    """With a known context window (steerloop.toml) the footer shows ``ctx ~N/3k``;
    ``/compact`` sends one summary request, capped by the chat's ``max_tokens`` like every
    request, and the next request carries the recap as the summary message instead of the
    older turns."""
    await chat_two_turns(tmp_path, server, tmux, "context_window = 3000\nmax_tokens = 600\n")
    server.add(
        text_reply("RECAP: apples and pears were discussed.", prompt_tokens=900),
        text_reply("Third answer.", prompt_tokens=700),
    )
    await tmux.type("/compact")
    await tmux.wait_screen("context compacted (summarize)")
    assert len(server.requests) == 3
    summary_request = request_text(server, 2)
    assert "apples" in summary_request and "Summarize the conversation" in summary_request
    # the chat's cap (max_tokens = 600, below the compaction's budget of 1,125)
    assert [r.json()["max_tokens"] for r in server.requests] == [600, 600, 600]
    await tmux.type("and now?")
    await tmux.wait_screen("Third answer.")
    await wait_for(lambda: len(server.requests) == 4, "the request after the compaction")
    after = request_text(server, 3)
    assert "RECAP: apples and pears were discussed." in after
    assert "tell me about apples" not in after  # the first turn is summarized
    assert "and pears" in after  # the latest turn is kept verbatim
    await tmux.wait_screen("ctx ~", "/3k")  # the footer is redrawn with the prompt: poll
    await tmux.send("C-d")


@pytest.mark.parametrize(
    ("model_table", "turns", "summary"),
    [("", None, 1125), ("max_tokens = 200\n", 200, 200)],
)
async def test_the_summary_request_has_its_own_cap_and_a_model_cap_bounds_it(
    tmp_path: Path,
    server: SSEServer,
    tmux: Tmux,
    model_table: str,
    turns: int | None,
    summary: int,
) -> None:
    """Without ``max_tokens`` the summary request is capped by the compaction's budget (half
    of what the kept part leaves of the window: (3000 - 750) / 2); with a model's own
    ``max_tokens`` (which every request of the model is sent) by that."""
    await chat_two_turns(tmp_path, server, tmux, "context_window = 3000\n" + model_table)
    server.add(text_reply("RECAP: apples.", prompt_tokens=900))
    await tmux.type("/compact")
    await tmux.wait_screen("context compacted (summarize)")
    assert server.requests[1].json().get("max_tokens") == turns
    assert server.requests[2].json()["max_tokens"] == summary
    await tmux.send("C-d")


async def test_ctrl_c_cancels_a_compaction_and_keeps_the_history(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    """A summary the model is slow to write is cancelled by Ctrl-C like a turn: the request
    is closed, the chat says so and the next request carries the history unchanged."""
    await chat_two_turns(tmp_path, server, tmux, "context_window = 3000\n")
    server.add(
        sse_reply(wire.text_events("RECAP: app"), hang_after=1),  # the summary: never ends
        text_reply("Third answer.", prompt_tokens=700),
    )
    await tmux.type("/compact")
    await tmux.wait_screen("compacting… (Ctrl-C cancels)")
    await wait_for(lambda: len(server.requests) == 3, "the summary request")
    await tmux.send("C-c")
    await tmux.wait_screen("compaction cancelled: the history is unchanged")
    async with asyncio.timeout(20):
        await server.requests[2].client_closed.wait()
    await tmux.type("and now?")
    await tmux.wait_screen("Third answer.")
    assert "tell me about apples" in request_text(server, 3)
    assert "context compacted" not in await tmux.capture()
    await tmux.send("C-d")


async def test_a_summary_that_would_not_shrink_the_context_is_rejected(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    """The model's recap is longer than what it would replace (only the first question is
    old enough to compact): nothing is written and the chat names why."""
    await chat_two_turns(tmp_path, server, tmux, "context_window = 3000\n", 400, 560)
    server.add(text_reply("RECAP: " + "apples " * 30, prompt_tokens=900))
    await tmux.type("/compact")
    screen = await tmux.wait_screen("would not shrink the context")
    assert "context compacted" not in screen
    await tmux.send("C-d")
