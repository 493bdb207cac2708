"""OpenTelemetry spans and metrics with the GenAI semantic conventions (extra ``otel``).

``dispose = install_otel(rt)`` emits an ``invoke_agent`` span per turn, a ``chat {model}``
span per model attempt and an ``execute_tool {tool}`` span per tool call, plus the
``gen_ai.client.inference.*`` metrics. Depends on ``opentelemetry-api`` only: the
application configures the SDK and exporter. ``continue_trace`` makes the turn a message
causes a child of the caller's ``traceparent``.
"""

from ._otel import Telemetry, install_otel, link_next_turn
from ._trace import continue_trace

__all__ = ["Telemetry", "continue_trace", "install_otel", "link_next_turn"]
