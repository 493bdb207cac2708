"""What a session's log says about the HTTP commands it took (the in-process host's memory
of them, rebuilt from the log whenever the session is loaded).

A message accepted over HTTP is written with ``source.http = {"cmd_seq", "idempotency_key"?,
"request"?}`` on its ``UserMessage``; its ``agent/inbox/spliced`` is durable before the
answer goes out. So after any crash the log alone says which keys were applied (with the
request each stood for and the answer given), which message ids the session holds, and
where ``cmd_seq`` goes on: nothing beside the log to keep in step with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import Block, block_to_json
from ..session._json import dumps
from ..session.events import InboxSpliced, SessionEvent

__all__ = ["HTTP_SOURCE", "Ledger", "Recorded", "request_fingerprint"]

HTTP_SOURCE = "http"
"""The key of ``UserMessage.source`` under which an HTTP command records itself."""


def request_fingerprint(mode: str, content: str | Sequence[Block], message_id: str | None) -> str:
    """What an idempotency key stands for: the mode, the content (images and files by hash)
    and the client's message id (``None`` when the server mints it). A retry under the key
    must agree on it."""
    canonical = dumps([mode, _canonical(content), message_id]).encode()
    return hashlib.sha256(canonical).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Recorded:
    """A keyed command the log holds: the request it stood for, its answer, its event."""

    request: str
    answer: dict[str, Any]
    seq: int


@dataclass(slots=True)
class Ledger:
    """The fold of one session's log into its commands (``see`` new events as they come)."""

    message_ids: set[str] = field(default_factory=set)
    keys: dict[str, Recorded] = field(default_factory=dict)
    last_cmd_seq: int = 0
    scanned: int = 0

    def see(self, events: Sequence[SessionEvent]) -> Ledger:
        """Fold the events not seen yet (the log only grows)."""
        for event in events[self.scanned :]:
            data = event.data
            if isinstance(data, InboxSpliced):
                for message in data.inserted:
                    self.message_ids.add(message.id)
                    extra = message.source.extra
                    if extra is not None and message.source.kind == "user":
                        self._record(extra.get(HTTP_SOURCE), message.id, event.seq)
        self.scanned = len(events)
        return self

    def _record(self, command: Any, message_id: str, seq: int) -> None:
        if not isinstance(command, dict):
            return
        cmd_seq = command.get("cmd_seq")
        if type(cmd_seq) is not int:
            return
        self.last_cmd_seq = max(self.last_cmd_seq, cmd_seq)
        key, request = command.get("idempotency_key"), command.get("request")
        if isinstance(key, str) and isinstance(request, str) and key not in self.keys:
            answer = {"cmd_seq": cmd_seq, "message_id": message_id}
            self.keys[key] = Recorded(request, answer, seq)


def _canonical(content: str | Sequence[Block]) -> Any:
    """A text stays itself (fingerprints of text messages are what they were)."""
    return content if isinstance(content, str) else [block_to_json(b) for b in content]
