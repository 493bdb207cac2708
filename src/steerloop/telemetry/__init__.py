"""OpenTelemetry spans and metrics with the GenAI semantic conventions (extra ``otel``).

``dispose = install_otel(rt)`` emits an ``invoke_agent`` span per turn, a ``chat {model}``
span per model attempt and an ``execute_tool {tool}`` span per tool call, plus the
``gen_ai.client.*`` histograms. Depends on ``opentelemetry-api`` only: the application
configures the SDK and exporter.
"""

from ._otel import Telemetry, install_otel, link_next_turn

__all__ = ["Telemetry", "install_otel", "link_next_turn"]
