"""A run's conclusion, and a fresh run's admission, on PostgreSQL in one autocommitted
statement each (:data:`CONCLUDE`, :data:`ADMIT`). Pure: no I/O.

Part of the repository, run by :mod:`agentplane_journal.backends.postgresql.writer`.
:meth:`SqlJournalStore.conclude <agentplane_journal.journal.store.SqlJournalStore.conclude>`
as a general unit of work is a dozen round trips (the run mutex, the run's state, the
records, the outcome, the log counter, the log's frontier, the seal, the tree's nodes, the
release, BEGIN and COMMIT). :data:`CONCLUDE` is all of it in one, on the append path's terms
(:data:`~agentplane_journal.backends.postgresql.sql.ONE`): the run's mutex row proves the
snapshot current for the run (its ``xmin``), and the tenant's log counter row does the same
for the log, since every seal updates that row in its transaction (and a rebuild's page
too): if the version the statement locked is the one its snapshot saw, no seal has
committed since, and the snapshot's log is the latest. Neither lock is waited for (``SKIP
LOCKED``): a busy counter sends the conclusion to the general unit, which waits for it.

**The known log** (:class:`KnownLog`, per tenant, in the writer): its counter value, its size
and its frontier, as this process last read or wrote them. The run's leaf and every node it
completes are hashed here, before the statement (:class:`~agentplane_journal.tlog.tree.TreeBuilder`,
as the general unit's seal does), and the statement writes them only if the stored log is
still that one: the counter would hand out the position the general unit's expression gives,
the last leaf is where it was, and every frontier node is the one hashed onto. So the rows
are, byte for byte, what the general unit writes; anything else writes nothing, and the
general unit concludes the run (and reports a damaged log, a hostile counter) itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentplane_journal.backends.postgresql.sql import ONE
from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.tlog import tree
from agentplane_journal.tlog.merkle import raw_leaf

__all__ = ["ADMIT", "CONCLUDE", "LOG_STATE", "KnownLog", "conclude_args", "known_log"]

_RUN_PART = ONE[: ONE.index("), bump AS (")]  # the run's lock, state and checks: ``ok``
assert "), ok AS (" in _RUN_PART
_RUN_PART = _RUN_PART.replace("), ok AS (", "), run_ok AS (")

#: ``$16`` the counter's name, ``$17`` the position the counter hands out, ``$18`` the log's
#: size, ``$19..$21`` the frontier (levels, indexes, hex hashes), ``$22`` the
#: ``RunSealed`` outcome (the outcome index), ``$23`` the sealed head, ``$24`` the leaf's
#: outcome, ``$25..$27`` the nodes to write, ``$28`` the largest position
#: (``MAX_LOG_INDEX``: the general unit's cap is one above it).
CONCLUDE = (
    _RUN_PART.replace("{{s}}", "{s}")
    + """), ctr AS (
    SELECT c.value, c.xmin = (
        SELECT s.xmin FROM {s}journal_counter s WHERE s.name = $16
    ) AS fresh
    FROM {s}journal_counter c, run_ok WHERE c.name = $16
    FOR UPDATE OF c SKIP LOCKED
), ok AS (
    SELECT 1 FROM ctr
    WHERE ctr.fresh AND $17::bigint <= $28::bigint
      AND greatest(
            least(ctr.value, $28::bigint + 1) + 1,
            least(coalesce((SELECT r.log_index FROM {s}run_seal r WHERE r.tenant = $1
                            ORDER BY r.log_index DESC LIMIT 1), -1), $28::bigint + 1) + 1
          ) = $17::bigint
      AND coalesce((SELECT t.idx FROM {s}log_tree t
                    WHERE t.tenant = $1 AND t.level = 0 AND t.idx <= $28::bigint
                    ORDER BY t.idx DESC LIMIT 1), -1) + 1 = $18::bigint
      AND (SELECT count(*) FROM unnest($19::text[], $20::text[], $21::text[])
                AS f(level, idx, hash)
           JOIN {s}log_tree t ON t.tenant = $1 AND t.level = f.level::int
            AND t.idx = f.idx::bigint AND t.hash = decode(f.hash, 'hex'))
          = cardinality($19::text[])
), bump AS (
    UPDATE {s}run_activity SET updated_at = greatest(updated_at, $3)
    WHERE tenant = $1 AND run_id = $2 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), ins AS (
    INSERT INTO {s}journal """
    + ONE[ONE.index("(tenant, run_id, seq, epoch") : ONE.index("RETURNING 1\n)\nSELECT")]
    .replace("{{s}}", "{s}")
    .rstrip()
    + """
    RETURNING 1
), outcome AS (
    INSERT INTO {s}run_outcome (tenant, run_id, outcome, ordinal)
    SELECT $1, $2, $22, nextval('{s}run_conclusion_ordinal') FROM ok
    ON CONFLICT (tenant, run_id)
    DO UPDATE SET outcome = excluded.outcome, ordinal = excluded.ordinal
), counter AS (
    UPDATE {s}journal_counter SET value = $17::bigint
    WHERE name = $16 AND EXISTS (SELECT 1 FROM ok)
), seal AS (
    INSERT INTO {s}run_seal (tenant, run_id, chain_head, log_index, sealed_at, outcome)
    SELECT $1, $2, $23::bytea, $17::bigint, $3, $24 FROM ok
), nodes AS (
    INSERT INTO {s}log_tree (tenant, level, idx, hash, run_id)
    SELECT $1, n.level::int, n.idx::bigint, decode(n.hash, 'hex'),
           CASE WHEN n.level = '0' THEN $2 END
    FROM ok, unnest($25::text[], $26::text[], $27::text[]) AS n(level, idx, hash)
), release AS (
    UPDATE {s}run_lease SET owner = '"""
    + RELEASED_OWNER
    + """', expires_at = 0
    WHERE tenant = $1 AND run_id = $2 AND epoch = $4 AND EXISTS (SELECT 1 FROM ok)
)
SELECT lock.fresh, st.lease_epoch, st.lease_owner, st.sealed_outcome,
       (SELECT count(*) FROM ins) AS written
FROM (SELECT 1) AS always LEFT JOIN lock ON true LEFT JOIN st ON true
"""
)
# ``always``: one row even when the run's mutex row is missing or locked (``fresh`` NULL),
# so a turn's conclusions sent together (``fetchmany``) answer one row each, in order.

