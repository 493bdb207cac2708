"""``--profiles tests.service.otel_profiles:profiles``: the PostgreSQL test profiles
(``pgprofiles``) with ``install_otel`` on an SDK tracer provider whose exporter appends each
finished span as one JSON line to ``$STEERLOOP_TEST_SPANS`` (the worker is another process:
the test reads its spans from that file)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from steerloop.service import Profile
from steerloop.telemetry import install_otel

from . import pgprofiles


class JsonLinesExporter(SpanExporter):
    """Each finished span as a JSON line: names, ids (hex), parent, links, attributes."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(span_json(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def span_json(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent": None if parent is None else format(parent.span_id, "016x"),
        "parent_remote": None if parent is None else parent.is_remote,
        "links": [
            [format(lk.context.trace_id, "032x"), format(lk.context.span_id, "016x")]
            for lk in span.links
        ],
        "attributes": dict(span.attributes or {}),
    }


def profiles(rt: Any) -> list[Profile]:
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(os.environ["STEERLOOP_TEST_SPANS"]))
    )
    install_otel(rt, tracer_provider=provider)
    return pgprofiles.profiles(rt)
