"""Server-side functions for the hot appends behind a transaction pooler.

Behind PgBouncer in transaction-pooling mode (``?pgbouncer=true``) nothing prepared survives
from one transaction to the next, so the append statements
(:mod:`agentplane_journal.backends.postgresql.sql`: one run's batch, a group of runs) were
parsed, analysed and planned again for every append, most of its time (2-3 ms against
0.6 ms direct, the plan alone about 1-3 ms). PL/pgSQL keeps the plans of a function's
statements in the *server* session, and the pooler keeps its server connections, so the
same statement run as ``SELECT * FROM agentplane_journal_append_one(...)`` is planned once
per server connection and per append only the trivial call is parsed.

Each function's body is exactly one of those statements (``RETURN QUERY`` of it), frozen
here as this revision defines it: one statement, one snapshot taken before any lock is
waited for, the same locks in the same order, the same answer rows, the same errors (a
unique violation still names its constraint). ``#variable_conflict use_column``: a name in
the statement is always a column, never the function's result columns. A test holds these
texts equal to the live statements: changing those needs a new revision that replaces the
functions. Additive (no table touched); nothing at all on SQLite. ``CREATE OR REPLACE``: a
database that holds the functions without this revision recorded (a partial restore of a
dump, a version table dropped by hand) gets this definition, never an error.

Revision ID: 0007_pooled_append
Revises: 0006_cosignatures
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op

revision: str = "0007_pooled_append"
down_revision: str | None = "0006_cosignatures"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The functions' names (in the journal's schema).
APPEND_ONE = "agentplane_journal_append_one"
APPEND_MANY = "agentplane_journal_append_many"

#: The single-run statement as this revision defines it (``{s}``: the schema prefix).
ONE = """
WITH lock AS (
    SELECT a.xmin = (
        SELECT s.xmin FROM {s}run_activity s WHERE s.tenant = $1 AND s.run_id = $2
    ) AS fresh
    FROM {s}run_activity a WHERE a.tenant = $1 AND a.run_id = $2
    FOR UPDATE SKIP LOCKED
), st AS (
    SELECT
        (SELECT l.epoch FROM {s}run_lease l WHERE l.tenant = $1 AND l.run_id = $2
            FOR UPDATE NOWAIT) AS lease_epoch,
        (SELECT l.owner FROM {s}run_lease l WHERE l.tenant = $1 AND l.run_id = $2
            FOR UPDATE NOWAIT) AS lease_owner,
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
    INSERT INTO {s}journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw,
                         key_id, signature, case_id)
    SELECT $1, $2, u.seq::bigint, $4,
           u.kind, u.effect_key, decode(u.prev_hash, 'hex'), decode(u.hash, 'hex'),
           decode(u.raw, 'hex'), u.key_id, decode(u.signature, 'hex'), u.case_id
    FROM ok, unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                    $12::text[], $13::text[], $14::text[], $15::text[])
         AS u(seq, kind, effect_key, prev_hash, hash, raw, key_id, signature, case_id)
    RETURNING 1
)
SELECT lock.fresh, st.lease_epoch, st.lease_owner, st.sealed_outcome,
       (SELECT count(*) FROM ins) AS written
