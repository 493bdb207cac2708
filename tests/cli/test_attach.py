"""``steerloop run --attach FILE`` as a subprocess against a loopback chat-completions server:
the image and the text file reach the wire; ``sessions show`` and ``export`` name them and
``export --attachments DIR`` writes them beside the markdown; bad files are usage errors;
a PDF for a model that takes none ends ``UNSUPPORTED_INPUT`` with nothing sent."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tests.cli.helpers import CLI, Tmux, clean_env, run_cli, text_reply
from tests.llm.sse_server import SSEServer
from tests.media import pdf, png

pytestmark = pytest.mark.timeout(180)

PNG = png(6, 4)


def flat(text: str) -> str:
    """``text`` with the terminal's line wrapping undone."""
    return " ".join(text.split())


async def test_run_attach_sends_them_and_sessions_name_them(
    tmp_path: Path, server: SSEServer
) -> None:
    env = clean_env(tmp_path, server)
    (tmp_path / "shot.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("remember the milk\n")
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    server.add(text_reply("a tiny gradient"))
    code, out, err = await run_cli(
        "run", "describe this", "--attach", "shot.png", "--attach", "notes.txt",
        "--store", store, "--session", "s1", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    [user] = [m for m in server.requests[0].json()["messages"] if m["role"] == "user"]
    assert user["content"] == [
        {"type": "text", "text": "describe this"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
        {
            "type": "text",
            "text": '<file name="notes.txt" type="text/plain">\nremember the milk\n\n</file>',
        },
    ]
    assert f"describe this [image shot.png (image/png, {len(PNG)} B)]" in flat(out)

    code, out, err = await run_cli(
        "sessions", "show", "s1", "--store", store, env=env, cwd=tmp_path
    )
    assert code == 0, err
    assert "[file notes.txt (text/plain, 18 B)]" in flat(out)

    code, out, err = await run_cli(
        "sessions", "export", "s1", "--format", "markdown", "--attachments", "files",
        "--store", store, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert "describe this\n\n![shot.png](files/shot.png)\n\n[notes.txt](files/notes.txt)" in out
    assert (tmp_path / "files" / "shot.png").read_bytes() == PNG
    assert (tmp_path / "files" / "notes.txt").read_text() == "remember the milk\n"

    code, out, err = await run_cli(
        "sessions", "export", "s1", "--format", "markdown", "--store", store, env=env, cwd=tmp_path
    )
    assert code == 0, err
    assert f"_[image shot.png (image/png, {len(PNG)} B)]_" in out


async def test_a_bad_attachment_is_a_usage_error(tmp_path: Path, server: SSEServer) -> None:
    env = clean_env(tmp_path, server)
    (tmp_path / "tool.bin").write_bytes(b"\x7fELF\x00\x01")
    for name, why in (("missing.png", "No such file"), ("tool.bin", "neither a PDF nor UTF-8")):
        code, out, err = await run_cli(
            "run", "look", "--attach", name, "--store", "memory://", env=env, cwd=tmp_path
        )
        assert code == 2, (out, err)
        assert f"cannot attach {name}" in flat(err) and why in flat(err)
    assert server.requests == []


async def test_a_pdf_for_a_model_without_files_sends_nothing(
    tmp_path: Path, server: SSEServer
) -> None:
    """The default model ``m`` is unknown: an OpenAI-compatible server is taken to accept text
    and images, so the PDF ends the turn ``UNSUPPORTED_INPUT`` (exit 1) before any request."""
    env = clean_env(tmp_path, server)
    (tmp_path / "spec.pdf").write_bytes(pdf(1))
    code, out, err = await run_cli(
        "run", "summarise", "--attach", "spec.pdf", "--store", "memory://", env=env, cwd=tmp_path
    )
    assert code == 1, err
    assert "error: local/m does not accept files (PDF): file spec.pdf" in flat(out)
    assert server.requests == []


async def test_chat_attach_goes_with_the_next_message(
    tmp_path: Path, server: SSEServer, tmux: Tmux
) -> None:
    """``/attach FILE`` in ``chat`` (a real terminal under tmux) stages the image; the next
    line carries it to the wire and the transcript names it; a bad path is an error line."""
    env = clean_env(tmp_path, server)
    (tmp_path / "shot.png").write_bytes(PNG)
    server.add(text_reply("a small picture"))
    await tmux.start([*CLI, "chat", "--store", "memory://"], env=env, cwd=tmp_path)
    await tmux.wait_screen("❯")
    await tmux.type("/attach nowhere.png")
    await tmux.wait_screen("error: /attach: cannot attach nowhere.png")
    await tmux.type("/attach shot.png")
    await tmux.wait_screen(f"attached image shot.png (image/png, {len(PNG)} B)")
    await tmux.type("what is it?")
    await tmux.wait_screen("a small picture")
    [user] = [m for m in server.requests[0].json()["messages"] if m["role"] == "user"]
    assert [p["type"] for p in user["content"]] == ["text", "image_url"]
    assert user["content"][0]["text"] == "what is it?"
    screen = await tmux.capture()
    assert f"you ❯ what is it? [image shot.png (image/png, {len(PNG)} B)]" in flat(screen)
    await tmux.send("C-d")
