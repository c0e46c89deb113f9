"""The PostgreSQL append statements and what their answers mean. Pure: no I/O.

Part of the repository (the statements), used by
:mod:`agentplane_journal.backends.postgresql.writer`, which
runs them. Two statements, both autocommitted, both checking under the run mutex exactly
what the general unit of work checks (``store.py`` is the reference):

* :data:`ONE` appends one run's batch: it locks the run's ``run_activity`` row (the run
  mutex) and then the lease row ``FOR UPDATE``, checks the fence, the seal and that the head
  is still the one the writer knows, and only then inserts the pre-chained records and bumps
  the activity. A statement has one snapshot, taken *before* it waited for any lock; the
  mutex row carries the proof that the snapshot is still current: every run-changing
  transaction updates that row, so if the version the statement locked (``xmin`` after the
  wait) is the version its snapshot saw, nobody changed the run in between, and the
  snapshot's seal and head are the latest. The lease row is read ``FOR UPDATE``, which sees
  its latest version. Neither lock is waited for: the mutex row is taken ``SKIP LOCKED``
  and the lease row ``NOWAIT`` (a lease row is only written under the mutex, so it is never
  locked when the mutex was free). A run whose mutex another transaction holds (a host's
  ``session=`` unit, another process's ``append_atomic``) is sent to the general unit of
  work, which waits for it on a connection of its own: one run's lock never stalls the
  writer's connection, and with it every other run's appends (a host holding run R that
  appends to run S would otherwise wait, through the writer, on itself).
* :data:`MANY` is the same for a group of runs of one tenant (group commit): arrays of
  per-run parameters, and records tagged with their run's position. Each run's checks are
  its own, and only the runs that pass get their records and their activity bump, so each
  append keeps its own all-or-nothing outcome. The locks are taken in one global order:
  every mutex row of the group first, sorted by run id (``ORDER BY .. FOR UPDATE`` sorts
  before it locks), then the lease rows, sorted; a single-run append takes its mutex row,
  then its lease row, and ``acquire`` only the lease row, so no two transactions can wait
  on each other in a cycle. A duplicate effect key is checked in the statement too (the
  snapshot is current for a fresh run), so it fails its own append, not the group; the
  exactly-once index still refuses one, should the check ever miss it.

Rows travel as text arrays (numbers and hex): asyncpg has built-in codecs for ``text[]`` but
introspects ``bigint[]`` and ``bytea[]`` on each new connection, which also leaves a
session-level setting behind (``jit``), and the store keeps no session state (a pooler may
hand the server connection to someone else). A lone record needs no array:
:data:`ONE_RECORD` is :data:`ONE` with the record's columns as scalar ``bigint``, ``text``
and ``bytea`` parameters (built-in codecs too) and the head read once; its lock and checks
are :data:`ONE`'s text, unchanged. It runs where a statement cache does (behind a pooler,
:data:`ONE`'s server-side function runs instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentplane_journal.core.append import EFFECT_STARTED
from agentplane_journal.core.batch import fenced
from agentplane_journal.core.ids import Digest, EffectKey, RunId
from agentplane_journal.errors import DuplicateEffectError, RunSealedError

__all__ = [
    "MANY_UNLESS_CANCELLED",
    "ONE_RECORD",
    "ONE_RECORD_UNLESS_CANCELLED",
    "ONE_UNLESS_CANCELLED",
    "Outcome",
    "answered",
    "group_args",
    "group_outcome",
    "one_args",
    "one_outcome",
    "pooled",
    "record_args",
    "sql",
]

_COLUMNS = (
    "(tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw, key_id, signature,"
    " case_id)"
)
_DECODED = (
    "u.kind, u.effect_key, decode(u.prev_hash, 'hex'), decode(u.hash, 'hex'),"
    " decode(u.raw, 'hex'), u.key_id, decode(u.signature, 'hex'), u.case_id"
)

ONE = f"""
WITH lock AS (
    SELECT a.xmin = (
        SELECT s.xmin FROM {{s}}run_activity s WHERE s.tenant = $1 AND s.run_id = $2
    ) AS fresh
    FROM {{s}}run_activity a WHERE a.tenant = $1 AND a.run_id = $2
    FOR UPDATE SKIP LOCKED
), st AS (
    SELECT
        (SELECT l.epoch FROM {{s}}run_lease l WHERE l.tenant = $1 AND l.run_id = $2
            FOR UPDATE NOWAIT) AS lease_epoch,
        (SELECT l.owner FROM {{s}}run_lease l WHERE l.tenant = $1 AND l.run_id = $2
            FOR UPDATE NOWAIT) AS lease_owner,
        (SELECT r.outcome FROM {{s}}run_seal r WHERE r.tenant = $1 AND r.run_id = $2)
            AS sealed_outcome,
        (SELECT j.seq FROM {{s}}journal j WHERE j.tenant = $1 AND j.run_id = $2
            ORDER BY j.seq DESC LIMIT 1) AS head_seq,
        (SELECT j.hash FROM {{s}}journal j WHERE j.tenant = $1 AND j.run_id = $2
            ORDER BY j.seq DESC LIMIT 1) AS head_hash
    FROM lock WHERE lock.fresh
), ok AS (
    SELECT 1 FROM st
    WHERE (st.lease_epoch IS NULL OR (st.lease_epoch = $4 AND st.lease_owner <> ''))
      AND st.sealed_outcome IS NULL
      AND st.head_seq = $5 AND st.head_hash = $6
), bump AS (
    UPDATE {{s}}run_activity SET updated_at = greatest(updated_at, $3)
    WHERE tenant = $1 AND run_id = $2 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), ins AS (
    INSERT INTO {{s}}journal {_COLUMNS}
    SELECT $1, $2, u.seq::bigint, $4, {_DECODED}
    FROM ok, unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                    $12::text[], $13::text[], $14::text[], $15::text[])
         AS u(seq, kind, effect_key, prev_hash, hash, raw, key_id, signature, case_id)
    RETURNING 1
)
SELECT lock.fresh, st.lease_epoch, st.lease_owner, st.sealed_outcome,
       (SELECT count(*) FROM ins) AS written
