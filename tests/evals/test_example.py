"""``examples/replay_eval.py`` runs as README shows it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "replay_eval.py"


async def test_the_replay_example_prints_its_report(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        cwd=tmp_path,
        env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert text.startswith("# Replay of session `support-42`\n")
    assert "**First divergence:** turn 1, step 1 — the recording called " in text
    assert "- steer “In Fahrenheit, please.”: recorded at step 2, delivered at step 2" in text
    assert '- new `weather({"city": "Lima, Peru"})` — step 1, answered NOT_RECORDED' in text
    assert "- mean score: 0.50" in text
