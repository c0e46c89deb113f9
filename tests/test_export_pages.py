"""``export --all`` reads each page in one statement (``journal/export_pages.py``), and a
record read from the store is written with the body its read already parsed
(``exportfmt/body.py``'s ``body_text(raw, parsed)``), with the bytes and verdicts as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event, text

from agentplane_journal import Append, RunId, SqlJournalStore
from agentplane_journal.backends import reader as lean
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.record import stored_record
from agentplane_journal.exportfmt.lines import record_line
from agentplane_journal.journal import reads

from support.exports import build, export_to, lines_of, verify_lines


@pytest.fixture
def statements(store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement but a transaction's own, through the engine or the lean reads' hop
    (SQLite's export pages are read there)."""
    seen: list[str] = []
    hop = lean._hop

    def hopped(conn: Any, group: list[Any]) -> list[Any]:
        seen.extend(read.sql for read in group)
        return hop(conn, group)

    monkeypatch.setattr(lean, "_hop", hopped)

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.split(None, 1)[0].upper() not in {"BEGIN", "COMMIT", "ROLLBACK"}:
            seen.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    yield seen
    event.remove(store.engine.sync_engine, "before_cursor_execute", record)


async def _sql(store: SqlJournalStore, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(text(statement), {"t": store.tenant, **params})


def _pages(store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    page = store.export_page

    async def counted(phase: str, *args: Any, **kw: Any) -> Any:
        calls.append(phase)
        return await page(phase, *args, **kw)

    monkeypatch.setattr(store, "export_page", counted)
    return calls


async def test_each_page_is_one_statement_and_a_page_may_end_inside_a_run(
    store: SqlJournalStore,
    statements: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await build(store, 12, long=False)
    whole = tmp_path / "whole.jsonl"
    statements.clear()
    await store.checkpoint()
    header = len(statements)  # what reading the checkpoint takes
    calls = _pages(store, monkeypatch)
    statements.clear()
    cp, trailer = await export_to(store, whole)
    # Log, open runs, seals without records: a page each, and the empty page ending the
    # first two; nothing else is read.
    assert calls == ["log", "log", "open", "open", "seal-only"]
    assert len(statements) == header + len(calls), statements
    assert trailer.runs_exported == 12 and not trailer.unreadable
    assert verify_lines(lines_of(whole), cp).is_sound
    # A budget of one byte: every page is one row, so every run spans pages; same file.
    monkeypatch.setattr(reads, "PAGE_BYTES", 1)
    calls.clear()
    small = tmp_path / "small.jsonl"
    _, again = await export_to(store, small)
    # One per row: the log phase's; the open phase's (on PostgreSQL it passes the logged
    # runs' rows too, flagged; SQLite filters them out); two empty pages, the seal-only one.
    in_log, logged = False, 0
    for line in lines_of(small):
        value = json.loads(line)
        if value.get("kind") == "agentplane.export.run":
            in_log = "index" in value
        elif value.get("kind") is None:
            logged += in_log
    flagged = logged if store.dialect.windowed_export_pages else 0
    assert len(calls) == again.records + flagged + 3
    assert small.read_bytes() == whole.read_bytes()


async def test_a_corrupt_row_in_a_run_that_spans_pages_withholds_the_whole_run(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = await build(store, 8, long=False)
    victim = next(r for r in made["runs"] if r not in made["sealed"])
    await _sql(
        store,
        "UPDATE journal SET kind='Edited' WHERE tenant=:t AND run_id=:r AND seq=2",
        r=str(victim),
    )
    monkeypatch.setattr(reads, "PAGE_BYTES", 1)
    path = tmp_path / "e.jsonl"
    cp, trailer = await export_to(store, path)
    assert [u.run for u in trailer.unreadable] == [victim]
    assert "the kind column says 'Edited'" in trailer.unreadable[0].reason, trailer.unreadable
    lines = [json.loads(x) for x in lines_of(path)]
    at = next(i for i, x in enumerate(lines) if x.get("run") == victim.ulid)
    assert lines[at + 1].get("kind") is not None  # its block holds no record at all
    assert trailer.runs_exported == 7 and trailer.runs_requested == 8
    report = verify_lines(lines_of(path), cp)
    assert report.runs_sound == 7, report.findings


async def test_a_seal_whose_records_and_leaf_were_deleted_is_named_unreadable(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    """A damaged journal: the last sealed run's rows and its leaf deleted. It is in neither
    the log below the size nor the journal, and the export still names it."""
    made = await build(store, 8, long=False)
    victim = made["sealed"][-1]  # the highest log position: the size drops below it
    await _sql(store, "DELETE FROM journal WHERE tenant=:t AND run_id=:r", r=str(victim))
    await _sql(
        store,
        "DELETE FROM log_tree WHERE tenant=:t AND run_id=:r AND level=0",
        r=str(victim),
    )
    path = tmp_path / "e.jsonl"
    _, trailer = await export_to(store, path)
    assert [(u.run, u.reason) for u in trailer.unreadable] == [
        (victim, "the store holds no records for this run")
    ]
    block = next(json.loads(x) for x in lines_of(path) if victim.ulid in x)
    assert "index" not in block and trailer.runs_requested == 8


async def test_a_run_of_records_only_and_an_empty_journal_export(
    store: SqlJournalStore, tmp_path: Path
) -> None:
    path = tmp_path / "empty.jsonl"
    _, trailer = await export_to(store, path)
    assert trailer.runs_requested == 0 and len(lines_of(path)) == 2
    run = RunId.generate()
    await store.append(0, [Append(run, "Note", {"text": "only"})])
    _, trailer = await export_to(store, path)
    assert trailer.runs_exported == 1 and trailer.records == 1


async def _all_pages(
    store: SqlJournalStore, phase: str, size: int, rows: int, budget: int
) -> list[list[Any]]:
    pages, key = [], ((-1, 0) if phase == "log" else ("", 0))
    while page := await store.export_page(phase, key, size=size, rows=rows, page_bytes=budget):
        pages.append([tuple(r) for r in page])
        key = (page[-1][0], page[-1][1])
    return pages


async def test_a_log_page_cut_by_a_running_sum_is_the_page_cut_by_a_computed_limit(
    store: SqlJournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two forms of a log page (``export_pages._windowed``, PostgreSQL's; the ``LIMIT``
    computed first, SQLite's) read the same rows, page for page, whatever the bounds; and
    the open phase's two forms (the log's runs flagged by a scalar subquery, or filtered out
    by it) the same rows of the other runs."""
    made = await build(store, 9, long=False)
    # A sealed run whose seal lost its records, another whose leaf is gone: odd log rows.
    await _sql(store, "DELETE FROM journal WHERE tenant=:t AND run_id=:r", r=str(made["sealed"][1]))
    size = (await store.checkpoint()).size
    dialect = type(store.dialect)
    whole = [row for page in await _all_pages(store, "log", size, 2000, 4 << 20) for row in page]
    first, second = (len(row[8]) for row in whole[:2])  # a budget met exactly: cut there
    bounds = [(2000, 4 << 20), (1, 4 << 20), (3, 1), (5, 700), (4, first), (9, first + second)]
    for rows, budget in bounds:
        forms = []
        for windowed in (False, True):
            monkeypatch.setattr(dialect, "windowed_export_pages", windowed)
            forms.append(await _all_pages(store, "log", size, rows, budget))
        assert forms[0] == forms[1], (rows, budget)
        assert all(len(page) <= rows for page in forms[0])
        if budget == 1:  # a row past the first only after rows of no bytes (a bare seal)
            assert all(all(r[8] is None for r in page[:-1]) for page in forms[0])
        if budget == first:
            assert len(forms[0][0]) == 1  # the second row's bytes before it reach the budget
        assert [row for page in forms[0] for row in page] == whole  # the same rows, cut
    assert {row[2] for row in whole} == {str(r) for r in made["sealed"]}
    # The open phase: every other run's rows, the log's runs flagged (PostgreSQL's form) or
    # left out (SQLite's); the same rows of open runs either way.
    logged = {str(r) for r in made["sealed"]} - {str(made["sealed"][1])}
    forms = []
    for windowed in (False, True):
        monkeypatch.setattr(dialect, "windowed_export_pages", windowed)
        rows_ = [r for page in await _all_pages(store, "open", size, 3, 700) for r in page]
        assert {r[2] for r in rows_ if r[16]} == (logged if windowed else set())
        forms.append([r for r in rows_ if not r[16]])
    assert forms[0] == forms[1] and forms[0]
    assert not {r[2] for r in forms[0]} & logged


async def _reference_pages(
    store: SqlJournalStore, phase: str, size: int, rows: int, budget: int
) -> list[list[Any]]:
    """The pages as the ``LIMIT`` computed first cuts them (the form every dialect can run;
    the store's own on SQLite without lean reads), with the log's runs filtered out."""

    async def no_lean(*args: Any, **kw: Any) -> None:
        return None

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "_lean", no_lean)
        patch.setattr(type(store.dialect), "windowed_export_pages", False)
        return await _all_pages(store, phase, size, rows, budget)


async def test_a_page_cut_as_its_rows_are_stepped_is_the_page_cut_by_a_computed_limit(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's pages (SQLite: read by the lean reads and cut by bytes on SQLite's thread
    as its rows are stepped, ``Reader.rows_within``; PostgreSQL: its SQL forms) are the rows
    of the ``LIMIT`` computed first, page for page, whatever the bounds; no page holds
    ``budget`` bytes before its last row; and a hostile row in such a page is reported."""
    made = await build(store, 9, long=False)
    size = (await store.checkpoint()).size
    windowed = store.dialect.windowed_export_pages
    whole = [r for p in await _reference_pages(store, "open", size, 2000, 4 << 20) for r in p]
    first, second = (len(row[8]) for row in whole[:2])
    bounds = [(2000, 4 << 20), (1, 4 << 20), (3, 1), (5, 700), (4, first), (9, first + second)]
    for phase in ("log", "open"):
        for rows, budget in bounds:
            ours = await _all_pages(store, phase, size, rows, budget)
            ref = await _reference_pages(store, phase, size, rows, budget)
            for page in ours:
                assert len(page) <= rows and sum(len(r[8] or b"") for r in page[:-1]) < budget
            if phase == "open" and windowed:  # PostgreSQL's pages carry the log's runs flagged
                assert [r for p in ours for r in p if not r[16]] == [r for p in ref for r in p]
            else:
                assert ours == ref, (phase, rows, budget)
    reader = await store._lean(None, primary=False)
    assert reader is not None
    if windowed:  # PostgreSQL's pages are cut in SQL; a cut in the client is refused
        with pytest.raises(ValueError, match="SQLite's"):
            await reader.rows_within("SELECT 1", (), 0, 1)
    # A budget of one byte: a row a page (every row holds bytes), the stepping stopped there.
    assert {len(page) for page in await _all_pages(store, "open", size, 4, 1)} == {1}
    # A hostile row in a page cut by bytes: SQLite's raw column holding text (counted by its
    # length), PostgreSQL's emptied. Its run is named unreadable, the others exported.
    victim = next(r for r in made["runs"] if r not in made["sealed"])
    edit = "CAST(raw AS TEXT)" if store.dialect.name == "sqlite" else "''::bytea"
    await _sql(
        store,
        f"UPDATE journal SET raw = {edit} WHERE tenant=:t AND run_id=:r AND seq=2",
        r=str(victim),
    )
    for rows, budget in bounds:  # its bytes (text: its length) counted as the database does
        ours = await _all_pages(store, "open", size, rows, budget)
        ref = await _reference_pages(store, "open", size, rows, budget)
        assert [r for p in ours for r in p if not r[16]] == [r for p in ref for r in p]
        if not windowed:
            assert ours == ref, (rows, budget)
    monkeypatch.setattr(reads, "PAGE_BYTES", 700)
    cp, trailer = await export_to(store, tmp_path / "e.jsonl")
    assert [u.run for u in trailer.unreadable] == [victim], trailer.unreadable
    assert trailer.runs_exported == 8
    assert verify_lines(lines_of(tmp_path / "e.jsonl"), cp).runs_sound == 8


@pytest.mark.parametrize("handoff", ["dialect's", 1])
async def test_the_next_page_is_in_flight_while_a_page_is_written_where_the_dialect_hands_back(
    store: SqlJournalStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    handoff: Any,
) -> None:
    """With ``export_handoff_rows`` (PostgreSQL's: a server reads the next page meanwhile),
    the next page's read has begun before the first row of this one is written; without it
    (SQLite's), a page is written whole first. The file is the same either way."""
    from agentplane_journal.journal import export as export_mod

    await build(store, 9, long=False)
    if handoff != "dialect's":
        monkeypatch.setattr(type(store.dialect), "export_handoff_rows", handoff)
    step = store.dialect.export_handoff_rows
    events: list[str] = []
    page, add = store.export_page, export_mod._Block.add

    async def entered(*args: Any, **kw: Any) -> Any:
        events.append("page")
        return await page(*args, **kw)

    def added(self: Any, row: Any) -> None:
        events.append("row")
        add(self, row)

    monkeypatch.setattr(store, "export_page", entered)
    monkeypatch.setattr(export_mod._Block, "add", added)
    monkeypatch.setattr(reads, "PAGE_BYTES", 700)  # pages of a few rows
    path = tmp_path / "e.jsonl"
    _, trailer = await export_to(store, path)
    assert trailer.runs_exported == 9 and events.count("page") > 3
    first_row = events.index("row")
    assert events[:first_row].count("page") == (2 if step is not None else 1), events[:8]
    monkeypatch.setattr(type(store.dialect), "export_handoff_rows", None)
    monkeypatch.setattr(export_mod._Block, "add", add)
    whole = tmp_path / "whole.jsonl"
    await export_to(store, whole)
    assert path.read_bytes() == whole.read_bytes()


async def test_runs_spooled_past_the_held_bytes_write_the_same_file(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's lines past ``_SPOOL_BYTES`` go to a temporary file, copied out when the run
    ends: the same file with every run spooled, with small pages too, and a hostile run
    among them still named."""
    from agentplane_journal.journal import export as export_mod

    made = await build(store, 9, long=False)
    whole = tmp_path / "whole.jsonl"
    await export_to(store, whole)
    monkeypatch.setattr(export_mod, "_SPOOL_BYTES", 10)
    for budget in (4 << 20, 700):
        monkeypatch.setattr(reads, "PAGE_BYTES", budget)
        spooled = tmp_path / f"spooled-{budget}.jsonl"
        await export_to(store, spooled)
        assert spooled.read_bytes() == whole.read_bytes()
    victim = next(r for r in made["runs"] if r not in made["sealed"])
    await _sql(
        store,
        "UPDATE journal SET kind='Edited' WHERE tenant=:t AND run_id=:r AND seq=2",
        r=str(victim),
    )
    cp, trailer = await export_to(store, tmp_path / "e.jsonl")
    assert [u.run for u in trailer.unreadable] == [victim]
    assert verify_lines(lines_of(tmp_path / "e.jsonl"), cp).runs_sound == 8


# -- the body of a read record, from its read's parse -------------------------------------

_RAWS = [
    '{"a":-0}',
    '{"a":-0.0}',
    '{"a":[1,-0,2]}',
    '{"a":-9223372036854775808}',
    '{"a":-9223372036854775809}',
    '{"a":9223372036854775808}',
    '{"a":1e400}',
    '{"a":-1e400}',
    '{"a":1e-7}',
    '{"a":0.00001}',
    '{"a":1.0,"b":100.0,"c":1e16,"d":1.5e300}',
    '{"a":"\\ud800"}',
    '{"a":"x-0 y"}',
    '{"a": 18446744073709551616}',
    '{"a":[ 100000000000000000000]}',
    '{"a":1, "b": 18446744073709551615}',
    '{"kind":"RunAdmitted","seq":1,"input_label":{"trust":"t","provenance":[]},"input":{"z":1,"a":2}}',
    '{"kind":"Released","field_labels":{"b":{"trust":"t"},"a":{"sensitivity":"s"}}}',
    '{"x":1e400}',
]


def _both(raw: str) -> tuple[str, str]:
    """``record_line``'s body without and with the read's parse: each a text or its error."""
    if raw != "{}":
        raw = '{"seq":1,' + raw[1:]  # a record names its seq (its errors do)
    data = raw.encode("utf-8", "surrogatepass")
    out = []
    for read in (False, True):
        record = stored_record(json.loads(raw), data, Digest.ZERO, Digest.ZERO, None)
        try:
            line = record_line(record, read=read)
        except ValueError as exc:
            out.append(f"error: {exc}")
        else:
            out.append(line[line.index(',"body":') : line.index(',"prev_hash":')])
    return out[0], out[1]


@pytest.mark.parametrize("raw", _RAWS)
def test_the_body_from_the_reads_parse_is_the_body_from_the_bytes(raw: str) -> None:
    fresh, reused = _both(raw)
    assert reused == fresh


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["kind", "a", "b", "input_label", "z"]), _json))
def test_any_body_from_the_reads_parse_is_the_body_from_the_bytes(body: dict[str, Any]) -> None:
    # Spaced as json.dumps spaces it (no read's bytes are, but a hostile row's may be).
    raw = json.dumps(body, ensure_ascii=False, allow_nan=True)
    if "Infinity" in raw or raw == "{}":
        return  # not JSON: no read passes it
    fresh, reused = _both(raw)
    assert reused == fresh
