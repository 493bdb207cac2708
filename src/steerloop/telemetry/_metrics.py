"""The GenAI client metrics of model attempts, under the current convention names.

The GenAI conventions moved to open-telemetry/semantic-conventions-genai, which renamed the
client metrics of inference operations (its migration guide, "GenAI client inference
duration / streaming / token usage metric"):

=================================================  =========================================
current (always emitted)                           v1.36 name (emitted unless the latest
                                                   conventions are opted into)
=================================================  =========================================
``gen_ai.client.inference.duration``               ``gen_ai.client.operation.duration``
``gen_ai.client.inference.time_to_first_chunk``    ``gen_ai.client.operation.time_to_first_chunk``
``gen_ai.client.inference.time_per_output_chunk``  —
``gen_ai.client.inference.usage.*`` (counters)     ``gen_ai.client.token.usage`` (histogram
``gen_ai.client.inference.operation.*_tokens``     by ``gen_ai.token.type``)
=================================================  =========================================

The usage counters and per-operation token histograms are recorded once per attempt when it
ends, failed ones included (``0`` without reported usage, the modality ``unknown``: adapters
report no breakdown by modality); cache and reasoning counters only when the provider
reported those counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics

__all__ = ["ClientMetrics", "Tokens"]

INFERENCE_DURATION = "gen_ai.client.inference.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.inference.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK = "gen_ai.client.inference.time_per_output_chunk"
USAGE_INPUT = "gen_ai.client.inference.usage.input_tokens"
USAGE_OUTPUT = "gen_ai.client.inference.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.client.inference.usage.cache_read.input_tokens"
USAGE_CACHE_WRITE = "gen_ai.client.inference.usage.cache_write.input_tokens"
USAGE_REASONING = "gen_ai.client.inference.usage.reasoning.output_tokens"
OPERATION_INPUT = "gen_ai.client.inference.operation.input_tokens"
OPERATION_OUTPUT = "gen_ai.client.inference.operation.output_tokens"
TOKEN_MODALITY = "gen_ai.token.modality"
UNKNOWN_MODALITY = "unknown"

# The v1.36 names (semantic-conventions v1.36, gen-ai-metrics.md).
LEGACY_TOKEN_USAGE = "gen_ai.client.token.usage"
LEGACY_OPERATION_DURATION = "gen_ai.client.operation.duration"
LEGACY_TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TOKEN_TYPE = "gen_ai.token.type"

ERROR_TYPE = "error.type"
# Bucket boundaries the conventions advise for the duration and token histograms.
SECONDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKENS = tuple(float(4**i) for i in range(14))


@dataclass(frozen=True, slots=True)
class Tokens:
    """One attempt's usage as the conventions count it: cached input within the input,
    reasoning within the output; ``None`` where the provider reported nothing."""

    input: int
    output: int
    cache_read: int | None = None
    cache_write: int | None = None
    reasoning: int | None = None


class ClientMetrics:
    """The instruments of one telemetry plugin (``legacy``: also the v1.36 names)."""

    def __init__(self, meter: metrics.Meter, *, legacy: bool) -> None:
        self.legacy = legacy
        self.duration = _seconds(meter, INFERENCE_DURATION, "GenAI inference duration.")
        self.first_chunk = _seconds(
            meter, TIME_TO_FIRST_CHUNK, "Time from issuing a request to its first chunk."
        )
        self.per_chunk = _seconds(
            meter, TIME_PER_OUTPUT_CHUNK, "Time between consecutive chunks after the first."
        )
        self.usage = {
            "input": _counter(meter, USAGE_INPUT, "Input tokens used, cached ones included."),
            "output": _counter(meter, USAGE_OUTPUT, "Output tokens used, reasoning included."),
            "cache_read": _counter(meter, USAGE_CACHE_READ, "Input tokens read from a cache."),
            "cache_write": _counter(meter, USAGE_CACHE_WRITE, "Input tokens written to a cache."),
            "reasoning": _counter(meter, USAGE_REASONING, "Output tokens used for reasoning."),
        }
        self.operation_input = _tokens(meter, OPERATION_INPUT, "Input tokens per operation.")
        self.operation_output = _tokens(meter, OPERATION_OUTPUT, "Output tokens per operation.")
        if legacy:
            self.legacy_duration = _seconds(
                meter, LEGACY_OPERATION_DURATION, "GenAI operation duration."
            )
            self.legacy_first_chunk = _seconds(
                meter,
                LEGACY_TIME_TO_FIRST_CHUNK,
                "Time from issuing a request to receiving the first chunk.",
            )
            self.legacy_tokens = _tokens(
                meter, LEGACY_TOKEN_USAGE, "Number of input and output tokens used."
            )

    def chunk(self, attrs: Mapping[str, Any], first: bool, seconds: float) -> None:
        """A streamed chunk: ``seconds`` since the request (the first) or the previous one."""
        if first:
            self.first_chunk.record(seconds, attrs)
            if self.legacy:
                self.legacy_first_chunk.record(seconds, attrs)
        else:
            self.per_chunk.record(seconds, attrs)

    def settled_usage(self, attrs: Mapping[str, Any], tokens: Tokens) -> None:
        """The v1.36 token histogram, recorded when the usage arrives (as it always was)."""
        if self.legacy:
            self.legacy_tokens.record(tokens.input, {**attrs, TOKEN_TYPE: "input"})
            self.legacy_tokens.record(tokens.output, {**attrs, TOKEN_TYPE: "output"})

    def ended(self, attrs: Mapping[str, Any], seconds: float, tokens: Tokens | None) -> None:
        """An attempt ended (``attrs`` carry its ``error.type`` if it failed)."""
        self.duration.record(seconds, attrs)
        if self.legacy:
            self.legacy_duration.record(seconds, attrs)
        used = tokens if tokens is not None else Tokens(0, 0)
        self.operation_input.record(used.input, attrs)
        self.operation_output.record(used.output, attrs)
        counted = {k: v for k, v in attrs.items() if k != ERROR_TYPE}
        counted[TOKEN_MODALITY] = UNKNOWN_MODALITY
        for name, value in (
            ("input", used.input),
            ("output", used.output),
            ("cache_read", used.cache_read),
            ("cache_write", used.cache_write),
            ("reasoning", used.reasoning),
        ):
            if value is not None:
                self.usage[name].add(value, counted)


def _seconds(meter: metrics.Meter, name: str, description: str) -> metrics.Histogram:
    return meter.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=SECONDS
    )


def _tokens(meter: metrics.Meter, name: str, description: str) -> metrics.Histogram:
    return meter.create_histogram(
        name, unit="{token}", description=description, explicit_bucket_boundaries_advisory=TOKENS
    )


def _counter(meter: metrics.Meter, name: str, description: str) -> metrics.Counter:
    return meter.create_counter(name, unit="{token}", description=description)
