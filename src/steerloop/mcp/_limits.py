"""``MCPLimits``: what one MCP server may hand us, and how a message over a limit is cut.

The cut happens where a message arrives, before the SDK validates it (``_bounds.py``), so
nothing over a limit is ever built into typed records, logged, or sent to a model:

* a tool result (``tools/call``, ``tasks/result``), a resource's contents (``resources/read``)
  and a prompt (``prompts/get``) keep their first ``max_blocks`` items and at most
  ``max_result_bytes`` of text and data (a text is cut at the budget; a binary item that does
  not fit is left out; structured content that does not fit is dropped). What was cut is
  recorded under ``_meta["steerloop/cut"]`` as one line the model is shown;
* a tool list longer than ``max_tools`` is refused (``_meta["steerloop/refused"]``), and a
  tool whose input schema (with its description) exceeds ``max_schema_bytes`` is left out of
  the list (``_meta["steerloop/dropped"]``);
* an error answer keeps the first ``ERROR_CHARS`` characters of its message, and its
  ``data`` when that is at most ``ERROR_DATA_BYTES`` of JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._slices import CutDict, CutList, CutStr, was_cut

__all__ = [
    "CUT_KEY",
    "DROPPED_KEY",
    "ERROR_CHARS",
    "ERROR_DATA_BYTES",
    "REFUSED_KEY",
    "MCPLimits",
    "bound_result",
    "check_limits",
    "json_size",
]

CUT_KEY = "steerloop/cut"
REFUSED_KEY = "steerloop/refused"
DROPPED_KEY = "steerloop/dropped"
#: Characters kept of an error answer's message.
ERROR_CHARS = 4_096
#: Bytes of JSON an error answer's ``data`` may have to be kept (larger data is dropped).
ERROR_DATA_BYTES = 4_096

_LIMIT_NAMES = (
    "max_result_bytes",
    "max_blocks",
    "max_tools",
    "max_schema_bytes",
    "max_message_bytes",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPLimits:
    """Bounds on what one MCP server may hand the agent; the defaults suit most servers.

    ``max_result_bytes`` (256 KiB, about 64k tokens of text) bounds one tool result, resource
    read or prompt: its text, binary data and structured content together. ``max_blocks``
    (256) bounds its content items. ``max_tools`` (256) bounds the server's tool list (a
    longer list is refused). ``max_schema_bytes`` (64 KiB) bounds one tool's input schema and
    description (a larger tool is left out). ``max_message_bytes`` (32 MiB) bounds one message
    read from the server at all, before it is decoded: a longer stdio line ends the
    connection, a longer HTTP body or SSE event fails its request (``ResponseTooLarge``).
    """

    max_result_bytes: int = 262_144
    max_blocks: int = 256
    max_tools: int = 256
    max_schema_bytes: int = 65_536
    max_message_bytes: int = 33_554_432

    def __post_init__(self) -> None:
        for name in _LIMIT_NAMES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MCPLimits.{name} must be a positive integer, not {value!r}")

    @property
    def message_bytes(self) -> int:
        """The longest message read at all (``max_message_bytes``)."""
        return self.max_message_bytes

    @property
    def decoder_items(self) -> int:
        """Elements a large message's decoder keeps of any one array or object."""
        return max(4_096, self.max_blocks, self.max_tools) + 1

    @property
    def decoder_chars(self) -> int:
        """Characters a large message's decoder keeps of any one string."""
        return max(self.max_result_bytes, self.max_schema_bytes) + 1


def check_limits(limits: object) -> MCPLimits:
    if limits is None:
        return MCPLimits()
    if not isinstance(limits, MCPLimits):
        raise ValueError(f"limits must be an MCPLimits, not {type(limits).__name__}")
    return limits


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _count(value: Any) -> int:
    return value.original if isinstance(value, CutList | CutDict | CutStr) else len(value)


def _payload(item: Any) -> tuple[str | None, int]:
    """``(key of the cuttable text, size in bytes)`` of one content item."""
    if not isinstance(item, dict):
        return None, json_size(item)
    for key in ("text", "data", "blob"):
        value = item.get(key)
        if isinstance(value, str):
            size = _count(value) if isinstance(value, CutStr) else len(value.encode())
            rest = {k: v for k, v in item.items() if k != key}
            return (key if key == "text" else None), size + json_size(rest)
    resource = item.get("resource")
    if isinstance(resource, dict):
        inner_key, size = _payload(resource)
        return (f"resource.{inner_key}" if inner_key else None), size + 64
    return None, json_size(item)


