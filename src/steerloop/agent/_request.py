"""The request builder of one agent: config, system-prompt projection, header, request (§7.6).

It owns the request-header cache: the decoded config of the latest ``request/header``, the
body of the last header built (so a steady step rebuilds nothing), whether this loop
instance already sent a request, and the surface-replacement count at the last request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._ids import IdFactory
from .._signal import AbortSignal
from ..llm._runtime import PreparedCall
from ..llm._types import CallConfig, GenerateRequest, ToolSchema
from ..messages import SystemMessage, TextBlock
from ..session._events import Replace, RequestContext, RequestHeader, SystemMessageEvent
from ._options import AgentOptions

if TYPE_CHECKING:
    from ..session._session import Session

__all__ = ["RequestBuilder"]


class RequestBuilder:
    """Builds each request of one agent's session and records what it changed."""

    __slots__ = (
        "_header_body",
        "_header_config",
        "_ids",
        "_options",
        "_replaced_at",
        "_sent",
        "_session",
    )

    def __init__(self, session: Session, options: AgentOptions, ids: IdFactory) -> None:
        self._session = session
        self._ids = ids
        self._options = options
        self._header_config: tuple[RequestHeader, CallConfig] | None = None  # decoded latest header
        # (config, adapter defaults, tool schemas, header body) of the last request built
        self._header_body: tuple[CallConfig, dict[str, Any], Any, dict[str, Any]] | None = None
        self._sent = False  # this loop instance sent its first request
        self._replaced_at = session.surface_replaced

    def default_config(self) -> CallConfig:
        """The options' config before the first request, then the latest header's."""
        header = self._session.latest(RequestHeader)
        if not self._sent or header is None:
            return self._options.call_config()
        cached = self._header_config
        if cached is None or cached[0] is not header:
            cached = self._header_config = (
                header,
                CallConfig.from_json(header.header.get("config", {})),
            )
        return cached[1]

    def project_system_prompt(
        self, prompt: str, prepared: PreparedCall, starts_series: bool, turn: int, step: int
    ) -> None:
        """Make the surface carry ``prompt`` as its system message (C7.6-4/5)."""
        session = self._session
        nodes = session.system_nodes()
        content = (TextBlock(prompt),) if prompt else ()

        def event(text_content: tuple[TextBlock, ...]) -> SystemMessageEvent:
            return SystemMessageEvent(
                turn=turn,
                step=step,
                message=SystemMessage(id=self._ids("msg"), content=text_content),
            )

        if not nodes:
            if session.latest(SystemMessageEvent) is None:
                session.append(event(content), surface_op="append")
            return
        active = [s for s in nodes if session.event(s).data.message.content]
        if prepared.reads_in_history_system and not starts_series:
            current = session.event(active[-1]).data.message.content if active else ()
            if current == content:
                return
            if content and active:
                session.append(event(content), surface_op="append")
                return
        # Normalise: the head node carries the prompt and no other system node is active, so
        # derive_messages() holds at most one system message, at index 0 (C7.6-4/5).
        head = nodes[0]
        if session.event(head).data.message.content != content:
            session.append(
                event(content),
                surface_op=Replace(head, head),
                source_event_seqs=(head,),
            )
        for seq in active:
            if seq != head:
                session.append(
                    event(()),
                    surface_op=Replace(seq, seq),
                    source_event_seqs=(seq,),
                )

    def build(
        self,
        prepared: PreparedCall,
        tools: tuple[ToolSchema, ...],
        starts_series: bool,
        signal: AbortSignal,
    ) -> GenerateRequest:
        """Record ``request/header`` and ``request/context`` when they change; the request."""
        session = self._session
        config = prepared.config
        header = self._header(config, prepared.adapter_defaults, tools)
        latest = session.latest(RequestHeader)
        reason: str | None = None
        series = starts_series or session.surface_replaced != self._replaced_at
        if not self._sent:
            reason = "initial" if latest is None else "resume"
        elif latest is None or (latest.header is not header and latest.header != header):
            reason = "change"
        elif series:
            reason = "series"
        if reason is not None:
            session.append(
                RequestHeader(header=header, reason=reason, starts_series=series),  # type: ignore[arg-type]
            )
        context = RequestContext(
            provider=prepared.provider,
            model=prepared.model,
            context_window=prepared.context_window,
            system_prompt_update="in-history" if prepared.reads_in_history_system else None,
        )
        if session.latest(RequestContext) != context:
            session.append(context)
        self._sent = True
        self._replaced_at = session.surface_replaced
        return GenerateRequest(
            provider=prepared.provider,
            model=prepared.model,
            messages=session.derived_tuple(),
            tools=tools,
            max_tokens=config.max_tokens,
            reasoning_effort=config.reasoning_effort,
            session_id=session.id,
            signal=signal,
            config=config,
        )

    def _header(
        self, config: CallConfig, defaults: Mapping[str, Any], tools: tuple[ToolSchema, ...]
    ) -> dict[str, Any]:
        """The ``request/header`` body; the same dict while config, defaults and tools stay.

        ``config`` and ``tools`` are compared by identity (the header config and the
        registry's schemas are cached objects), so a steady step rebuilds nothing.
        """
        cached = self._header_body
        if (
            cached is not None
            and cached[0] is config
            and cached[2] is tools
            and cached[1] == defaults
        ):
            return cached[3]
        header: dict[str, Any] = {"config": config.to_json()}
        if defaults:
            header["adapter_defaults"] = dict(defaults)
        if tools:
            header["tools"] = [
                {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
                for t in tools
            ]
        self._header_body = (config, dict(defaults), tools, header)
        return header
