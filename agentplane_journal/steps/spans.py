"""Optional OpenTelemetry spans for runs and effects, tied to the evidence.

Only when ``opentelemetry-api`` is installed (the ``otel`` extra); otherwise every span is a
no-op and nothing is imported. Each span carries the attributes that link a trace back to a
provable record: ``agentplane.run_id``, ``agentplane.seq`` and ``agentplane.record_hash``
(the record that settled the step), ``agentplane.effect_key``, and on a run's span
``agentplane.log_index`` once the run is sealed into the tenant's Merkle log (where
``agentplane-journal prove`` finds its inclusion proof).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentplane_journal.core.record import Record

__all__ = ["Span", "span"]

RUN_ID = "agentplane.run_id"
SEQ = "agentplane.seq"
RECORD_HASH = "agentplane.record_hash"
EFFECT_KEY = "agentplane.effect_key"
LOG_INDEX = "agentplane.log_index"
EFFECT = "agentplane.effect"
WORKFLOW = "agentplane.workflow"
OUTCOME = "agentplane.outcome"
REPLAYED = "agentplane.replayed"


def _tracer() -> Any:
    try:
        trace = importlib.import_module("opentelemetry.trace")
    except ImportError:
        return None
    return trace.get_tracer("agentplane_journal.steps")


class Span:
    """A span's attribute setter; a no-op when OpenTelemetry is not installed."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span is not None and bool(self._span.is_recording())

    def set(self, name: str, value: str | int | bool) -> None:
        if self._span is not None:
            self._span.set_attribute(name, value)

    def record(self, record: Record) -> None:
        """Tie the span to ``record``: its seq and hash."""
        self.set(SEQ, record.seq)
        self.set(RECORD_HASH, record.hash.hex())


@contextmanager
def span(name: str, **attributes: str | int | bool) -> Iterator[Span]:
    tracer = _tracer()
    if tracer is None:
        yield Span(None)
        return
    with tracer.start_as_current_span(name, attributes=attributes) as live:
        yield Span(live)
