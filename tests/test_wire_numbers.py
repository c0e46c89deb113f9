"""Numbers read back as their writer wrote them (issue 36): a double that canon v1 prints as an
integer (``{"x": 1e20}`` is stored ``100000000000000000000``, as is every double in
[2^64, 1e21)) is a double again when restore, drill or the steps layer's replay read it, so
re-sealing it gives the same bytes instead of "integer ... does not fit a 64-bit integer"."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentplane_journal import RunId, SqlJournalStore, Steps
from agentplane_journal.cli.main import main
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.restore import restore_export

from support.clock import FakeClock
from support.helpers import TRUSTED

#: doubles canon v1 prints as integers wider than 64 bits, and the 64-bit edges beside them
WIDE: list[Any] = [
    1e20,
    -1e20,
    2.0**64,
    -(2.0**64),
    -1e19,  # below i64::MIN
    1.2345678901234568e20,
    9.999999999999999e20,
    2**64 - 1,
    -(2**63),
    1e21,
    1e16,
]


async def _history(store: SqlJournalStore) -> list[RunId]:
    runs = []
    p = store.profile
    for i in range(3):
        run = RunId.generate()
        runs.append(run)
        admitted = {"capability": "c", "input": {"x": 1e20, "wide": WIDE}, "input_label": TRUSTED}
        await store.append(1, [p.append(run, "RunAdmitted", admitted)])
        await store.append(1, [p.append(run, "Note", {"text": f"n{i}"})])
        if i != 1:
            head = await store.head(run)
            await store.append(
                1,
                [p.append(run, "RunSealed", {"outcome": "ok", "chain_head": head.hash.hex()})],
            )
            await store.seal(run, 1, "ok")
    return runs


@pytest.mark.parametrize("profile", ["agentplane-0.22", "agentplane-0.4"])
async def test_doubles_printed_as_integers_restore_to_the_same_bytes(
    make_store: Any, tmp_path: Path, profile: str
) -> None:
    store: SqlJournalStore = await make_store(profile=profile)
    runs = await _history(store)
    first = await store.read(runs[0])
    if profile == "agentplane-0.22":
        assert b'"x":100000000000000000000' in first[0].raw
    assert first[0].body["input"]["x"] == 1e20  # read back as the double it is
    path = tmp_path / "e.jsonl"
    with path.open("w", encoding="utf-8", newline="\n") as out:
        await write_export(store, out)
    target = store.for_tenant(f"r{uuid.uuid4().hex[:10]}")
    report = await restore_export(target, path)
    assert report.is_faithful, report.to_json()
    for run in runs:
        assert [r.raw for r in await target.read(run)] == [r.raw for r in await store.read(run)]


def test_drill_passes_on_a_022_journal_holding_1e20(
    sqlite_database: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTPLANE_JOURNAL_URL", raising=False)
    url = sqlite_database()

    async def build() -> None:
        store = await SqlJournalStore.connect(url, profile="agentplane-0.22")
        try:
            await _history(store)
        finally:
            await store.close()

    asyncio.run(build())
    capsys.readouterr()
    code = main(["drill", "--url", url])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "DRILL OK" in out.out


async def test_a_steps_run_with_1e20_in_its_arguments_replays(
    make_store: Any, clock: FakeClock
) -> None:
    """Replay compares the recorded arguments with the call's: read as an int, the recorded
    1e20 could not be canonicalized and the run would be called diverged."""
    calls: Counter[str] = Counter()

    def build(steps: Steps) -> Any:
        @steps.effect("pay")
        async def pay(amount: float) -> float:
            calls["pay"] += 1
            return amount

        @steps.effect("mail")
        async def mail(amount: float) -> str:
            calls["mail"] += 1
            return "sent"

        @steps.workflow("big")
        async def big(amount: float) -> list[Any]:
            return [await pay(amount), await mail(amount)]

        return big

    left = [1]

    def crash(at: str) -> None:  # the worker dies once pay's result is journaled
        if at == "after_result" and left[0]:
            left[0] -= 1
            raise SystemExit(at)

    dead = Steps(
        await make_store(profile="agentplane-0.22"), instance="dead", lease_ttl=30, _boundary=crash
    )
    with pytest.raises(SystemExit):
        await build(dead).start("big-1", 1e20)
    clock.advance(31)
    store: SqlJournalStore = await make_store(profile="agentplane-0.22")
    alive = Steps(store, instance="alive", lease_ttl=30)
    build(alive)
    (resumed,) = (await alive.sweeper().drain()).resumed
    assert resumed.error is None, resumed.error
    assert resumed.result == [1e20, "sent"]
    assert calls["pay"] == 1 and calls["mail"] == 1
    records = await store.read(resumed.run_id)
    assert b"[100000000000000000000]" in records[0].raw
