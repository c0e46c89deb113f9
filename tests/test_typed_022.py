"""verify-export's agentplane 0.22 typed decode (exportfmt/typed_022.py) without ../shared: what it
refuses and drops, and that ``drill`` (this package's backup path) does not apply it. Its
agreement with agentplane's own decode is tests/test_interop22.py's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.cli.main import main
from agentplane_journal.exportfmt.typed_022 import decode_problem, dropped_members

from support.helpers import TRUSTED

ENV = {"seq": 1, "run": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "epoch": 1, "v": 1}
STARTED = {
    "descriptor": {"kind": "probe", "args": None},
    "recovery": {"mode": "retry"},
    "mutates": True,
    "attempt": 1,
    "backoff_ms": 0,
}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"kind": "Note", "text": "x"}, None),
        ({"kind": "RunAdmitted", "capability": "c", "input": None, "canon": 1}, "input_label"),
        ({"kind": "RunAdmitted", "capability": "c", "input": 1, "input_label": TRUSTED}, "canon"),
        ({"kind": "EffectStarted", **STARTED, "recovery": "reconcile"}, "Recovery"),
        ({"kind": "EffectStarted", **STARTED, "recovery": {"mode": "idempotent"}}, "key"),
        ({"kind": "EffectDone", "output": 1}, "declared"),
        ({"kind": "EffectReconciled", "disposition": "maybe"}, "Disposition"),
        ({"kind": "RunSealed", "outcome": "ok", "chain_head": "AB" * 32}, "hex"),
        ({"kind": "LangGraphCheckpoint", "x": 1}, "no record kind"),
        ({"kind": "Note", "text": "x", "phase": "sideways"}, "phase"),
    ],
)
def test_decode_problem_names_what_agentplane_022_cannot_read(
    body: dict[str, Any], problem: str | None
) -> None:
    found = decode_problem({**ENV, **body})
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_dropped_members_are_what_a_typed_reseal_loses() -> None:
    body = {**ENV, "kind": "EffectStarted", **STARTED, "ordinal": 2, "phase": "forward"}
    assert decode_problem(body) is None
    assert dropped_members(body) == ["EffectStarted.ordinal", 'EffectStarted.phase: "forward"']
    sealed = {**ENV, "kind": "RunSealed", "outcome": "ok", "chain_head": "ab" * 32}
    assert dropped_members({**sealed, "reason": None}) == ["RunSealed.reason: null"]
    assert dropped_members({**ENV, "kind": "RunAdmitted", "input": None}) == []


def test_verify_export_reports_a_022_tenants_own_kinds_and_drill_still_passes(
    sqlite_database: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTPLANE_JOURNAL_URL", raising=False)
    url = sqlite_database()

    async def build() -> None:
        store = await SqlJournalStore.connect(url, profile="agentplane-0.22")
        try:
            run = RunId.generate()
            p = store.profile
            admitted = {"capability": "c", "input": None, "input_label": TRUSTED}
            await store.append(1, [p.append(run, "RunAdmitted", admitted)])
            await store.append(1, [p.append(run, "SessionCleared", {})])  # this package's kind
        finally:
            await store.close()

    asyncio.run(build())
    path = tmp_path / "e.jsonl"
    assert (
        main(["export", "--all", "--tenant", "default", "--url", url, "--output", str(path)]) == 0
    )
    capsys.readouterr()
    assert main(["verify-export", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (finding,) = report["findings"]
    assert "no record kind 'SessionCleared'" in finding and "agentplane 0.22" in finding
    assert main(["drill", "--url", url]) == 0, capsys.readouterr().out