def _cut_text(text: str, budget: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits ``budget`` bytes."""
    return text.encode()[:budget].decode(errors="ignore")


def _kept_items(items: list[Any], limits: MCPLimits, budget: int) -> tuple[list[Any], int, int]:
    """``(kept items, bytes used, items cut or left out)``."""
    kept: list[Any] = []
    used = 0
    cut = 0
    for item in items[: limits.max_blocks]:
        key, size = _payload(item)
        if not was_cut(item) and used + size <= budget:
            kept.append(item)
            used += size
            continue
        cut += 1
        room = budget - used - (size - _text_size(item, key))
        if key is not None and room > 0:
            kept.append(_with_text(item, key, room))
            used = budget
    return kept, used, cut + max(_count(items) - limits.max_blocks, 0)


def _text_size(item: Any, key: str | None) -> int:
    if key is None:
        return 0
    target = item["resource"] if key.startswith("resource.") else item
    value = target[key.rpartition(".")[2]]
    return _count(value) if isinstance(value, CutStr) else len(value.encode())


def _with_text(item: dict[str, Any], key: str, room: int) -> dict[str, Any]:
    if key.startswith("resource."):
        inner = dict(item["resource"])
        inner["text"] = _cut_text(str(inner["text"]), room)
        return {**item, "resource": inner}
    return {**item, "text": _cut_text(str(item["text"]), room)}


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def bound_result(result: dict[str, Any], items_key: str, limits: MCPLimits) -> dict[str, Any]:
    """``result`` with its items (``content``, ``contents`` or ``messages``) within limits."""
    items = result.get(items_key)
    if not isinstance(items, list):
        return result
    total = _count(items)
    kept, used, cut = _kept_items(items, limits, limits.max_result_bytes)
    structured = result.get("structuredContent")
    dropped_structured = False
    if structured is not None:
        size = json_size(structured)
        if was_cut(structured) or used + size > limits.max_result_bytes:
            dropped_structured = True
        else:
            used += size
    if not cut and not dropped_structured:
        return result
    out = {k: v for k, v in result.items() if k not in (items_key, "structuredContent")}
    out[items_key] = kept
    if not dropped_structured and structured is not None:
        out["structuredContent"] = structured
    parts = []
    if cut:
        parts.append(f"{_plural(cut, 'item')} of {total:,} cut or left out")
    if dropped_structured:
        parts.append("its structured content left out")
    note = (
        f"[steerloop: this result was cut to the server's limits "
        f"(max_blocks={limits.max_blocks:,}, max_result_bytes={limits.max_result_bytes:,}): "
        f"{'; '.join(parts)}; the rest was not kept]"
    )
    meta = out.get("_meta")
    out["_meta"] = {**(meta if isinstance(meta, dict) else {}), CUT_KEY: note}
    return out


def bound_tools(result: dict[str, Any], limits: MCPLimits) -> dict[str, Any]:
    """A ``tools/list`` page within limits: refused when too long, large tools left out."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return result
    meta = result.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    if _count(tools) > limits.max_tools:
        meta[REFUSED_KEY] = (
            f"the server lists {_count(tools):,} tools, over max_tools={limits.max_tools:,}"
        )
        rest = {k: v for k, v in result.items() if k != "nextCursor"}
        return {**rest, "tools": [], "_meta": meta}
    kept: list[Any] = []
    dropped: list[str] = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or isinstance(name, CutStr):
            kept.append(tool)  # malformed: the SDK's validation names the fault
            continue
        spec = {k: tool.get(k) for k in ("inputSchema", "description")}
        size = json_size(spec)
        if was_cut(spec) or size > limits.max_schema_bytes:
            dropped.append(
                f"tool {name!r}: its input schema and description take {size:,} bytes, "
                f"over max_schema_bytes={limits.max_schema_bytes:,}"
            )
        else:
            # The SDK validates structured results against an output schema on the event
            # loop; steerloop bounds structured content itself and does not check it.
            kept.append({k: v for k, v in tool.items() if k != "outputSchema"})
    if dropped:
        meta[DROPPED_KEY] = dropped
    return {**result, "tools": kept, "_meta": meta} if meta else {**result, "tools": kept}


def bound_listing(result: dict[str, Any], key: str, limits: MCPLimits) -> dict[str, Any]:
    """A resource or prompt list page with at most ``max_tools`` entries."""
    items = result.get(key)
    if not isinstance(items, list) or (_count(items) <= limits.max_tools and not was_cut(items)):
        return result
    meta = result.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta[CUT_KEY] = f"{_count(items):,} {key} listed, the first {limits.max_tools:,} kept"
    kept = [i for i in items[: limits.max_tools] if not was_cut(i)]
    rest = {k: v for k, v in result.items() if k != "nextCursor"}
    return {**rest, key: kept, "_meta": meta}


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return ERROR_DATA_BYTES + 1


def bound_error(error: dict[str, Any]) -> dict[str, Any]:
    """An error answer with a bounded message, and its ``data`` only when that is small."""
    message = error.get("message")
    data = error.get("data")
    # Protocol errors carry small data the client acts on: a -32022's supported versions
    # (the SDK retries at one of them), a -32042's elicitations.
    keep = data is not None and not was_cut(data) and _json_size(data) <= ERROR_DATA_BYTES
    out = {k: v for k, v in error.items() if k != "data" or keep}
    if isinstance(message, str) and len(message) > ERROR_CHARS:
        out["message"] = f"{message[:ERROR_CHARS]} [… {len(message) - ERROR_CHARS:,} chars cut]"
    return out
