"""Durable steps survive SIGKILL at every boundary, on both dialects.

One worker process per boundary runs a checkout (a charge and a mail, both effects with a
reconcile function) and kills itself with SIGKILL there: before an effect's start is
journaled, after the start before the call, after the call before its result is journaled,
after the result, and during the conclusion (``RunSealed`` appended, not yet sealed). Then
one recovering process, whose clock runs an hour ahead so every lease has lapsed, drains the
recovery queue and runs one crash-free checkout. Judged outside the journal (a ledger file
the effects append to) and in it: every external side effect happened at most once (exactly
once, here), every in-doubt effect went through its reconcile function (an
``EffectReconciled`` record and a ledger line), every run verifies, and every run's outcome
equals the crash-free run's.

On a tenant in ``agentplane-0.22`` too (the workers open it in its own profile), at one
boundary, the call made and its result not journaled (reconciled ``landed``): a process start
is most of the cost, and ``tests/test_steps.py`` crashes at every boundary in both profiles
in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.steps.history import RunHistory

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parent / "support" / "steps_crash_worker.py"
ROOT = Path(__file__).resolve().parents[1]
BOUNDARIES = ("before_start", "after_start", "after_call", "after_result", "concluding")
#: The boundaries that leave an effect started without a result: they must be reconciled.
IN_DOUBT = ("after_start", "after_call")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(
    ("profile", "boundaries"),
    [("agentplane-0.4", BOUNDARIES), ("agentplane-0.22", ("after_call",))],
)
async def test_sigkill_at_every_boundary_then_recovery(
    make_store: Any, database_url: str, tmp_path: Path, profile: str, boundaries: tuple[str, ...]
) -> None:
    # An hour ahead, as the rescuer's: every lease the dead workers held has lapsed.
    store: SqlJournalStore = await make_store(clock=lambda: time.time() + 3600, profile=profile)
    ledger = tmp_path / "ledger"
    # The workers side by side (each its own run and key): a process start is most of the cost.
    workers = {b: _start(database_url, store.tenant, str(ledger), "work", b, b) for b in boundaries}
    for boundary, worker in workers.items():
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == -9, (boundary, worker.returncode, err[-2000:])
    assert len(await store.abandoned_runs(100)) == len(boundaries)

    rescuer = _run(database_url, store.tenant, str(ledger), "recover")
    assert rescuer.returncode == 0, rescuer.stderr[-3000:]
    report = json.loads(rescuer.stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    expected = report["baseline"]
    assert expected == {"receipt": {"charged": 42}, "mail": "sent"}

    lines = Counter(_lines(ledger))
    for boundary in boundaries:
        run = await store.admitted_as(boundary)
        assert run is not None
        assert lines[f"charge {boundary}"] == 1 and lines[f"mail {boundary}"] == 1, boundary
        records = await store.read(run)
        await store.verify(run)
        assert {r.body["v"] for r in records} == {store.profile.record_version}
        assert await store.inclusion_proof(run) is not None  # sealed into the log
        assert records[-1].kind == "RunSealed" and RunHistory.of(records).result() == expected
        reconciled = [r for r in records if r.kind == "EffectReconciled"]
        if boundary in IN_DOUBT:
            assert lines[f"reconcile {boundary}"] == 1
            assert [r.body["disposition"] for r in reconciled] == [
                "did_not_happen" if boundary == "after_start" else "landed"
            ]
        else:
            assert not reconciled and not lines[f"reconcile {boundary}"]
        # Concluding is one transaction: a crash before it is resumed (effects replayed).
        assert report["resumed"][str(run)] == expected
    assert await store.abandoned_runs(100) == []
    assert isinstance(await store.admitted_as("baseline"), RunId)
