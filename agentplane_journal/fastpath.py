"""The append hot path: one round trip on PostgreSQL, one thread hop on SQLite.

Part of the repository (it speaks SQL, through the engine's own pooled connections and their
drivers, below SQLAlchemy's statement handling). :meth:`SqlJournalStore.append` comes here
when it is not in a host's transaction; every other write, and any append this path cannot
settle, goes through the general unit of work (``store.py``), which is the reference for
what an append means. Nothing here weakens a guarantee:

* **PostgreSQL: the whole append is one autocommitted statement.** The lease holder is the
  run's only writer and knows the head it wrote last (:class:`HeadCache`, filled only
  after a commit). One statement locks the run's ``run_activity`` row (the run mutex) and
  the lease row ``FOR UPDATE``, checks the fence, the seal and that the head is still the one
  it knows, and only then inserts the pre-chained records and bumps the activity. A
  statement has one snapshot, taken *before* it waited for any lock; the mutex row carries
  the proof that the snapshot is still current: every run-changing transaction updates
  that row, so if the version the statement locked (``xmin`` after the wait) is the version
  its snapshot saw, nobody changed the run in between, and the snapshot's lease, seal and
  head are the latest. Otherwise, or when the known head is not the head, nothing is
  written and the append runs as a general unit of work (a fresh snapshot after the lock).
  The lease row is read ``FOR UPDATE``, which sees its latest version even after a wait.
  The primary key refuses a stale head too. The commit is PostgreSQL's own, waiting for the
  WAL flush (``synchronous_commit`` as the server has it); a connection lost during the
  statement is :class:`CommitUnknownError`, since an autocommitted statement may have
  committed. Behind a transaction pooler (``?pgbouncer=true``: no statement cache) the
  statement runs inside ``BEGIN``/``COMMIT``, which keeps its two protocol exchanges on one
  server connection.
* **SQLite: one thread hop per append.** aiosqlite runs each call on its connection's
  thread and wakes the event loop for each result; the general path makes one such hop per
  statement. Here the whole transaction (``BEGIN IMMEDIATE``, mutex, fence, seal, head
  re-hashed from its row, records, ``COMMIT``) is one function run on that thread, with
  ``synchronous`` as the connection has it (the store sets ``FULL``). ``BEGIN IMMEDIATE``
  holds the database's write lock throughout, so every read in it is current.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError

from . import sqlitepath
from ._batch import EFFECT_STARTED, RUN_SEALED, fenced, seal_batch
from .errors import (
    BackendError,
    CommitUnknownError,
    DuplicateEffectError,
    RunSealedError,
)
from .ids import Digest, EffectKey, RunId
from .record import Append, Record

__all__ = ["HeadCache", "PgOutcome", "append"]


class HeadCache:
    """The head each run had after this process's last commit to it, at most ``size`` runs.

    Only a hint: the append statement checks it under the run mutex, and a wrong or missing
    entry costs one general unit of work, never a wrong record. Filled only after a commit
    (never after an unknown one), dropped on any failure.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._heads: OrderedDict[tuple[str, str], tuple[int, Digest]] = OrderedDict()

    def get(self, tenant: str, run_id: str) -> tuple[int, Digest] | None:
        key = (tenant, run_id)
        head = self._heads.get(key)
        if head is not None:
            self._heads.move_to_end(key)
        return head

    def put(self, tenant: str, run_id: str, seq: int, hash_: Digest) -> None:
        self._heads[(tenant, run_id)] = (seq, hash_)
        self._heads.move_to_end((tenant, run_id))
        if len(self._heads) > self._size:
            self._heads.popitem(last=False)

    def drop(self, tenant: str, run_id: str) -> None:
        self._heads.pop((tenant, run_id), None)


# -- PostgreSQL: one statement ------------------------------------------------------------

