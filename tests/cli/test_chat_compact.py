"""``/compact`` and the context footer of ``steerloop chat`` in a real terminal (tmux)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import CLI, Tmux, clean_env, request_text, text_reply, wait_for
from tests.llm.sse_server import SSEServer

pytestmark = pytest.mark.timeout(120)


async def test_compact_command_and_context_footer(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    """With a known context window (steerloop.toml) the footer shows ``ctx ~N/3k``;
    ``/compact`` sends one summary request and the next request carries the recap as the
    summary message instead of the older turns."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    toml = '[providers.local.models."m"]\ncontext_window = 3000\n'
    (workspace / "steerloop.toml").write_text(toml)
    env = clean_env(tmp_path, server)
    long = "word " * 400
    server.add(
        text_reply(f"First answer about apples. {long}", prompt_tokens=40),
        text_reply(f"Second answer about pears. {long}", prompt_tokens=560),
        text_reply("RECAP: apples and pears were discussed.", prompt_tokens=900),
        text_reply("Third answer.", prompt_tokens=700),
    )
    store = f"sqlite:///{tmp_path / 's.db'}"
    await tmux.start([*CLI, "chat", "--session", "K1", "--store", store, "--approve", "auto"],
                     env=env, cwd=workspace)  # fmt: skip
    await tmux.wait_screen("session K1 (new)", "/3k")
    await tmux.type("tell me about apples")
    await tmux.wait_screen("turn 1 completed")
    await tmux.type("and pears")
    await tmux.wait_screen("turn 2 completed")
    await tmux.type("/compact")
    await tmux.wait_screen("context compacted (summarize)")
    assert len(server.requests) == 3
    summary_request = request_text(server, 2)
    assert "apples" in summary_request and "Summarize the conversation" in summary_request
    await tmux.type("and now?")
    await tmux.wait_screen("Third answer.")
    await wait_for(lambda: len(server.requests) == 4, "the request after the compaction")
    after = request_text(server, 3)
    assert "RECAP: apples and pears were discussed." in after
    assert "tell me about apples" not in after  # the first turn is summarized
    assert "and pears" in after  # the latest turn is kept verbatim
    await tmux.wait_screen("ctx ~", "/3k")  # the footer is redrawn with the prompt: poll
    await tmux.send("C-d")
