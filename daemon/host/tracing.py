"""Optional OpenTelemetry tracing (docs/operations.md): one trace shows a steer from HTTP to the model.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set and the `otel` extra is installed
(`pip install 'worktrain[otel]'`); off, nothing of OpenTelemetry is imported and every
helper here is a no-op costing one attribute read. `setup(service)` is called once per
process (after any fork: the web tier's server workers build their app in `web/serve.py`,
each worker process its `SharedServices`); it installs an SDK tracer provider with a
batching OTLP/HTTP exporter, configured by the standard `OTEL_*` variables.

Spans: `worktrain.dispatch` and the steer's `POST /api/v2/sessions/{sessionId}/steer` in
the web tier; `worktrain.turn`, `worktrain.model_call` and `worktrain.tool` in the worker.
A steer's W3C `traceparent` (of its POST span) is stored with it (accept.lua); the model
call whose request carries steers is made a child of the first one's POST span and linked
to the others and to its turn, so the steer's trace runs from the HTTP request to the model.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACER_NAME = "worktrain"

_tracer: Any = None  # an opentelemetry Tracer once set up; None: tracing is off
# The traceparents of the steers the coming model request carries (set by the agent loop).
_carried: ContextVar[tuple[str, ...]] = ContextVar("worktrain_carried_steers", default=())


def active() -> bool:
    return _tracer is not None


def setup(service_name: str) -> bool:
    """Trace this process when OTEL_EXPORTER_OTLP_ENDPOINT is set; True when tracing is on."""
    global _tracer
    if not os.environ.get(ENDPOINT_ENV):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "%s is set but the otel extra is not installed (pip install 'worktrain[otel]'): no traces",
            ENDPOINT_ENV,
        )
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer(TRACER_NAME)
    log.info("tracing: spans go to %s (OTLP/HTTP)", os.environ[ENDPOINT_ENV])
    return True


def use_provider(provider: Any | None) -> None:
    """Trace with `provider` (tests: an SDK provider with an in-memory exporter); None: off."""
    global _tracer
    _tracer = provider.get_tracer(TRACER_NAME) if provider is not None else None


def _context_of(traceparent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def _span_context(traceparent: str) -> Any:
    from opentelemetry import trace

    return trace.get_current_span(_context_of(traceparent)).get_span_context()


_OFF = nullcontext()  # what every span is while tracing is off: no generator, no allocation


def span(
    name: str,
    attributes: dict[str, Any] | None = None,
    *,
    server: bool = False,
    parent: str | None = None,
    links: Sequence[str] = (),
) -> AbstractContextManager[Any]:
    """A span around the block (None when tracing is off). `parent`: a traceparent to
    continue; `links`: traceparents to link to."""
    if _tracer is None:
        return _OFF
    return _span(_tracer, name, attributes, server, parent, links)


@contextmanager
def _span(
    tracer: Any,
    name: str,
    attributes: dict[str, Any] | None,
    server: bool,
    parent: str | None,
    links: Sequence[str],
) -> Iterator[Any]:
    from opentelemetry import trace

    kind = trace.SpanKind.SERVER if server else trace.SpanKind.INTERNAL
    context = _context_of(parent) if parent else None
    span_links = [trace.Link(_span_context(tp)) for tp in links if tp]
    with tracer.start_as_current_span(
        name, context=context, kind=kind, attributes=attributes or {}, links=span_links
    ) as current:
        yield current


def traceparent() -> str | None:
    """The W3C traceparent of the current span; None when tracing is off or no span is open."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def carrying(traceparents: Sequence[str]) -> Iterator[None]:
    """The model calls in the block carry the steers whose POST spans these are."""
    token = _carried.set(tuple(tp for tp in traceparents if tp))
    try:
        yield
    finally:
        _carried.reset(token)


@contextmanager
def model_call_span(attributes: dict[str, Any]) -> Iterator[Any]:
    """The model call's span: a child of the first carried steer's POST span (so the steer's
    trace reaches the model), linked to the other steers and to the current turn; without
    carried steers, a child of the current span."""
    carried = _carried.get()
    if _tracer is None or not carried:
        with span("worktrain.model_call", attributes) as current:
            yield current
        return
    turn = traceparent()
    links = [*carried[1:], *([turn] if turn else [])]
    attributes = {**attributes, "worktrain.steers": len(carried)}
    with span("worktrain.model_call", attributes, parent=carried[0], links=links) as current:
        yield current


class TurnSpan:
    """The span of the live turn: begun at a turn's start, ended at the next one's or when the
    attempt ends (`end`). While open it is the current span (model calls, tools: children)."""

    def __init__(self) -> None:
        self._span: Any = None
        self._token: Any = None

    def begin(self, attributes: dict[str, Any]) -> None:
        self.end()
        if _tracer is None:
            return
        from opentelemetry import context, trace

        self._span = _tracer.start_span("worktrain.turn", attributes=attributes)
        self._token = context.attach(trace.set_span_in_context(self._span))

    def end(self) -> None:
        if self._span is None:
            return
        from opentelemetry import context

        context.detach(self._token)
        self._span.end()
        self._span = self._token = None
