"""``assert_replay``: a recorded session (a bundle file) as a regression test."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Literal

from .. import Runtime
from ..agent import AgentOptions
from ._bundle import import_bundle, read_bundle
from ._records import Divergence
from ._replay import replay
from ._report import ReplayReport

__all__ = ["assert_replay"]


async def assert_replay(
    bundle: str | Path,
    *,
    agent_options: AgentOptions,
    same_tools: bool = True,
    same_text: bool = False,
    rt: Runtime | None = None,
    from_turn: int = 1,
    system_prompt: str | None = None,
    tools: Literal["recorded", "live"] = "recorded",
) -> ReplayReport:
    """Replay the session in ``bundle`` with ``agent_options``; fail where it diverged.

    A turn that ends another way than recorded always fails the assertion; with
    ``same_tools`` (the default) so does a step that calls other tools or arguments, or a
    turn with another number of steps; with ``same_text``, another final answer.

    Args:
        bundle: a file written by ``steerloop sessions export ID --format bundle``.
        agent_options: the model to replay with.
        same_tools: fail on other tool calls or steps.
        same_text: fail on another final answer too (a model that is not deterministic
            rarely passes this).
        rt: the runtime to replay in (its adapters serve ``agent_options``, e.g. a
            ``ScriptedAdapter``); it needs a store. ``None``: an in-memory runtime with the
            providers the environment configures.
        from_turn, system_prompt, tools: as for ``replay``.

    Returns:
        The report, when nothing that counts diverged.

    Raises:
        AssertionError: naming the first divergence that counts.
    """
    if rt is not None:
        return await _replay_bundle(
            rt, bundle, agent_options, same_tools, same_text, from_turn, system_prompt, tools
        )
    from ..llm.config import ProviderConfig, register_providers

    async with Runtime.open(store="memory://") as own:
        register_providers(own, ProviderConfig.load())
        return await _replay_bundle(
            own, bundle, agent_options, same_tools, same_text, from_turn, system_prompt, tools
        )


async def _replay_bundle(
    rt: Runtime,
    path: str | Path,
    options: AgentOptions,
    same_tools: bool,
    same_text: bool,
    from_turn: int,
    system_prompt: str | None,
    tools: Literal["recorded", "live"],
) -> ReplayReport:
    store = rt.sessions.persistence
    if store is None:
        raise ValueError("assert_replay needs a runtime with a store (e.g. store='memory://')")
    bundle = read_bundle(path)
    session_id = bundle.session_id
    if await store.exists(session_id):  # the same cassette in another test of this runtime
        session_id = f"{session_id[:110]}.{secrets.token_hex(4)}"
    session_id = await import_bundle(bundle, store, session_id=session_id)
    report = await replay(
        rt,
        session_id,
        agent_options=options,
        from_turn=from_turn,
        system_prompt=system_prompt,
        tools=tools,
    )
    failing = [d for d in report.divergences if _counts(d, same_tools, same_text)]
    if failing:
        raise AssertionError(_message(path, report, failing[0], len(failing)))
    return report


def _counts(divergence: Divergence, same_tools: bool, same_text: bool) -> bool:
    if divergence.kind in ("tool-calls", "steps"):
        return same_tools
    if divergence.kind == "text":
        return same_text
    return True


def _message(path: str | Path, report: ReplayReport, first: Divergence, count: int) -> str:
    more = f" ({count - 1} more after it)" if count > 1 else ""
    return (
        f"the replay of {path} with {report.model} diverged at {first}{more}; "
        f"replay session {report.replay_session_id!r}"
    )