FROM lock LEFT JOIN st ON true
"""

#: The group statement as this revision defines it.
MANY = """
WITH req AS MATERIALIZED (
    SELECT r.i, r.run_id, r.now::bigint AS now, r.epoch::bigint AS epoch,
           r.head_seq::bigint AS head_seq, decode(r.head_hash, 'hex') AS head_hash
    FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
         WITH ORDINALITY AS r(run_id, now, epoch, head_seq, head_hash, i)
), lock AS MATERIALIZED (
    SELECT a.run_id, a.xmin = (
        SELECT s.xmin FROM {s}run_activity s WHERE s.tenant = $1 AND s.run_id = a.run_id
    ) AS fresh
    FROM {s}run_activity a
    WHERE a.tenant = $1 AND a.run_id = ANY ($2::text[])
    ORDER BY a.run_id
    FOR UPDATE SKIP LOCKED
), lease AS MATERIALIZED (
    -- the array is an InitPlan: every mutex row is locked before the first lease row
    SELECT l.run_id, l.epoch, l.owner FROM {s}run_lease l
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
        (SELECT r.outcome FROM {s}run_seal r WHERE r.tenant = $1 AND r.run_id = q.run_id)
            AS sealed_outcome,
        (SELECT j.seq = q.head_seq AND j.hash = q.head_hash FROM {s}journal j
            WHERE j.tenant = $1 AND j.run_id = q.run_id ORDER BY j.seq DESC LIMIT 1)
            AS at_head,
        (SELECT c.effect_key FROM recs c JOIN {s}journal j
            ON j.tenant = $1 AND j.run_id = q.run_id AND j.kind = 'EffectStarted'
           AND j.effect_key = c.effect_key
            WHERE c.i = q.i AND c.kind = 'EffectStarted' ORDER BY c.seq LIMIT 1) AS started
    FROM req q
    LEFT JOIN lock k ON k.run_id = q.run_id
    LEFT JOIN lease ls ON ls.run_id = q.run_id
), ok AS MATERIALIZED (
    SELECT st.i, st.run_id, st.now, st.epoch FROM st
    WHERE st.fresh
      AND (st.lease_epoch IS NULL OR (st.lease_epoch = st.epoch AND st.lease_owner <> ''))
      AND st.sealed_outcome IS NULL AND st.at_head AND st.started IS NULL
), bump AS (
    UPDATE {s}run_activity a SET updated_at = greatest(a.updated_at, ok.now)
    FROM ok WHERE a.tenant = $1 AND a.run_id = ok.run_id
    RETURNING 1
), ins AS (
    INSERT INTO {s}journal (tenant, run_id, seq, epoch, kind, effect_key, prev_hash, hash, raw,
                         key_id, signature, case_id)
    SELECT $1, ok.run_id, u.seq, ok.epoch,
           u.kind, u.effect_key, decode(u.prev_hash, 'hex'), decode(u.hash, 'hex'),
           decode(u.raw, 'hex'), u.key_id, decode(u.signature, 'hex'), u.case_id
    FROM ok JOIN recs u ON u.i = ok.i
    RETURNING run_id
)
SELECT st.fresh, st.lease_epoch, st.lease_owner, st.sealed_outcome, st.started,
       (SELECT count(*) FROM ins WHERE ins.run_id = st.run_id) AS written
FROM st ORDER BY st.i
"""

_ONE_SIGNATURE = "text, text, bigint, bigint, bigint, bytea" + ", text[]" * 9
_ONE_RESULT = (
    "fresh boolean, lease_epoch bigint, lease_owner text, sealed_outcome text, written bigint"
)
_MANY_SIGNATURE = "text" + ", text[]" * 15
_MANY_RESULT = (
    "fresh boolean, lease_epoch bigint, lease_owner text, sealed_outcome text,"
    " started text, written bigint"
)


def _schema() -> str | None:
    # The schema our env.py names (see 0001); None: the default schema.
    return op.get_context().opts.get("agentplane_journal_schema")


def _prefix() -> str:
    schema = _schema()
    return "" if schema is None else '"' + schema.replace('"', '""') + '".'


def _function(name: str, signature: str, result: str, statement: str) -> str:
    prefix = _prefix()
    return (
        f"CREATE OR REPLACE FUNCTION {prefix}{name}({signature}) RETURNS TABLE ({result})\n"
        "LANGUAGE plpgsql VOLATILE AS $agentplane_journal$\n"
        "#variable_conflict use_column\n"
        f"BEGIN\nRETURN QUERY {statement.replace('{s}', prefix).strip()};\nEND\n"
        "$agentplane_journal$"
    )


def _postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    if not _postgresql():
        return
    op.execute(_function(APPEND_ONE, _ONE_SIGNATURE, _ONE_RESULT, ONE))
    op.execute(_function(APPEND_MANY, _MANY_SIGNATURE, _MANY_RESULT, MANY))


def downgrade() -> None:
    # What a lower revision's downgrade refuses is refused before this step too: SQLite's
    # alembic commits each revision by itself (this step would be done, the lower refused).
    if not context.is_offline_mode():
        script = op.get_context().environment_context.script
        script.get_revision("0006_cosignatures").module.refuse_lower()
    if not _postgresql():
        return
    prefix = _prefix()
    op.execute(f"DROP FUNCTION {prefix}{APPEND_MANY}({_MANY_SIGNATURE})")
    op.execute(f"DROP FUNCTION {prefix}{APPEND_ONE}({_ONE_SIGNATURE})")
