"""The durable steps' OpenTelemetry spans, captured by the SDK's in-memory exporter.

A run's span and its effects' spans carry the attributes that tie them to the evidence: the
run id, the seq and hash of the record that settled each step, the effect key, and the run's
position in the tenant's Merkle log once sealed; each is checked against the journal.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from agentplane_journal import Fresh, SqlJournalStore, Steps

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exporter() -> Any:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        message = "opentelemetry-sdk is not installed (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the spans test: {message}")
        pytest.skip(message)
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # set once per process; reused after
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return memory


async def test_spans_point_at_the_records(store: SqlJournalStore, exporter: Any) -> None:
    exporter.clear()
    steps = Steps(store, instance="w1")

    @steps.effect("charge")
    async def charge(amount: int) -> str:
        return f"ch_{amount}"

    @steps.effect("email")
    async def email(to: str) -> str:
        return "sent"

    @steps.workflow("checkout")
    async def checkout(amount: int) -> list[str]:
        return [await charge(amount), await email("a@example.com")]

    admission = await checkout.start("k", 5)
    assert isinstance(admission, Fresh)
    run = admission.run_id
    records = {r.seq: r for r in await store.read(run)}
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"workflow checkout", "effect charge", "effect email"}
    for name in ("effect charge", "effect email"):
        attrs = spans[name].attributes
        assert attrs["agentplane.run_id"] == str(run)
        done = records[attrs["agentplane.seq"]]
        assert done.kind == "EffectDone"
        assert attrs["agentplane.record_hash"] == done.hash.hex()
        assert attrs["agentplane.effect_key"] == done.effect_key.hex()  # type: ignore[union-attr]
        assert spans[name].parent.span_id == spans["workflow checkout"].context.span_id
    attrs = spans["workflow checkout"].attributes
    sealed = records[attrs["agentplane.seq"]]
    assert sealed.kind == "RunSealed" and attrs["agentplane.record_hash"] == sealed.hash.hex()
    assert attrs["agentplane.outcome"] == "succeeded"
    inclusion = await store.inclusion_proof(run)
    assert inclusion is not None and attrs["agentplane.log_index"] == inclusion.index


SPANS_PRELUDE = """\
import json as _json
from opentelemetry import trace as _trace
from opentelemetry.sdk.trace import TracerProvider as _Provider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor as _Processor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter as _Memory

_memory = _Memory()
_provider = _Provider()
_provider.add_span_processor(_Processor(_memory))
_trace.set_tracer_provider(_provider)
"""

SPANS_REPORT = """
print("SPANS " + _json.dumps(
    [{"name": s.name, "attributes": dict(s.attributes)} for s in _memory.get_finished_spans()]
))
"""


def test_the_guide_example_runs_on_both_dialects_with_its_spans(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Any, exporter: Any
) -> None:
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    guide = (root / "docs" / "durable-steps.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"^<!-- runnable[^>]*-->\n```python\n(.*?)^```", guide, re.S | re.M)
    if dialect == "sqlite":
        url = request.getfixturevalue("sqlite_database")()
    else:
        url = request.getfixturevalue("pg_database")()  # a database of its own: key order-42
    env = dict(os.environ, AGENTPLANE_JOURNAL_URL=url, PYTHONPATH=str(root))
    result = subprocess.run(
        [sys.executable, "-c", SPANS_PRELUDE + code + SPANS_REPORT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("SPANS ")]
    spans = json.loads(line[len("SPANS ") :])
    names = [s["name"] for s in spans]
    assert names == [
        "effect payments.charge",  # timed out: EffectFailed in_doubt
        "reconcile payments.charge",  # EffectReconciled landed
        "effect email.send",
        "workflow checkout",
    ], names
    by_name = {s["name"]: s["attributes"] for s in spans}
    run = by_name["workflow checkout"]["agentplane.run_id"]
    assert all(s["attributes"]["agentplane.run_id"] == run for s in spans)
    assert by_name["reconcile payments.charge"]["agentplane.disposition"] == "landed"
    assert isinstance(by_name["workflow checkout"]["agentplane.log_index"], int)
    assert len(by_name["effect email.send"]["agentplane.record_hash"]) == 64