#: The tenant's log as a seal reads it: ``(0, size, counter value, NULL)``, then
#: ``(1, level, idx, hash)`` per frontier node. ``$1`` tenant, ``$2`` counter, ``$3`` the
#: largest position. Read outside any lock: :data:`CONCLUDE` checks it is still current.
LOG_STATE = """
WITH n AS (
    SELECT coalesce((SELECT t.idx FROM {s}log_tree t
                     WHERE t.tenant = $1 AND t.level = 0 AND t.idx <= $3::bigint
                     ORDER BY t.idx DESC LIMIT 1), -1) + 1 AS n
)
SELECT 0 AS tag, n.n AS a,
       (SELECT c.value FROM {s}journal_counter c WHERE c.name = $2) AS b, NULL::bytea AS h
FROM n
UNION ALL
SELECT 1, t.level, t.idx, t.hash
FROM n, generate_series(0, 62) AS k
JOIN {s}log_tree t ON t.tenant = $1 AND t.level = k
WHERE (n.n >> k) & 1 = 1 AND t.idx = (n.n >> k) - 1
"""


@dataclass
class KnownLog:
    """A tenant's log as this process last saw it: the counter's value, the size, the
    frontier (the nodes the next leaf is hashed onto)."""

    counter: int
    size: int
    frontier: dict[tree.Node, bytes]


def known_log(rows: Sequence[Any]) -> KnownLog | None:
    """:data:`LOG_STATE`'s answer, or ``None`` when a seal here could not use it (no counter
    row yet, a value that is no integer, a frontier node missing or not 32 bytes): the
    general unit then seals, and says what is wrong, if anything is."""
    size, counter, frontier = None, None, {}
    for tag, a, b, h in rows:
        if tag == 0:
            size, counter = a, b
        elif isinstance(h, bytes) and len(h) == 32:
            frontier[(int(a), int(b))] = h
    if type(size) is not int or type(counter) is not int:
        return None
    try:
        tree.TreeBuilder(size, frontier)
    except tree.MissingNodeError:
        return None
    return KnownLog(counter, size, frontier)