_PG_APPEND = """
WITH lock AS (
    SELECT a.xmin = (
        SELECT s.xmin FROM {s}run_activity s WHERE s.tenant = $1 AND s.run_id = $2
    ) AS fresh
    FROM {s}run_activity a WHERE a.tenant = $1 AND a.run_id = $2
    FOR UPDATE
), st AS (
    SELECT
        (SELECT l.epoch FROM {s}run_lease l WHERE l.tenant = $1 AND l.run_id = $2 FOR UPDATE)
            AS lease_epoch,
        (SELECT l.owner FROM {s}run_lease l WHERE l.tenant = $1 AND l.run_id = $2 FOR UPDATE)
            AS lease_owner,
        (SELECT r.outcome FROM {s}run_seal r WHERE r.tenant = $1 AND r.run_id = $2)
            AS sealed_outcome,
        (SELECT j.seq FROM {s}journal j WHERE j.tenant = $1 AND j.run_id = $2
            ORDER BY j.seq DESC LIMIT 1) AS head_seq,
        (SELECT j.hash FROM {s}journal j WHERE j.tenant = $1 AND j.run_id = $2
            ORDER BY j.seq DESC LIMIT 1) AS head_hash
    FROM lock WHERE lock.fresh
), ok AS (
    SELECT 1 FROM st
    WHERE (st.lease_epoch IS NULL OR (st.lease_epoch = $4 AND st.lease_owner <> ''))
      AND st.sealed_outcome IS NULL
      AND st.head_seq = $5 AND st.head_hash = $6
), bump AS (
    UPDATE {s}run_activity SET updated_at = greatest(updated_at, $3)
    WHERE tenant = $1 AND run_id = $2 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), ins AS (
    INSERT INTO {s}journal
        (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw, key_id,
         signature, case_id)
    SELECT $1, $2, u.seq::bigint, $4, u.kind, u.effect_key, decode(u.prev_hash, 'hex'),
           decode(u.hash, 'hex'), decode(u.raw, 'hex'), u.key_id, decode(u.signature, 'hex'),
           u.case_id
    FROM ok, unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                    $12::text[], $13::text[], $14::text[], $15::text[])
         AS u(seq, kind, effect_key, prev_hash, hash, raw, key_id, signature, case_id)
    RETURNING 1
)
SELECT lock.fresh, st.lease_epoch, st.lease_owner, st.sealed_outcome,
       (SELECT count(*) FROM ins) AS written
FROM lock LEFT JOIN st ON true
"""


def pg_append_sql(schema: str | None) -> str:
    """The append statement, its tables in ``schema`` (quoted) if given."""
    prefix = "" if schema is None else '"' + schema.replace('"', '""') + '".'
    return _PG_APPEND.replace("{s}", prefix)


def pg_append_args(
    tenant: str, run_id: str, now: int, epoch: int, head: tuple[int, Digest], rows: list[Any]
) -> tuple[Any, ...]:
    """The statement's parameters; the rows go as text arrays (numbers and hex): asyncpg has
    built-in codecs for ``text[]`` but introspects ``bigint[]`` and ``bytea[]`` on each new
    connection, which also leaves a session-level setting behind (``jit``), and the store
    keeps no session state (a pooler may hand the server connection to someone else)."""
    hexed = [
        (
            str(r[2]),
            r[4],
            r[5],
            r[6].hex(),
            r[7].hex(),
            r[8].hex(),
            r[9],
            None if r[10] is None else r[10].hex(),
            r[11],
        )
        for r in rows
    ]
    return (
        tenant,
        run_id,
        now,
        epoch,
        head[0],
        bytes(head[1]),
        *map(list, zip(*hexed, strict=True)),
    )


@dataclass(frozen=True, slots=True)
class PgOutcome:
    """What the append statement did: ``written`` records, or why it wrote none."""

    written: bool
    error: Exception | None = None  # fenced or sealed: the contract's answer
    retry: bool = False  # contended, or the known head is not the head: a general unit


def pg_outcome(run: RunId, epoch: int, row: Any) -> PgOutcome:
    if row is None or not row["fresh"]:
        return PgOutcome(False, retry=True)  # no activity row yet, or another writer moved it
    if row["written"]:
        return PgOutcome(True)
    error = fenced(run, epoch, row["lease_epoch"], row["lease_owner"])
    if error is not None:
        return PgOutcome(False, error=error)
    if row["sealed_outcome"] is not None:
        return PgOutcome(False, error=RunSealedError(run, row["sealed_outcome"]))
    return PgOutcome(False, retry=True)


#: Server answers that come with the connection going away: the statement's fate is unknown.
_PG_LOST_PREFIXES = ("08", "57P")