FROM lock LEFT JOIN st ON true
"""

#: :data:`ONE` for an effect's start, whose step boundary checks the run's stop request in
#: the same statement: a request found writes nothing (the statement answers as for a
#: stale head), and the general unit of work, sent the append, reads it and answers it.
ONE_UNLESS_CANCELLED = ONE.replace(
    "      AND st.head_seq = $5 AND st.head_hash = $6\n",
    "      AND st.head_seq = $5 AND st.head_hash = $6\n"
    "      AND NOT EXISTS (SELECT 1 FROM {s}run_cancel c WHERE c.tenant = $1 AND c.run_id = $2)\n",
)
assert ONE_UNLESS_CANCELLED != ONE


def _record(one: str) -> str:
    """``one`` (:data:`ONE` or :data:`ONE_UNLESS_CANCELLED`) for a single record sent as
    scalar parameters (``$7`` seq, ``$8`` kind, ``$9`` effect key, ``$10`` prev hash, ``$11``
    hash, ``$12`` raw, ``$13`` key id, ``$14`` signature, ``$15`` case id: asyncpg's
    built-in ``bigint``, ``text`` and ``bytea`` codecs, so no hex to decode and no array to
    unpack), and the head read once (seq and hash compared in one subquery, as :data:`MANY`
    does). Everything up to the head check (the mutex row, its ``xmin`` proof, the lease
    row's locks, the seal) is ``one``'s text, unchanged."""
    steps = (
        (
            "        (SELECT j.seq FROM {s}journal j WHERE j.tenant = $1 AND j.run_id = $2\n"
            "            ORDER BY j.seq DESC LIMIT 1) AS head_seq,\n"
            "        (SELECT j.hash FROM {s}journal j WHERE j.tenant = $1 AND j.run_id = $2\n"
            "            ORDER BY j.seq DESC LIMIT 1) AS head_hash\n",
            "        (SELECT j.seq = $5 AND j.hash = $6 FROM {s}journal j\n"
            "            WHERE j.tenant = $1 AND j.run_id = $2\n"
            "            ORDER BY j.seq DESC LIMIT 1) AS at_head\n",
        ),
        (
            "      AND st.head_seq = $5 AND st.head_hash = $6\n",
            "      AND st.at_head\n",
        ),
        (
            f"    SELECT $1, $2, u.seq::bigint, $4, {_DECODED}\n"
            "    FROM ok, unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[],\n"
            "                    $12::text[], $13::text[], $14::text[], $15::text[])\n"
            "         AS u(seq, kind, effect_key, prev_hash, hash, raw, key_id, signature,"
            " case_id)\n",
            "    SELECT $1, $2, $7, $4, $8, $9, $10, $11, $12, $13, $14, $15 FROM ok\n",
        ),
    )
    for old, new in steps:
        assert one.count(old) == 1, old
        one = one.replace(old, new)
    return one


#: :data:`ONE` for the commonest append, one record (a LangGraph ``put``, a step's record),
#: sent on a connection with a statement cache (behind a transaction pooler the server-side
#: function of :data:`ONE` runs instead: no migration holds this text). The server does
#: less for the same checks: no ``text[]`` arrays to unpack, no hex to decode, the head read
#: once (docs/performance.md, 2026-12-05 07:00-08:00: 15-60 µs of server time per append).
#: Its answer is :data:`ONE`'s, read by :func:`one_outcome`; parameters: :func:`record_args`.
ONE_RECORD = _record(ONE)
#: :data:`ONE_UNLESS_CANCELLED` for one record, as :data:`ONE_RECORD` is :data:`ONE`.
ONE_RECORD_UNLESS_CANCELLED = _record(ONE_UNLESS_CANCELLED)

MANY = f"""
WITH req AS MATERIALIZED (
    SELECT r.i, r.run_id, r.now::bigint AS now, r.epoch::bigint AS epoch,
           r.head_seq::bigint AS head_seq, decode(r.head_hash, 'hex') AS head_hash
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
         WITH ORDINALITY AS r(run_id, now, epoch, head_seq, head_hash, i)
), lock AS MATERIALIZED (
    SELECT a.run_id, a.xmin = (
        SELECT s.xmin FROM {{s}}run_activity s WHERE s.tenant = $1 AND s.run_id = a.run_id
    ) AS fresh
    FROM {{s}}run_activity a
    WHERE a.tenant = $1 AND a.run_id = ANY ($2::text[])
    ORDER BY a.run_id
    FOR UPDATE SKIP LOCKED
), lease AS MATERIALIZED (
    -- the array is an InitPlan: every mutex row is locked before the first lease row
    SELECT l.run_id, l.epoch, l.owner FROM {{s}}run_lease l
    WHERE l.tenant = $1
      AND l.run_id = ANY ((SELECT array_agg(k.run_id) FROM lock k WHERE k.fresh)::text[])
    ORDER BY l.run_id
    FOR UPDATE NOWAIT
), recs AS MATERIALIZED (
    SELECT u.i::bigint AS i, u.seq::bigint AS seq, u.kind, u.effect_key, u.prev_hash,
           u.hash, u.raw, u.key_id, u.signature, u.case_id
    FROM unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                $13::text[], $14::text[], $15::text[], $16::text[])
         AS u(i, seq, kind, effect_key, prev_hash, hash, raw, key_id, signature, case_id)
), st AS MATERIALIZED (
    SELECT q.i, q.run_id, q.now, q.epoch, k.fresh, ls.epoch AS lease_epoch,
           ls.owner AS lease_owner,
        (SELECT r.outcome FROM {{s}}run_seal r WHERE r.tenant = $1 AND r.run_id = q.run_id)
            AS sealed_outcome,
        (SELECT j.seq = q.head_seq AND j.hash = q.head_hash FROM {{s}}journal j
            WHERE j.tenant = $1 AND j.run_id = q.run_id ORDER BY j.seq DESC LIMIT 1)
            AS at_head,
        (SELECT c.effect_key FROM recs c JOIN {{s}}journal j
            ON j.tenant = $1 AND j.run_id = q.run_id AND j.kind = '{EFFECT_STARTED}'
           AND j.effect_key = c.effect_key
            WHERE c.i = q.i AND c.kind = '{EFFECT_STARTED}' ORDER BY c.seq LIMIT 1) AS started
    FROM req q
    LEFT JOIN lock k ON k.run_id = q.run_id
    LEFT JOIN lease ls ON ls.run_id = q.run_id
), ok AS MATERIALIZED (
    SELECT st.i, st.run_id, st.now, st.epoch FROM st
    WHERE st.fresh
      AND (st.lease_epoch IS NULL OR (st.lease_epoch = st.epoch AND st.lease_owner <> ''))
      AND st.sealed_outcome IS NULL AND st.at_head AND st.started IS NULL
), bump AS (
    UPDATE {{s}}run_activity a SET updated_at = greatest(a.updated_at, ok.now)
    FROM ok WHERE a.tenant = $1 AND a.run_id = ok.run_id
    RETURNING 1
), ins AS (
    INSERT INTO {{s}}journal {_COLUMNS}
    SELECT $1, ok.run_id, u.seq, ok.epoch, {_DECODED}
    FROM ok JOIN recs u ON u.i = ok.i
    RETURNING run_id
)
SELECT st.fresh, st.lease_epoch, st.lease_owner, st.sealed_outcome, st.started,
       (SELECT count(*) FROM ins WHERE ins.run_id = st.run_id) AS written