def conclude_args(
    one: tuple[Any, ...],
    counter_name: str,
    log: KnownLog,
    conclusion: str,
    head: bytes,
    outcome: str,
    max_index: int,
) -> tuple[tuple[Any, ...], KnownLog]:
    """:data:`CONCLUDE`'s parameters (``one``: :func:`~.sql.one_args`'s), and the log as it
    is once the statement has written: the leaf and the nodes hashed onto ``log``."""
    builder = tree.TreeBuilder(log.size, log.frontier)
    nodes = builder.add(raw_leaf(head))
    after = KnownLog(log.counter + 1, builder.size, dict(builder.frontier_hashes()))
    front = sorted(log.frontier.items())
    args = (
        *one,
        counter_name,
        log.counter + 1,
        log.size,
        [str(level) for (level, _), _ in front],
        [str(idx) for (_, idx), _ in front],
        [h.hex() for _, h in front],
        conclusion,
        head,
        outcome,
        [str(level) for (level, _), _ in nodes],
        [str(idx) for (_, idx), _ in nodes],
        [h.hex() for _, h in nodes],
        max_index,
    )
    return args, after


#: A fresh run's admission in one statement (the general unit's ``SqlJournalStore.admit``
#: is five statements and BEGIN/COMMIT): its run mutex row created, its admission key
#: (``$6``, or none) claimed, its lease taken at epoch 1 for ``$4`` until ``$5``, and its
#: first records (``$7..$15``, chained at epoch 1 onto the empty chain) inserted, each
#: only if the one before it was new. Anything not new (a run that exists, a key another
#: run holds, a lease row) makes ``guard`` divide by zero, so the statement fails and
#: writes nothing, and the general unit admits the run or says why not. None of its locks
#: is on a row that exists (each is an insert), so nothing is waited for but another
#: transaction's claim of the same key, as the general unit waits.
ADMIT = (
    """
WITH act AS (
    INSERT INTO {s}run_activity (tenant, run_id, updated_at) VALUES ($1, $2, $3)
    ON CONFLICT (tenant, run_id) DO NOTHING
    RETURNING 1
), fresh AS (
    SELECT 1 FROM act
    WHERE NOT EXISTS (SELECT 1 FROM {s}run_seal r WHERE r.tenant = $1 AND r.run_id = $2)
      AND NOT EXISTS (SELECT 1 FROM {s}journal j WHERE j.tenant = $1 AND j.run_id = $2)
), claim AS (
    INSERT INTO {s}run_admission (tenant, key, run_id, admitted_at)
    SELECT $1, $6::text, $2, $3 FROM fresh WHERE $6::text IS NOT NULL
    ON CONFLICT (tenant, key) DO NOTHING
    RETURNING 1
), lease AS (
    INSERT INTO {s}run_lease (tenant, run_id, owner, epoch, expires_at)
    SELECT $1, $2, $4, 1, $5::bigint FROM fresh
    WHERE $6::text IS NULL OR EXISTS (SELECT 1 FROM claim)
    ON CONFLICT (tenant, run_id) DO NOTHING
    RETURNING 1
), ins AS (
    INSERT INTO {s}journal """
    + ONE[ONE.index("(tenant, run_id, seq, epoch") : ONE.index("RETURNING 1\n)\nSELECT")]
    .replace("FROM ok, unnest(", "FROM lease, unnest(")
    .replace("SELECT $1, $2, u.seq::bigint, $4,", "SELECT $1, $2, u.seq::bigint, 1,")
    .rstrip()
    + """
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins) AS written, 1 / (SELECT count(*)::int FROM lease) AS guard
"""
)
assert "FROM lease, unnest(" in ADMIT and "u.seq::bigint, 1," in ADMIT
