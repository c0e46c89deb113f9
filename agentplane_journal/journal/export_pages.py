"""The statements an export of every run reads its pages with: one statement per page.

``export --all`` used to read a page of runs in five statements (the log's page of seals or a
page of run ids, then the seals again, the page's sizes and its records, by lists of 1,000
ids each); each was compiled anew (an ``IN`` list of 1,000 parameters is not cached) and
cost more than the rows it brought. Here a page is **one** ``SELECT`` of records in export
order, with the run's seal and its leaf beside each row, from a keyset position:

* :data:`LOG` (the log's leaves below the checkpoint's size, in log order): the next
  :data:`PAGE_RUNS` seals from ``log_index`` on (an ordered scan that stops there) joined to
  their runs' records, keyed by ``(log_index, seq)``; a run with a seal and no record comes
  back as one row whose record columns are ``NULL``; on PostgreSQL cut by a running sum
  (:func:`_windowed`);
* :data:`OPEN` (every other run, by run id): a range of the journal's primary key after
  ``(run_id, seq)``; a row whose run has a seal below the size (the log phase wrote it) is
  left out by a scalar subquery in ``WHERE`` on SQLite, flagged ``skip`` on PostgreSQL
  (as an ``EXISTS`` filter it was planned as an anti-join over the rest of the journal, as
  an ``EXISTS`` flag as a hashed scan of every seal, once a page; the filter read twice a
  scanned row, once for the ``LIMIT``, cost its server more than the rows it saves);
* :data:`SEAL_ONLY` (a seal with no record, not below the size, which only a damaged
  journal holds): those runs by run id, one row each, record columns ``NULL``.

A page is at most ``rows`` rows and, past its first row, at most ``budget`` bytes of ``raw``
(the ``LIMIT`` is computed first from the rows' ``length(raw)``, as
:func:`~agentplane_journal.db.statements.page_statement` does for one run), so memory is a
page whatever the journal's size. A page may end inside a run; the next one goes on from
the last row's key. Every row leaves through :func:`~agentplane_journal.db.statements.
record_from_row` in the caller (:mod:`agentplane_journal.journal.export`).

Each row is ``(key, seq_key, run_id, chain_head, leaf, *RECORD_COLUMNS, skip)``: the page
key of the row (``log_index`` or the ``run_id`` column), the ``seq`` it continues from, the
stored ``run_id`` column (the seal's for a run with no record), the seal's ``chain_head``
column and its leaf in the stored tree (``log_tree``, as
:meth:`~agentplane_journal.journal.log.TenantLog.seals_of` reads it; both ``NULL`` in the open
phase, which writes every run open), the record's columns, and ``skip``.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
)
from sqlalchemy.dialects import sqlite

from agentplane_journal.db.models import Journal, LogTree, RunSeal
from agentplane_journal.db.statements import RECORD_COLUMNS

__all__ = [
    "LOG",
    "OPEN",
    "PAGE_ROWS",
    "RAW",
    "SEAL_ONLY",
    "page_params",
    "page_statement",
    "sqlite_page",
]

LOG = "log"
OPEN = "open"
SEAL_ONLY = "seal-only"

PAGE_ROWS = 2000
"""Rows per page at most (a page's bytes are bounded too: ``reads.PAGE_BYTES``)."""

_SEAL_KEY = and_(RunSeal.tenant == Journal.tenant, RunSeal.run_id == Journal.run_id)

PAGE_RUNS = 1000
"""Seals a log page reads the records of at most (the ``LIMIT`` of its first scan)."""


def _leaf(tenant: Any = RunSeal.tenant, run_id: Any = RunSeal.run_id) -> Any:
    """The sealed run's leaf in the stored tree, one probe on ``log_tree``'s (tenant, run_id)
    key, as ``TenantLog.seals_of`` reads it (``LIMIT 1``: a hostile duplicate is the audit's)."""
    return (
        select(LogTree.idx)
        .where(LogTree.tenant == tenant, LogTree.run_id == run_id, LogTree.level == 0)
        .limit(1)
        .scalar_subquery()
    )


def _below(log_index: Any = RunSeal.log_index) -> Any:
    """The seal's ``log_index`` is below ``:size``: the one test both phases apply, so every
    run is written by exactly one of them whatever its seal row holds (the log phase's
    :func:`_seals` selects by it; the leaf in ``log_tree`` only checks what it wrote)."""
    return log_index < bindparam("size", type_=BigInteger)


def _in_log() -> Any:
    """This row's run has a seal below ``:size`` (:func:`_below`): the log phase wrote it. A
    scalar subquery (``run_seal``'s key holds one seal a run), one index probe a row:
    PostgreSQL planned the ``EXISTS`` it was as a hashed subplan, a scan of every seal of
    the tenant, once a page. (It tested the seal's leaf in ``log_tree`` before: a seal row
    whose ``log_index`` was moved past the size, its leaf still below it, was then written
    by neither phase, and named nowhere.)"""
    return func.coalesce(select(_below()).where(_SEAL_KEY).scalar_subquery(), false())


def _seals() -> Any:
    """The next :data:`PAGE_RUNS` seals from ``:at`` below ``:size``, by an ordered scan of
    ``run_seal``'s ``(tenant, log_index)`` key that stops there: what keeps a page's work a
    page's, whatever the log's length (a join ordered by ``(log_index, seq)`` over the whole
    rest of the log was sorted whole on PostgreSQL, once a page)."""
    at = bindparam("at", type_=BigInteger)
    return (
        select(
            RunSeal.tenant,
            RunSeal.run_id,
            RunSeal.log_index,
            RunSeal.chain_head,
            _leaf().label("leaf"),
        )
        .where(
            RunSeal.tenant == bindparam("tenant"),
            RunSeal.log_index >= at,
            _below(),
        )
        .order_by(RunSeal.log_index)
        .limit(PAGE_RUNS)
        .subquery()
    )


def _log(*columns: Any) -> Any:
    return _log_from(_seals(), *columns)


def _log_from(seals: Any, *columns: Any) -> Any:
    at, after = bindparam("at", type_=BigInteger), bindparam("after_seq", type_=BigInteger)
    key = and_(Journal.tenant == seals.c.tenant, Journal.run_id == seals.c.run_id)
    return (
        select(*columns)
        .select_from(seals)
        .outerjoin(Journal, key)
        .where(or_(seals.c.log_index > at, func.coalesce(Journal.seq, 0) > after))
        .order_by(seals.c.log_index, Journal.seq)
    )


def _open(*columns: Any, filtered: bool = False) -> Any:
    """Every journal row after ``(:run, :after_seq)`` in key order: a range of the primary
    key. ``filtered``: without the rows of runs the log phase wrote (the row's
    :func:`_in_log` in ``WHERE``; SQLite's form: it reads a page no slower and hands over
    half the rows); else they come flagged ``skip`` (PostgreSQL's: the filter was read twice
    a scanned row there, once for the ``LIMIT``, and cost it more than the rows)."""
    run: Any = bindparam("run")
    after: Any = bindparam("after_seq", type_=BigInteger)
    stmt = select(*columns).where(
        Journal.tenant == bindparam("tenant"),
        tuple_(Journal.run_id, Journal.seq) > tuple_(run, after),
    )
    if filtered:
        stmt = stmt.where(~_in_log())
    return stmt.order_by(Journal.run_id, Journal.seq)


def _seal_only(*columns: Any) -> Any:
    return (
        select(*columns)
        .select_from(RunSeal)
        .where(
            RunSeal.tenant == bindparam("tenant"),
            RunSeal.run_id > bindparam("run"),
            ~exists().where(_SEAL_KEY),
            ~func.coalesce(_below(), false()),
        )
        .order_by(RunSeal.run_id)
    )


def _size() -> Any:
    return func.coalesce(func.length(Journal.raw), 0).label("size")


RAW = 8
"""The index of ``raw`` in a page's row (what a page's bytes are counted in)."""


@functools.lru_cache(maxsize=8)
def page_statement(phase: str, rows: int, windowed: bool = False, uncut: bool = False) -> Any:
    """The page statement of ``phase``, built once (its parameters are bound per page).

    ``windowed`` (the dialect's ``windowed_export_pages``; PostgreSQL's forms): a log page
    cut by a running sum (:func:`_windowed`) rather than by a ``LIMIT`` computed first, and
    an open page's runs of the log flagged ``skip`` rather than filtered out (:func:`_open`).
    The same rows either way, but for the flagged ones. ``uncut``: the log or open page
    bounded by ``rows`` alone, for a reader that cuts it by bytes as it steps the rows
    (:func:`sqlite_page`)."""
    if phase == SEAL_ONLY:
        nulls = [null().label(f"c{i}") for i in range(len(RECORD_COLUMNS))]
        return _seal_only(
            RunSeal.run_id,
            literal(0),
            RunSeal.run_id,
            RunSeal.chain_head,
            _leaf(),
            *nulls,
            false(),
        ).limit(rows)
    if phase == LOG:
        seals = _seals()
        base: Any = functools.partial(_log_from, seals)
        order = (seals.c.log_index.label("k"), func.coalesce(Journal.seq, 0).label("s"))
        head = (seals.c.run_id, seals.c.chain_head, seals.c.leaf)
        skip: Any = false()
    else:
        base = functools.partial(_open, filtered=not windowed)
        order = (Journal.run_id.label("k"), Journal.seq.label("s"))
        head = (Journal.run_id, null(), null())
        skip = false() if not windowed else _in_log()
    if uncut:
        return base(*order, *head, *RECORD_COLUMNS, skip.label("skip")).limit(rows)
    budget = bindparam("budget", type_=BigInteger)
    if windowed and phase == LOG:
        page = base(*order, *head, *RECORD_COLUMNS, skip.label("skip"))
        return _windowed(page, (seals.c.log_index, Journal.seq), rows, budget)
    # The LIMIT, computed before any row is read whole: `rows` when the next `rows` rows'
    # sizes sum under the budget, else the rows whose running sum before them is.
    sizes = base(_size()).limit(rows).subquery()
    total = select(func.sum(sizes.c.size)).scalar_subquery()
    keyed = base(*order, _size()).limit(rows).subquery()
    before = (func.sum(keyed.c.size).over(order_by=(keyed.c.k, keyed.c.s)) - keyed.c.size).label(
        "before"
    )
    sums = select(before).subquery()
    fitting = select(func.count()).where(sums.c.before < budget).scalar_subquery()
    limit = case((total < budget, rows), else_=fitting)  # never 0: nothing precedes row 1
    return base(*order, *head, *RECORD_COLUMNS, skip.label("skip")).limit(limit)


def _windowed(page: Any, order: tuple[Any, Any], rows: int, budget: Any) -> Any:
    """``page``'s first ``rows`` rows (``page`` is ordered by ``order``), cut where the sum
    of the ``raw`` bytes before a row reaches ``budget`` (never before the first row), in
    one pass: a running sum beside each row of the ordered, limited page, filtered outside.

    The log page PostgreSQL reads (the dialect's ``windowed_export_pages``). Its ``LIMIT``
    computed first was a second join of the page's seals to their records, which
    PostgreSQL planned as a hash join over a scan of the tenant's whole journal, once a
    page (at 10k runs, 11 of a page's 14 ms, and growing with the journal); here the join
    is the page's own nested loop. SQLite reads the other form faster (the window costs it
    a sort of the page), and the open phase keeps that form on both: its ``LIMIT``
    subquery is a range of the primary key."""
    sizes = func.coalesce(func.length(Journal.raw), 0)
    before = func.sum(sizes).over(order_by=order, rows=(None, -1)).label("before")
    inner = page.add_columns(before).limit(rows).subquery()
    kept = [c for c in inner.c if c.name != "before"]
    return (
        select(*kept)
        .where(func.coalesce(inner.c.before, 0) < budget)
        .order_by(inner.c[0], inner.c[1])
    )


@functools.lru_cache(maxsize=8)
def _sqlite_compiled(phase: str, rows: int) -> Any:
    return page_statement(phase, rows, uncut=True).compile(dialect=_SQLITE)


_SQLITE = sqlite.dialect()


def sqlite_page(
    tenant: str, phase: str, key: tuple[Any, Any], size: int, rows: int
) -> tuple[str, tuple[Any, ...]]:
    """The log or open page after ``key`` as sqlite3 runs it (its text, compiled once, and
    its positional arguments), at most ``rows`` rows and not cut by bytes: the lean reader
    cuts it as it steps the rows (``Reader.rows_within``, on :data:`RAW`), in the one hop.

    SQLite's form where the lean reads serve the store. The ``LIMIT`` computed from the
    page's ``length(raw)`` first reads the page's rows twice (with the open page's filter
    and the log page's join): a fifth of the page's time (at 10,000 runs, 0.127 ->
    0.092 CPU-s for the two phases' statements)."""
    compiled = _sqlite_compiled(phase, rows)
    bound = compiled.construct_params(page_params(tenant, phase, key, size, 0))
    return compiled.string, tuple(bound[name] for name in compiled.positiontup)


def page_params(
    tenant: str, phase: str, key: tuple[Any, Any], size: int, budget: int
) -> dict[str, Any]:
    """The parameters of :func:`page_statement` for the page after ``key`` (``(log_index,
    seq)``, ``(run_id, seq)`` or ``(run_id, 0)``; the start is ``(-1, 0)`` or ``("", 0)``)."""
    params: dict[str, Any] = {"tenant": tenant, "size": size}
    if phase == LOG:
        params.update(at=key[0], after_seq=key[1], budget=budget)
    elif phase == OPEN:
        params.update(run=key[0], after_seq=key[1], budget=budget)
    else:
        params.update(run=key[0])
    return params
