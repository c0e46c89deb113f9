"""Audit pages bounded by bytes: ``read_runs`` (``verify --all``, ``export --all``).

On both dialects: a page of runs is cut where its records' stored bytes would pass the
budget (the runs come back as a prefix, never empty), a run larger than the budget by
itself comes back without records to be checked page by page, and the commands, run
in-process under tracemalloc, verify and export a run of ~50 MiB of records in a bounded
peak, still naming a tampered record and leaving its run out of the export.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from agentplane_journal import RunId, SqlJournalStore
from agentplane_journal.cli import main as cli
from agentplane_journal.journal import reads as reads
from agentplane_journal.journal.reads import PAGE_BYTES

from support.streams import MiB, bulk_run


async def _runs(store: SqlJournalStore, pads: list[int]) -> list[RunId]:
    return [await bulk_run(store, 5, pad=pad) for pad in pads]


async def test_read_runs_takes_a_prefix_of_the_runs_within_the_byte_budget(
    make_store: Callable[..., Any],
) -> None:
    store = await make_store()
    runs = sorted(await _runs(store, [100, 2000, 100, 100, 30_000, 2000]), key=str)
    runs.append(RunId.generate())  # no records at all
    whole = {run: await store.read(run) for run in runs}
    stored = {run: sum(len(r.raw) for r in records) for run, records in whole.items()}
    for budget in (1, 5_000, 12_000, 60_000, 10**9):
        pending, seen = list(runs), []
        while pending:
            part = await store.read_runs(pending, page_bytes=budget)
            assert part and list(part) == pending[: len(part)]
            size = sum(stored[run] for run in part)
            if len(part) > 1 or stored[pending[0]] <= budget:
                assert size <= budget and all(read.whole for read in part.values())
                if len(part) < len(pending):  # cut because the next run did not fit
                    assert size + stored[pending[len(part)]] > budget
                for run, read in part.items():
                    assert read.records == whole[run] and read.error is None
            else:  # one run too large for any page: no records read, stream it
                ((run, read),) = part.items()
                assert not read.whole and read.records == []
                assert [r for page in [p async for p in store.pages(run)] for r in page] == (
                    whole[run]
                )
            seen += list(part)
            pending = pending[len(part) :]
        assert seen == runs
    assert await store.read_runs([]) == {}
    with pytest.raises(ValueError):
        await store.read_runs(runs, page_bytes=0)


async def _large_journal(url: str) -> tuple[RunId, list[RunId]]:
    store = await SqlJournalStore.connect(url)
    try:
        big = await bulk_run(store, 200, pad=256 * 1024, chunk=20)
        small = [await bulk_run(store, 3) for _ in range(3)]
        return big, small
    finally:
        await store.close()


class _Sink:
    """stdout for an export: counts its lines and keeps none of them (but the last few)."""

    def __init__(self) -> None:
        self.lines, self.tail = 0, ""

    def write(self, data: str) -> int:
        self.lines += data.count("\n")
        self.tail = (self.tail + data)[-4096:]
        return len(data)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _traced(argv: list[str]) -> tuple[int, _Sink, float]:
    sink = _Sink()
    tracemalloc.start()
    try:
        with contextlib.redirect_stdout(sink):  # type: ignore[type-var]
            code = cli.main(argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return code, sink, peak


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_verify_and_export_all_hold_a_page_not_a_run_of_large_records(
    dialect: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    make = request.getfixturevalue(f"{dialect}_database" if dialect == "sqlite" else "pg_database")
    url = make()
    big, _ = asyncio.run(_large_journal(url))
    assert PAGE_BYTES == 4 * MiB
    # ~50 MiB stored, ~100 MiB as records; a page of runs held every record of the big run.
    code, out, verified = _traced(["verify", "--all", "--json", "--url", url])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.tail)
    assert report["failed"] == 0 and report["checked"] == 4
    assert {r["run"]: r["records"] for r in report["runs"]}[str(big)] == 200
    code, out, exported = _traced(["export", "--format", "journal", "--all", "--url", url])
    assert code == 0, capsys.readouterr().err
    assert out.lines == 1 + 200 + 3 * 3  # the header, then every record
    with capsys.disabled():
        print(
            f"peaks: verify --all {verified / MiB:.1f} MiB, export --all {exported / MiB:.1f} MiB"
        )
    assert verified < 40 * MiB, f"verify --all peaked at {verified / MiB:.1f} MiB"
    assert exported < 40 * MiB, f"export --all peaked at {exported / MiB:.1f} MiB"

    async def tamper() -> None:
        store = await SqlJournalStore.connect(url)
        try:

            async def unit(session: Any) -> None:
                await session.execute(
                    text("UPDATE journal SET raw = :raw WHERE run_id = :r AND seq = 150"),
                    {"raw": b"{" + b" " * MiB + b"}", "r": str(big)},
                )

            await store._unit(unit)
        finally:
            await store.close()

    asyncio.run(tamper())
    capsys.readouterr()
    code, out, _ = _traced(["verify", "--all", "--json", "--url", url])
    failed = [r for r in json.loads(out.tail)["runs"] if not r["ok"]]
    assert code == 1 and [(r["run"], r["seq"]) for r in failed] == [(str(big), 150)]
    code, out, _ = _traced(["export", "--format", "journal", "--all", "--url", url])
    err = capsys.readouterr().err
    assert code == 1 and f"FAILED {big} seq 150" in err
    assert out.lines == 1 + 3 * 3  # the big run left out whole, the others exported


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_export_fails_a_run_whose_rows_change_between_its_check_and_its_writing(
    dialect: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A run too large for a page of runs is checked page by page, then read again to be
    # written: rows deleted in between must fail it, not export what was never checked.
    make = request.getfixturevalue(f"{dialect}_database" if dialect == "sqlite" else "pg_database")
    url = make()

    async def build() -> RunId:
        store = await SqlJournalStore.connect(url)
        try:
            return await bulk_run(store, 40, pad=100)
        finally:
            await store.close()

    run = asyncio.run(build())
    monkeypatch.setattr(reads, "PAGE_BYTES", 1000)  # the run no longer fits a page of runs
    pages, calls = SqlJournalStore.pages, []

    def pages_then_delete(self: SqlJournalStore, run: RunId, *a: Any, **kw: Any) -> Any:
        calls.append(run)

        async def gen() -> Any:
            if len(calls) == 2:  # the export's second read: a row goes first

                async def unit(session: Any) -> None:
                    await session.execute(
                        text("DELETE FROM journal WHERE run_id = :r AND seq = 30"), {"r": str(run)}
                    )

                await self._unit(unit)
            async for page in pages(self, run, *a, **kw):
                yield page

        return gen()

    monkeypatch.setattr(SqlJournalStore, "pages", pages_then_delete)
    code, out, _ = _traced(["export", "--format", "journal", "--all", "--url", url])
    err = capsys.readouterr().err
    assert calls == [run, run]
    assert code == 1 and f"FAILED {run} seq 31: the run's rows changed" in err, err
    assert "nothing of it was written" in err
    assert out.lines == 1  # the header: none of the run's records, not even a checked prefix
