"""The journal store's prebuilt statements (the decoding of its rows is
:mod:`agentplane_journal.db.row_records`'s, whose names are importable from here too).

Kept apart from :mod:`agentplane_journal.journal.store` so the repository reads as the contract:
the statements every append runs are built once per dialect here (building a statement costs
more Python than executing a cached one), and every row leaves the database through
:func:`record_from_row`, which re-hashes it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.sql.elements import BindParameter

from agentplane_journal.db.dialect import Dialect
from agentplane_journal.db.models import (
    EFFECT_STARTED_PREDICATE,
    Journal,
    RunActivity,
    RunLease,
    RunSeal,
)

# tests/test_read_rows.py and test_read_fast_checks.py import the two private decoders here.
from agentplane_journal.db.row_records import _checked_record as _checked_record
from agentplane_journal.db.row_records import _plain_record as _plain_record
from agentplane_journal.db.row_records import (
    digest,
    record_from_row,
    records_from_rows,
    stored_int,
    stored_run,
    stored_text,
)

__all__ = [
    "RECORD_COLUMNS",
    "HotStatements",
    "digest",
    "hot_statements",
    "page_statement",
    "record_from_row",
    "records_from_rows",
    "stored_int",
    "stored_run",
    "stored_text",
]


# -- the rows a record is read from ---------------------------------------------------

RECORD_COLUMNS = (
    Journal.seq,
    Journal.prev_hash,
    Journal.hash,
    Journal.raw,
    Journal.key_id,
    Journal.signature,
    # The columns that repeat something in the hashed body: the store acts on them (the
    # exactly-once index, case_history, the chain a read returns), so each is compared
    # with the body on every read. See :func:`record_from_row`.
    Journal.run_id,
    Journal.epoch,
    Journal.kind,
    Journal.effect_key,
    Journal.case_id,
)


#: A run's rows, by ``:tenant`` and ``:run_id``: the page statement is built once per size.
_RUN_KEY = and_(Journal.tenant == bindparam("tenant"), Journal.run_id == bindparam("run_id"))


@functools.lru_cache(maxsize=16)
def page_statement(size: int) -> Any:
    """The run's records from ``:from_seq``: at most ``size``, and only those stored
    before ``:budget`` bytes of ``raw`` were reached (so always the first).

    One statement whose ``LIMIT`` is computed first from the next ``size`` rows'
    ``length(raw)`` (PostgreSQL's ``length(bytea)`` reads the toast header and SQLite's
    ``length(blob)`` the record header: neither reads the bytes): ``size`` when their
    sum is under the budget (the common case: one aggregate over the index range),
    else the number of rows whose running sum before them is (a window over those
    ``size`` lengths). Only then are the rows read whole.
    """
    budget = bindparam("budget", type_=BigInteger)

    def ahead(*columns: Any) -> Any:
        return (
            select(*columns, func.coalesce(func.length(Journal.raw), 0).label("size"))
            .where(_RUN_KEY, Journal.seq >= bindparam("from_seq"))
            .order_by(Journal.seq)
            .limit(size)
            .subquery()
        )

    sizes = ahead()
    total = select(func.sum(sizes.c.size)).scalar_subquery()
    seqs = ahead(Journal.seq.label("seq"))
    before = func.sum(seqs.c.size).over(order_by=seqs.c.seq) - seqs.c.size
    sums = select(before.label("before")).subquery()
    fitting = select(func.count()).where(sums.c.before < budget).scalar_subquery()
    return (
        select(*RECORD_COLUMNS)
        .where(_RUN_KEY, Journal.seq >= bindparam("from_seq"))
        .order_by(Journal.seq)
        .limit(case((total < budget, size), else_=fitting))
    )


@dataclass(frozen=True, slots=True)
class HotStatements:
    """The statements every append runs, built once per dialect with bound parameters.

    Building a statement costs more Python than executing a cached one; the append path
    runs these with a parameter dict (``tenant``, ``run_id``, ``now``) instead.
    """

    #: Upsert of the run's activity row: bumps ``updated_at`` (never backwards) and takes
    #: the row lock that serialises every writer of the run until COMMIT.
    run_mutex: Any
    #: The run mutex for lease changes (``acquire``, ``release_lease``), which must not move
    #: ``updated_at`` or leave an activity row behind: an UPDATE that writes a new version
    #: of an existing row (so a hot statement whose snapshot predates it sees its mutex row
    #: changed and defers), else an INSERT .. DO NOTHING (which waits for a concurrent first
    #: append's uncommitted row) that :attr:`run_unclaim` deletes again before COMMIT. The
    #: UPDATE and the DELETE take ``of_tenant`` and ``of_run_id``.
    run_touch: Any
    run_claim: Any
    run_unclaim: Any
    #: One round trip for the lease (read FOR UPDATE: a takeover waits for this
    #: transaction, and one that committed first is seen at its latest version), the seal
    #: and the chain head (which cannot move while this transaction holds the run mutex).
    run_state: Any
    #: The records' multi-row INSERT; RETURNING omits a row the exactly-once index refused.
    insert_records: Any


@functools.cache
def hot_statements(dialect: Dialect) -> HotStatements:
    tenant: BindParameter[str] = bindparam("tenant")
    run_id: BindParameter[str] = bindparam("run_id")
    upsert = dialect.insert(RunActivity).values(
        tenant=tenant, run_id=run_id, updated_at=bindparam("now")
    )
    run_mutex = upsert.on_conflict_do_update(
        index_elements=[RunActivity.tenant, RunActivity.run_id],
        set_={"updated_at": dialect.greatest(RunActivity.updated_at, upsert.excluded.updated_at)},
    )
    # An UPDATE or DELETE may not name its parameters after the table's columns.
    activity = (
        RunActivity.tenant == bindparam("of_tenant"),
        RunActivity.run_id == bindparam("of_run_id"),
    )
    run_touch = (
        update(RunActivity)
        .where(*activity)
        .values(updated_at=RunActivity.updated_at)
        .returning(RunActivity.run_id)
    )
    run_claim = (
        dialect.insert(RunActivity)
        .values(tenant=tenant, run_id=run_id, updated_at=bindparam("now"))
        .on_conflict_do_nothing(index_elements=[RunActivity.tenant, RunActivity.run_id])
        .returning(RunActivity.run_id)
    )
    run_unclaim = delete(RunActivity).where(*activity)
    lease = (RunLease.tenant == tenant, RunLease.run_id == run_id)
    seal = (RunSeal.tenant == tenant, RunSeal.run_id == run_id)
    chain = (Journal.tenant == tenant, Journal.run_id == run_id)
    # The whole last row, so the head this transaction chains onto (or seals) is re-hashed
    # and checked against its columns here, in the same round trip, rather than trusted.
    last = select(*RECORD_COLUMNS).where(*chain).order_by(Journal.seq.desc()).limit(1).subquery()
    one = select(literal(1).label("one")).subquery()
    run_state = select(
        select(RunLease.epoch).where(*lease).with_for_update().scalar_subquery(),
        select(RunLease.owner).where(*lease).with_for_update().scalar_subquery(),
        select(RunSeal.outcome).where(*seal).scalar_subquery(),
        select(RunSeal.chain_head).where(*seal).scalar_subquery(),
        *last.c,
    ).select_from(one.outerjoin(last, true()))
    # The records' INSERT. Executed with a list of rows and RETURNING, SQLAlchemy's
    # "insertmanyvalues" sends it as multi-row ``INSERT .. VALUES (..), (..)`` statements of
    # up to 1000 rows, compiled once and cached. A row that would be a second start of an
    # effect is skipped (DO NOTHING on exactly the exactly-once index) rather than raising:
    # its seq is then missing from RETURNING, which names the colliding key on the same
    # connection, in the same statement, with nothing to roll back to and no second query.
    insert_records = (
        dialect.insert(Journal)
        .on_conflict_do_nothing(
            index_elements=[Journal.tenant, Journal.run_id, Journal.effect_key],
            index_where=EFFECT_STARTED_PREDICATE,
        )
        .returning(Journal.seq)
    )
    return HotStatements(
        run_mutex=run_mutex,
        run_touch=run_touch,
        run_claim=run_claim,
        run_unclaim=run_unclaim,
        run_state=run_state,
        insert_records=insert_records,
    )