FROM st ORDER BY st.i
"""


def _checking(many: str) -> str:
    """:data:`MANY` with a flag per run (``$17``, ``'1'`` for an effect's start): a flagged
    run with a stop request writes nothing (answered as for a stale head, so the general
    unit reads the request and answers it), as :data:`ONE_UNLESS_CANCELLED` does alone."""
    steps = (
        (
            "           r.head_seq::bigint AS head_seq, decode(r.head_hash, 'hex') AS head_hash\n"
            "    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])\n"
            "         WITH ORDINALITY AS r(run_id, now, epoch, head_seq, head_hash, i)",
            "           r.head_seq::bigint AS head_seq, decode(r.head_hash, 'hex') AS head_hash,\n"
            "           r.cancel_check\n"
            "    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[],\n"
            "                $17::text[])\n"
            "         WITH ORDINALITY AS r(run_id, now, epoch, head_seq, head_hash, cancel_check,"
            " i)",
        ),
        (
            "    SELECT q.i, q.run_id, q.now, q.epoch, k.fresh, ls.epoch AS lease_epoch,\n",
            "    SELECT q.i, q.run_id, q.now, q.epoch, k.fresh, ls.epoch AS lease_epoch,\n"
            "        q.cancel_check, (SELECT true FROM {s}run_cancel c\n"
            "            WHERE c.tenant = $1 AND c.run_id = q.run_id) AS cancelled,\n",
        ),
        (
            "      AND st.sealed_outcome IS NULL AND st.at_head AND st.started IS NULL\n",
            "      AND st.sealed_outcome IS NULL AND st.at_head AND st.started IS NULL\n"
            "      AND (st.cancel_check = '0' OR st.cancelled IS NULL)\n",
        ),
    )
    for old, new in steps:
        assert old in many, old
        many = many.replace(old, new)
    return many


MANY_UNLESS_CANCELLED = _checking(MANY)

#: The same statements as server-side functions (revision ``0007_pooled_append`` holds their
#: bodies, equal to :data:`ONE` and :data:`MANY`): what runs behind a transaction pooler,
#: where nothing the client prepares outlives its transaction but the server session keeps
#: a function's plans, so only this call is parsed and planned per append.
POOLED = {
    ONE: "SELECT * FROM {s}agentplane_journal_append_one("
    + ", ".join(f"${i}" for i in range(1, 16))
    + ")",
    MANY: "SELECT * FROM {s}agentplane_journal_append_many("
    + ", ".join(f"${i}" for i in range(1, 17))
    + ")",
}


@lru_cache(maxsize=64)
def sql(statement: str, schema: str | None) -> str:
    """``statement`` with its tables in ``schema`` (quoted) if given."""
    prefix = "" if schema is None else '"' + schema.replace('"', '""') + '".'
    return statement.replace("{s}", prefix)


def pooled(statement: str, schema: str | None) -> str:
    """The call of ``statement``'s server-side function, its tables in ``schema``."""
    return sql(POOLED[statement], schema)


def _hexed(row: Sequence[Any]) -> tuple[Any, ...]:
    """One journal row (``_batch.COLUMNS`` order) from ``seq`` on, as the arrays carry it."""
    return (
        str(row[2]),
        row[4],
        row[5],
        row[6].hex(),
        row[7].hex(),
        row[8].hex(),
        row[9],
        None if row[10] is None else row[10].hex(),
        row[11],
    )


def one_args(
    tenant: str,
    run_id: str,
    now: int,
    epoch: int,
    head: tuple[int, Digest],
    rows: Sequence[Sequence[Any]],
) -> tuple[Any, ...]:
    """:data:`ONE`'s parameters."""
    columns = zip(*map(_hexed, rows), strict=True)
    return (tenant, run_id, now, epoch, head[0], bytes(head[1]), *map(list, columns))


def record_args(
    tenant: str, run_id: str, now: int, epoch: int, head: tuple[int, Digest], row: Sequence[Any]
) -> tuple[Any, ...]:
    """:data:`ONE_RECORD`'s parameters: one journal row (``_batch.COLUMNS`` order) as is."""
    return (tenant, run_id, now, epoch, head[0], bytes(head[1]), *row[2:3], *row[4:12])


def group_args(
    tenant: str,
    runs: Sequence[tuple[str, int, int, tuple[int, Digest], Sequence[Sequence[Any]]]],
) -> tuple[Any, ...]:
    """:data:`MANY`'s parameters for ``runs``: (run id, now, epoch, head, rows) each."""
    run_ids, nows, epochs, seqs, hashes = [], [], [], [], []
    tagged: list[tuple[Any, ...]] = []
    for i, (run_id, now, epoch, head, rows) in enumerate(runs, start=1):
        run_ids.append(run_id)
        nows.append(str(now))
        epochs.append(str(epoch))
        seqs.append(str(head[0]))
        hashes.append(bytes(head[1]).hex())
        tag = str(i)
        tagged.extend((tag, *_hexed(row)) for row in rows)
    columns = zip(*tagged, strict=True)
    return (tenant, run_ids, nows, epochs, seqs, hashes, *map(list, columns))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a statement did for one append: ``written`` its records, or why it wrote none."""

    written: bool
    error: Exception | None = None  # fenced, sealed or a started effect: the contract's answer
    general: bool = False  # contended, or the known head is not the head: a general unit


WRITTEN = Outcome(True)
#: Nothing written, and nothing to answer yet: the append goes to the general unit of work
#: (the writer's :data:`~agentplane_journal.backends.postgresql.writer.GENERAL`).
GENERAL = Outcome(False, general=True)


def one_outcome(run: RunId, epoch: int, row: Any) -> Outcome:
    """:data:`ONE`'s answer (``None``: the run had no activity row yet)."""
    if row is None or not row["fresh"]:
        return GENERAL  # no activity row yet, or another writer moved it
    if row["written"]:
        return WRITTEN
    error = fenced(run, epoch, row["lease_epoch"], row["lease_owner"])
    if error is not None:
        return Outcome(False, error=error)
    if row["sealed_outcome"] is not None:
        return Outcome(False, error=RunSealedError(run, row["sealed_outcome"]))
    return GENERAL


def group_outcome(run: RunId, epoch: int, row: Any) -> Outcome:
    """One row of :data:`MANY`'s answer: the same verdicts, and a started effect key."""
    outcome = one_outcome(run, epoch, row if row["fresh"] else None)
    if outcome.general and row["fresh"] and row["started"] is not None:
        started = row["started"]
        try:
            key = EffectKey.from_hex(started)
        except (TypeError, ValueError):
            return GENERAL  # not a key we wrote: the general path reads and judges the row
        return Outcome(False, error=DuplicateEffectError(key))
    return outcome


#: Server answers that come with the connection going away: the statement's fate is unknown.
_LOST_PREFIXES = ("08", "57P")


def answered(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's answer to the statement (so it surely rolled back)."""
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and not sqlstate.startswith(_LOST_PREFIXES)
