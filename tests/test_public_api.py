"""The public surface: ``steerloop.__all__`` is pinned and API.md's names import."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import steerloop

# The public names are fixed by the team's ``shared/API.md``. The repository carries a
# pinned copy, so the checks below run wherever the repository is cloned; beside the shared
# spec (the team's layout: ``<work>/shared`` next to ``<work>/main``) the copy must match it.
API_MD = Path(__file__).resolve().parent / "data" / "API.md"
SHARED_API_MD = Path(__file__).resolve().parents[1].parent / "shared" / "API.md"

EXPECTED_ALL = [
    "AbortController",
    "AbortSignal",
    "AbortedError",
    "Agent",
    "AgentHandle",
    "AgentOptions",
    "AgentScope",
    "AssistantMessage",
    "Block",
    "CallConfig",
    "CancelCause",
    "Disposer",
    "FileBlock",
    "ImageBlock",
    "Inbox",
    "InputRequest",
    "LlmError",
    "LlmFailure",
    "Message",
    "MessageSource",
    "PostExecute",
    "PreStepDecision",
    "ReasoningBlock",
    "RequestErrorAction",
    "RetryPolicy",
    "Runtime",
    "Session",
    "SessionConflictError",
    "SessionCorruptError",
    "SessionEvent",
    "SessionPersistenceError",
    "SessionPersistenceNotFoundError",
    "SessionStorageError",
    "SteerloopError",
    "SystemMessage",
    "TextBlock",
    "Tool",
    "ToolCallBlock",
    "ToolDecision",
    "ToolDefinitionError",
    "ToolError",
    "ToolExec",
    "ToolResult",
    "ToolResultMessage",
    "TurnEndReason",
    "TurnResult",
    "TurnStream",
    "UserMessage",
    "define_tool",
    "tool",
    "user_message",
]

# ``steerloop.evals`` (API.md "Replay as evals"): the four names of its import line, the
# records a report is made of (what ``score`` receives and what the report holds), and
# ``export_bundle`` (the Python side of ``sessions export --format bundle``).
EXPECTED_EVALS_ALL = [
    "CallMatch",
    "CallRecord",
    "CancelReplay",
    "Delivery",
    "Divergence",
    "ReplayReport",
    "ReplayTotals",
    "TurnReport",
    "TurnRun",
    "assert_replay",
    "export_bundle",
    "load_bundle",
    "replay",
]

# Names API.md's prose and tables say are importable from ``steerloop``.
PROSE_NAMES = {
    "steerloop": [
        "PreStepDecision",
        "RequestErrorAction",
        "CallConfig",
        "ToolDecision",
        "PostExecute",
        "CancelCause",
        "Disposer",
        "SessionPersistenceNotFoundError",
        "SessionCorruptError",
        "SessionConflictError",
        "SessionStorageError",
        "SessionPersistenceError",
        "SteerloopError",
        "ToolResult",
        "ToolError",
        "SystemMessage",
        "ToolResultMessage",
    ],
}

CHECKED_MODULES = (
    "steerloop",
    "steerloop.testing",
    "steerloop.llm",
    "steerloop.llm.chunks",
    "steerloop.context",
)

_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+(\([^)]*\)|[^\n#]+)", re.MULTILINE)


def _api_md_imports() -> dict[str, set[str]]:
    """``{module: names}`` for every ``from X import ...`` in API.md's code blocks."""
    text = API_MD.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks, "API.md has no python code blocks"
    found: dict[str, set[str]] = {}
    for block in blocks:
        for module, names in _IMPORT.findall(block):
            cleaned = names.strip().strip("()").replace("\n", " ")
            for name in cleaned.split(","):
                name = name.strip()
                if name:
                    found.setdefault(module, set()).add(name.split(" as ")[0].strip())
    return found


def test_all_is_sorted_and_pinned() -> None:
    """``steerloop.__all__`` is sorted and holds exactly the pinned set."""
    assert list(steerloop.__all__) == sorted(steerloop.__all__)
    assert list(steerloop.__all__) == EXPECTED_ALL


def test_evals_all_is_pinned() -> None:
    """``steerloop.evals.__all__`` holds exactly the pinned set."""
    import steerloop.evals

    assert list(steerloop.evals.__all__) == EXPECTED_EVALS_ALL