def pg_answered(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's answer to the statement (so it surely rolled back)."""
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and not sqlstate.startswith(_PG_LOST_PREFIXES)


# -- the append, end to end ---------------------------------------------------------------


def _schema(conn: Any) -> tuple[bool, str | None]:
    """Whether this path can name the tables (and their schema) for this connection."""
    mapping = conn.sync_connection.get_execution_options().get("schema_translate_map") or {}
    if not mapping:
        return True, None
    if set(mapping) == {None}:
        return True, mapping[None]
    return False, None  # per-table maps: the general path's compiler applies them


def _driver_error(exc: BaseException) -> str:
    sqlstate = getattr(exc, "sqlstate", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}{f' [{sqlstate}]' if sqlstate else ''}: {text}"


async def append(
    store: Any,
    run: RunId,
    epoch: int,
    items: list[Append],
    general: Callable[[], Awaitable[list[Record]]],
) -> list[Record]:
    """Append ``items`` to ``run`` by this module's path, or by ``general()`` when it cannot.

    ``store`` is the :class:`SqlJournalStore` (its engine, tenant, signer and clock);
    ``general`` is the same append as a unit of work, whose answers are the reference.
    """
    keys = [i.effect_key for i in items if i.kind == EFFECT_STARTED and i.effect_key is not None]
    if len(set(keys)) != len(keys) or any(i.kind == RUN_SEALED for i in items):
        return await general()  # rare batches: a duplicate in the batch, or a conclusion
    await store._ready()
    shared = store._shared
    if shared.dialect.name == "sqlite":
        return await sqlitepath.append(store, run, epoch, items, keys, general)
    tenant, run_id = store.tenant, str(run)
    head = shared.heads.get(tenant, run_id)
    if head is None:
        records = await general()
    else:
        records = await _postgres(store, run, epoch, items, keys, head, general)
    if records:
        shared.heads.put(tenant, run_id, records[-1].seq, records[-1].hash)
    return records


async def _postgres(
    store: Any,
    run: RunId,
    epoch: int,
    items: list[Append],
    keys: list[EffectKey],
    head: tuple[int, Digest],
    general: Callable[[], Awaitable[list[Record]]],
) -> list[Record]:
    tenant, run_id, heads = store.tenant, str(run), store._shared.heads
    records, rows, _ = seal_batch(tenant, run_id, epoch, head[0], head[1], items, store._signer)
    args = pg_append_args(tenant, run_id, store._now(), epoch, head, rows)
    try:
        async with store._shared.engine.connect() as conn:
            usable, schema = _schema(conn)
            if not usable:
                row = None
            else:
                driver = (await conn.get_raw_connection()).driver_connection
                try:
                    if getattr(driver, "_stmt_cache_enabled", True):
                        row = await driver.fetchrow(pg_append_sql(schema), *args)
                    else:
                        # Behind a transaction pooler (no statement cache): asyncpg prepares
                        # and executes an uncached statement in two exchanges, and only an
                        # open transaction keeps both on one server connection.
                        async with driver.transaction():
                            row = await driver.fetchrow(pg_append_sql(schema), *args)
                except BaseException as exc:
                    if pg_answered(exc):
                        if getattr(exc, "constraint_name", None) == "journal_effect_started":
                            if len(keys) == 1:
                                raise DuplicateEffectError(keys[0]) from exc
                            row = None  # which of the keys had started: the general path says
                        elif getattr(exc, "sqlstate", None) == "23505":
                            row = None  # the key refused a stale head: the general path
                        else:
                            raise BackendError(_driver_error(exc)) from exc
                    else:
                        # Lost with the statement in flight: autocommitted, it may have landed.
                        heads.drop(tenant, run_id)
                        await conn.invalidate()
                        if isinstance(exc, Exception):
                            raise CommitUnknownError(_driver_error(exc)) from exc
                        raise
    except (DBAPIError, OSError) as exc:  # checking out or opening the connection
        heads.drop(tenant, run_id)
        raise BackendError(f"cannot reach the database: {exc}") from exc
    outcome = pg_outcome(run, epoch, row)
    if outcome.written:
        return records
    if outcome.error is not None:
        raise outcome.error
    heads.drop(tenant, run_id)
    return await general()
