"""A caller's trace carried into the turns its messages cause (W3C ``traceparent``).

A server that receives ``traceparent`` with a message calls ``continue_trace(agent, headers,
message_id)`` *before* it hands the message to the agent. Then:

* the turn that takes the message in first (the turn it causes) starts its ``invoke_agent``
  span as a **child** of the caller's span, so the caller's trace contains the agent's
  spans; other traced messages the same turn takes in become links of that span;
* a traced message a running turn takes in at a step boundary (a steer) is added to that
  turn's span as a link (its parent was fixed when it started);
* every later turn of the session links to the latest caller context, so a turn caused by
  an untraced message still leads back to the conversation's trace.

Which messages a turn takes in is read off the agent's inbox when ``turn/start`` is written:
the loop writes it and then, synchronously, claims all of ``next-step`` and the first
``next-turn`` message. The state lives with the session (weakly), so nothing outlives it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..hooks import AgentRef
from ..session import Session

__all__ = ["continue_trace", "span_context_of", "step_trace", "turn_trace"]

MAX_PENDING = 64
"""Traced messages remembered per session until a turn takes them in (the oldest go first:
a message discarded from the inbox is never claimed)."""


@dataclass(slots=True)
class _Callers:
    agent: weakref.ref[Any]
    pending: dict[str, SpanContext] = field(default_factory=dict)
    origin: SpanContext | None = None


_callers: weakref.WeakKeyDictionary[Session, _Callers] = weakref.WeakKeyDictionary()


def span_context_of(headers: Mapping[str, str]) -> SpanContext | None:
    """The remote span context ``headers`` carry (``traceparent``/``tracestate``, any case),
    or ``None`` when they carry no valid one."""
    carrier = {str(k).lower(): str(v) for k, v in headers.items()}
    context = TraceContextTextMapPropagator().extract(carrier)
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def continue_trace(agent: AgentRef, headers: Mapping[str, str], message_id: str) -> bool:
    """Make the turn that takes in the message ``message_id`` (about to be sent to ``agent``)
    a child of the caller's span in ``headers``; later turns of the session link to it.

    Call it before the message is sent (a followup to an idle agent opens its turn at once).
    Returns whether the headers carried a valid context (an invalid or absent one is ignored).
    """
    span_context = span_context_of(headers)
    if span_context is None:
        return False
    callers = _callers.get(agent.session)
    if callers is None or callers.agent() is not agent:
        callers = _callers[agent.session] = _Callers(weakref.ref(agent))
    callers.pending.pop(message_id, None)
    callers.pending[message_id] = span_context
    while len(callers.pending) > MAX_PENDING:
        del callers.pending[next(iter(callers.pending))]
    return True


def _claimed_now(agent: Any) -> set[str]:
    """The message ids the turn being opened takes in: all of ``next-step`` and the first
    ``next-turn`` message (what ``open_turn`` claims right after ``turn/start``)."""
    inbox = getattr(agent, "inbox", None)
    if inbox is None:
        return set()
    ids = {m.id for m in inbox.next_step}
    ids.update(m.id for m in inbox.next_turn[:1])
    return ids


def turn_trace(session: Session) -> tuple[SpanContext | None, list[SpanContext]]:
    """The parent and the links of the ``invoke_agent`` span of the turn ``session`` opens
    now (call it on ``turn/start``): the caller of a traced message this turn takes in is the
    parent (the first one; the others are links), and the session's latest caller context,
    when it is not the parent, is a link."""
    callers = _callers.get(session)
    if callers is None:
        return None, []
    agent = callers.agent()
    claimed = _claimed_now(agent) if agent is not None else set()
    mine = [callers.pending.pop(mid) for mid in list(callers.pending) if mid in claimed]
    parent = mine[0] if mine else None
    links = _distinct(mine[1:], parent)
    if callers.origin is not None and callers.origin != parent and callers.origin not in links:
        links.append(callers.origin)
    if parent is not None:
        callers.origin = parent
    return parent, links


def step_trace(session: Session, message_id: str) -> SpanContext | None:
    """The caller context of a traced message a running turn took in at a step (a steer):
    the caller's span becomes a link of that turn and the session's latest caller context."""
    callers = _callers.get(session)
    if callers is None:
        return None
    span_context = callers.pending.pop(message_id, None)
    if span_context is not None:
        callers.origin = span_context
    return span_context


def _distinct(contexts: Iterable[SpanContext], parent: SpanContext | None) -> list[SpanContext]:
    out: list[SpanContext] = []
    for context in contexts:
        if context != parent and context not in out:
            out.append(context)
    return out