def test_every_name_in_all_exists() -> None:
    """Every exported name resolves."""
    for name in steerloop.__all__:
        assert hasattr(steerloop, name), name


@pytest.mark.parametrize(
    "module",
    [
        "steerloop.testing",
        "steerloop.llm",
        "steerloop.llm.chunks",
        "steerloop.session.events",
        "steerloop.context",
        "steerloop.evals",
    ],
)
def test_subpackage_all_is_sorted_and_resolves(module: str) -> None:
    """The public subpackages export a sorted ``__all__`` whose names resolve."""
    mod = importlib.import_module(module)
    assert list(mod.__all__) == sorted(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name}"


def test_the_pinned_api_md_is_the_shared_one() -> None:
    """The pinned copy is the team's current API.md whenever that file is beside the
    checkout; either way the copy names the checked modules."""
    pinned = API_MD.read_text(encoding="utf-8")
    if SHARED_API_MD.is_file():
        assert pinned == SHARED_API_MD.read_text(encoding="utf-8"), (
            "tests/data/API.md is stale: copy ../shared/API.md over it"
        )
    assert set(CHECKED_MODULES) <= set(_api_md_imports())


def test_api_md_code_block_imports_resolve() -> None:
    """Every name API.md's code blocks import from a checked module is importable there and
    listed in that module's ``__all__``."""
    imports = _api_md_imports()
    assert set(CHECKED_MODULES) <= set(imports), sorted(imports)
    missing: list[str] = []
    for module in CHECKED_MODULES:
        mod = importlib.import_module(module)
        exported = set(getattr(mod, "__all__", ()))
        for name in sorted(imports[module]):
            if not hasattr(mod, name) or name not in exported:
                missing.append(f"{module}.{name}")
    assert missing == []


def test_api_md_prose_names_resolve() -> None:
    """Names API.md's tables and prose place in ``steerloop`` are exported there."""
    for module, names in PROSE_NAMES.items():
        mod = importlib.import_module(module)
        for name in names:
            assert name in mod.__all__, f"{module}.{name}"


def test_llm_seam_names() -> None:
    """The LLM seam names of API.md are the real types."""
    from steerloop.errors import LlmError
    from steerloop.llm import GenerateRequest, LlmAdapter, LlmFailure, RetryPolicy
    from steerloop.testing import ScriptedAdapter

    assert issubclass(LlmError, steerloop.SteerloopError)
    assert steerloop.LlmError is LlmError
    assert steerloop.LlmFailure is LlmFailure
    assert steerloop.RetryPolicy is RetryPolicy
    assert isinstance(ScriptedAdapter(), LlmAdapter)
    assert GenerateRequest.__dataclass_params__.frozen  # type: ignore[attr-defined]


# The durable event types of shared/spec/EVENTS.md §2 that the runtime writes and reads.
# (Plugin-written types join as their records land: context/compacted, tool/approval-*.)
EVENT_TYPES = [
    "agent/inbox/spliced",
    "assistant/attempt",
    "assistant/message",
    "context/compacted",
    "input/answered",
    "input/requested",
    "mcp/resource-updated",
    "mcp/sampled",
    "mcp/task-created",
    "request/context",
    "request/header",
    "session/end-seed",
    "state/changed",
    "step/end",
    "step/start",
    "system/message",
    "tool/approval-decided",
    "tool/approval-requested",
    "tool/call",
    "tool/deferred",
    "tool/result",
    "turn/end",
    "turn/output",
    "turn/start",
    "user/message",
]


def test_every_event_type_has_exactly_one_public_record() -> None:
    """``steerloop.session.events`` holds one record per durable type, naming its type, and
    the codec decodes every such type into that record."""
    from steerloop.session import events
    from steerloop.session._codec import KNOWN_TYPES
    from steerloop.session._events import RECORD_TYPES

    records: dict[str, list[type]] = {}
    for name in events.__all__:
        value = getattr(events, name)
        if isinstance(value, type) and isinstance(getattr(value, "TYPE", None), str):
            records.setdefault(value.TYPE, []).append(value)  # type: ignore[attr-defined]
    assert sorted(records) == EVENT_TYPES
    assert all(len(found) == 1 for found in records.values()), records
    assert sorted(KNOWN_TYPES) == EVENT_TYPES
    assert sorted(r.TYPE for r in RECORD_TYPES) == EVENT_TYPES
