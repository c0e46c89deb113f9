"""The tenant's Merkle log in the database: sealing a leaf, the stored tree, checkpoints, proofs.

The journal store (:mod:`agentplane_journal.journal.store`) owns runs: their chains, leases and
the run mutex. This module owns what a seal adds to the log and what the log answers, so
each can be read in one sitting. Every method here runs inside a unit of work the store
opened (one transaction, one ``AsyncSession``); the store keeps thin methods that take the
run mutex, fence, and delegate. The tree arithmetic is pure and lives in
:mod:`agentplane_journal.tlog.tree`; this module is only its SQL.

How the log's guarantees are made:

* **The tree is stored, not recomputed.** A seal writes, in its own transaction, the leaf
  hash and every perfect subtree the leaf completes (``log_tree``; amortised two rows a
  seal, at most log2 n + 1). A checkpoint reads the log's size and the at most log2 n
  subtrees its root is made of; a proof reads at most ~3 log2 n stored nodes. Nothing reads
  every leaf.
* **Dense, commit-ordered positions.** A seal takes the tenant's ``journal_counter`` row,
  whose lock it holds until COMMIT, and only then (in a later statement, hence a fresh
  snapshot at READ COMMITTED) reads the tree's size and frontier: the next sealer of that
  tenant waits, so positions are handed out in commit order and every snapshot of the log
  is a prefix of every later one. (A sequence hands out values in allocation order; a seal
  that commits late then lands *before* leaves a checkpoint has already committed to.)
* **Proofs from one snapshot.** ``checkpoint``, ``inclusion_proof`` and
  ``consistency_proof`` each run ONE statement that reads the size (the number of leaf
  rows) and the nodes that size needs, so the two cannot come from different moments.
* **The stored tree is derived data.** Leaf ``i`` is the sealed run with the ``i``-th
  smallest ``run_seal.log_index``; an inclusion proof checks its leaf row against the
  run's ``chain_head``, and :meth:`TenantLog.audit` re-derives the whole tree from the
  seals and names the first position where the stored one disagrees (its pages, and the
  rebuild's, are :mod:`agentplane_journal.journal.log_audit`). The snapshot statements, and
  the reading of their rows, are :mod:`agentplane_journal.journal.log_snapshot`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    BigInteger,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.db.dialect import Dialect
from agentplane_journal.db.driver_sql import driver_sql
from agentplane_journal.db.models import JournalCounter, LogTree, RunSeal
from agentplane_journal.db.statements import digest, stored_run
from agentplane_journal.errors import BackendError, CorruptLogError
from agentplane_journal.journal.log_audit import (
    MAX_LOG_INDEX,
    LogAudit,
    Progress,
    Unit,
    audit_pages,
)
from agentplane_journal.journal.log_snapshot import (
    Snapshot,
    damaged,
    node_hash,
    snapshot_statements,
)
from agentplane_journal.tlog import tree as tree
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion
from agentplane_journal.tlog.merkle import EMPTY_ROOT, raw_leaf

__all__ = ["Execute", "SealedLeaf", "TenantLog"]

_LOG_POSITION = "log_position/"


_SEAL_INSERT = RunSeal.__table__.insert().values(
    dict.fromkeys(("tenant", "run_id", "chain_head", "log_index", "sealed_at", "outcome"))
)
"""``run_seal``'s INSERT of the members of each row :meth:`TenantLog._plan` makes."""
_NODE_INSERT = LogTree.__table__.insert().values(
    dict.fromkeys(("tenant", "level", "idx", "hash", "run_id"))
)
"""``log_tree``'s INSERT of the members of each node row :meth:`TenantLog._plan` makes."""

SealedLeaf = tuple[str, bytes, int, str]
"""``(run_id, chain_head, sealed_at, outcome)``: one leaf to append."""

Execute = Callable[[Any, Any], Sequence[Sequence[Any]]]
"""A synchronous ``execute(statement, parameters) -> rows`` inside an open write transaction
(:meth:`TenantLog.append_with`); ``parameters`` is a dict, or a list of them for an insert."""


class TenantLog:
    """One tenant's Merkle log, spoken to through the session of the store's unit of work."""

    def __init__(self, dialect: Dialect, tenant: str, origin: str) -> None:
        self.dialect = dialect
        self.tenant = tenant
        self.origin = origin
        # The tenant's row in journal_counter: a seal and a rebuild's page hold its lock.
        self.counter_name = _LOG_POSITION + tenant
        self._counters: dict[int, Any] = {}  # _counter's statements, by step

    async def snapshot(self, session: AsyncSession, kind: str, **params: Any) -> Snapshot:
        """The stored tree as one statement of ``kind`` reads it (one snapshot: a proof or a
        frontier from it is consistent); package-internal, also `serve`'s incremental tree."""
        conn = await session.connection()
        result = await conn.execute(snapshot_statements()[kind], {"tenant": self.tenant, **params})
        return Snapshot(result.all())

    # -- sealing -----------------------------------------------------------------------

    async def append(self, session: AsyncSession, leaves: Sequence[SealedLeaf]) -> list[int]:
        """Enter ``leaves`` as the log's next leaves, in order; return their log indexes.

        The caller holds each run's mutex and has checked none is sealed yet. This takes
        the tenant's log counter, held until COMMIT, then reads the tree's frontier in a
        later statement (so it sees the previous sealer's commit), and writes the seals and
        every node they complete.
        """
        if not leaves:
            return []
        last = self._check_last(
            (await session.execute(self._counter(len(leaves)))).scalar_one(), len(leaves)
        )
        snap = await self.snapshot(session, "frontier")
        indexes, seals, nodes = self._plan(last, snap, leaves)
        conn = await session.connection()
        # By the driver's own executemany (db/driver_sql.py): a restore's chunk enters
        # hundreds of leaves, and SQLAlchemy would process each row's parameters first.
        for name, statement, rows in (
            ("run_seal", _SEAL_INSERT, seals),
            ("log_tree", _NODE_INSERT, nodes),
        ):
            if rows:
                text, names = driver_sql(conn, name, statement)
                await conn.exec_driver_sql(text, list(map(itemgetter(*names), rows)))
        return indexes

    def append_with(self, execute: Execute, leaves: Sequence[SealedLeaf]) -> list[int]:
        """:meth:`append` through ``execute``, a synchronous runner of the same statements
        on a connection whose transaction holds the run mutexes (SQLite's writer thread:
        the conclusion in the group commit's one hop). The same statements, in the same
        order, and the same rows: the log is byte for byte the one :meth:`append` makes."""
        if not leaves:
            return []
        last = self._check_last(execute(self._counter(len(leaves)), {})[0][0], len(leaves))
        snap = Snapshot(execute(snapshot_statements()["frontier"], {"tenant": self.tenant}))
        indexes, seals, nodes = self._plan(last, snap, leaves)
        execute(RunSeal.__table__.insert(), seals)
        execute(LogTree.__table__.insert(), nodes)
        return indexes

    @staticmethod
    def _check_last(last: object, count: int) -> int:
        if type(last) is not int or not count - 1 <= last <= MAX_LOG_INDEX:
            # A hostile log_index or counter (2**63 - 1, on which the next value overflows;
            # TEXT on SQLite): the position cannot be handed out, and no later one either
            # until the seals are renumbered. Raising rolls the counter's update back.
            raise CorruptLogError(
                0,
                f"the log counter or a seal's log_index is out of range (the next position "
                f"would be {last!r}); reindex-log renumbers the seals in their order and "
                "resets it",
            )
        return last

    def _plan(
        self, last: int, snap: Snapshot, leaves: Sequence[SealedLeaf]
    ) -> tuple[list[int], list[dict[str, Any]], list[dict[str, Any]]]:
        """The log indexes, the ``run_seal`` rows and the ``log_tree`` rows of ``leaves``
        entered after the frontier ``snap`` (no statement)."""
        indexes = list(range(last - len(leaves) + 1, last + 1))
        try:
            builder = tree.TreeBuilder(snap.size, snap.nodes)
        except tree.MissingNodeError as error:
            raise damaged(error) from None
        seals, nodes = [], []
        for (run_id, head, sealed_at, outcome), log_index in zip(leaves, indexes, strict=True):
            seals.append(
                {
                    "tenant": self.tenant,
                    "run_id": run_id,
                    "chain_head": head,
                    "log_index": log_index,
                    "sealed_at": sealed_at,
                    "outcome": outcome,
                }
            )
            leaf = raw_leaf(head)
            for (level, idx), value in builder.add(leaf):
                nodes.append(
                    {
                        "tenant": self.tenant,
                        "level": level,
                        "idx": idx,
                        "hash": value,
                        "run_id": run_id if level == 0 else None,
                    }
                )
        return indexes, seals, nodes

    def _counter(self, step: int) -> Any:
        """Advance the tenant's log counter by ``step`` under its row lock; the last value.

        Never below the largest ``log_index`` sealed (a row some other writer put there,
        agentplane 0.4.0 say): log order stays commit order for every seal made here.
        """
        built = self._counters.get(step)
        if built is not None:  # the same statement object: a sync runner compiles it once
            return built
        d = self.dialect
        last = (
            select(RunSeal.log_index)
            .where(RunSeal.tenant == self.tenant)
            .order_by(RunSeal.log_index.desc())
            .limit(1)
            .scalar_subquery()
        )  # one probe of (tenant, log_index), backwards (see _snapshot_statement)
        # Both capped before adding, so a hostile 2**63 - 1 cannot overflow the statement
        # itself: the result is then beyond MAX_LOG_INDEX, and append refuses it.
        cap = literal(MAX_LOG_INDEX + 1, BigInteger)
        top = select(d.least(func.coalesce(last, -1), cap) + step).scalar_subquery()
        stmt = d.insert(JournalCounter).values(name=self.counter_name, value=top)
        built = stmt.on_conflict_do_update(
            index_elements=[JournalCounter.name],
            set_={
                "value": d.greatest(d.least(JournalCounter.value, cap) + step, stmt.excluded.value)
            },
        ).returning(JournalCounter.value)
        if len(self._counters) < 16:
            self._counters[step] = built
        return built

    # -- reading -----------------------------------------------------------------------

    async def sealed_runs(self, session: AsyncSession) -> list[tuple[RunId, Digest]]:
        """The log in order, ``(run, sealed chain head)`` per leaf, from one snapshot."""
        rows = await session.execute(
            select(RunSeal.run_id, RunSeal.chain_head)
            .where(RunSeal.tenant == self.tenant)
            .order_by(RunSeal.log_index)
        )
        return [(stored_run(r, "run_seal.run_id"), digest(h, 0)) for r, h in rows]

    async def checkpoint(self, session: AsyncSession) -> Checkpoint:
        """``Checkpoint(origin, size, root)`` from the size and its frontier nodes."""
        snap = await self.snapshot(session, "frontier")
        if snap.size == 0:
            return Checkpoint(self.origin, 0, EMPTY_ROOT)
        try:
            root = tree.root_from_nodes(snap.size, snap.nodes)
        except tree.MissingNodeError as error:
            raise damaged(error) from None
        return Checkpoint(self.origin, snap.size, Digest._trusted(root))

    async def consistency_proof(self, session: AsyncSession, old_size: int) -> list[Digest]:
        """RFC 6962 proof that the log of ``old_size`` is a prefix of the current one."""
        snap = await self.snapshot(session, "last", last=max(old_size - 1, 0))
        if old_size > snap.size:
            raise BackendError(
                f"a checkpoint of size {old_size} is larger than this log ({snap.size}): "
                "either it belongs to another log (check the origin), or runs were removed"
            )
        try:
            return tree.proof_from_nodes(tree.consistency_ranges(old_size, snap.size), snap.nodes)
        except tree.MissingNodeError as error:
            raise damaged(error) from None

    async def inclusion_proof(self, session: AsyncSession, run: RunId) -> Inclusion | None:
        """``Inclusion`` for a sealed run from one snapshot; ``None`` if never sealed."""
        snap = await self.snapshot(session, "run", run_id=str(run))
        if snap.leaf is None or snap.leaf[1] is None:
            return None  # not sealed (a leaf row naming an unsealed run is audit's to report)
        position, head = snap.leaf
        seal = digest(head, 0)
        if position is None:
            raise CorruptLogError(
                snap.size, f"{run} is sealed, but the stored tree has no leaf for it"
            )
        stored = snap.nodes.get((0, position))
        if stored != raw_leaf(bytes(seal)):
            raise CorruptLogError(
                position, f"the stored leaf of {run} is not the hash of its sealed chain head"
            )
        try:
            proof = tree.proof_from_nodes(tree.inclusion_ranges(position, snap.size), snap.nodes)
        except tree.MissingNodeError as error:
            raise damaged(error) from None
        return Inclusion(index=position, size=snap.size, seal=seal, proof=tuple(proof))

    async def seals_of(
        self, session: AsyncSession, run_ids: Sequence[str]
    ) -> dict[str, tuple[Any, int | None]]:
        """``run_id -> (sealed chain head column, leaf position or None)`` for sealed runs."""
        # The leaf by a correlated lookup on log_tree's (tenant, run_id) key, one probe per
        # seal, rather than a join the planner may get wrong: just after a bulk load (a
        # restore) PostgreSQL's statistics still say the tenant has a few dozen seals, and a
        # join planned on that scanned the tenant's every leaf once per seal (60-250 ms a
        # page at 20k runs, growing with the log).
        leaf = (
            select(LogTree.idx)
            .where(
                LogTree.tenant == RunSeal.tenant,
                LogTree.run_id == RunSeal.run_id,
                LogTree.level == 0,
            )
            # Unique by its key; LIMIT keeps a hostile duplicate the audit's, never an
            # error. No ORDER BY: ordered by idx, the primary key (tenant, level, idx) would
            # tempt the planner into walking every leaf in order until this run's.
            .limit(1)
            .scalar_subquery()
        )
        rows = await session.execute(
            select(RunSeal.run_id, RunSeal.chain_head, leaf).where(
                RunSeal.tenant == self.tenant, RunSeal.run_id.in_(list(run_ids))
            )
        )
        # A leaf index that is no integer (TEXT on SQLite) is no position: audit reports it.
        return {r: (h, i if type(i) is int else None) for r, h, i in rows}

    async def paths_at(
        self, session: AsyncSession, size: int, positions: Sequence[int]
    ) -> dict[int, list[Digest]]:
        """Inclusion paths of ``positions`` in the log of ``size`` leaves (a past size too).

        Stored nodes never change below the size they were complete at, so every path of
        one export is taken at the size of its header's checkpoint, page by page. The
        nodes of a page are shared by its paths; one SELECT per level.
        """
        wanted: dict[int, list[int]] = {}
        ranges = {p: tree.inclusion_ranges(p, size) for p in positions if 0 <= p < size}
        for plan in ranges.values():
            for lo, hi in plan:
                for level, idx in tree.range_nodes(lo, hi):
                    wanted.setdefault(level, []).append(idx)
        # One SELECT per level (and per 500 indexes), by the primary key's prefix; an OR
        # across levels would let SQLite scan the tenant's whole tree instead.
        parts = []
        for level, idxs in sorted(wanted.items()):
            ordered = sorted(set(idxs))
            for start in range(0, len(ordered), 500):
                parts.append(
                    select(LogTree.level, LogTree.idx, LogTree.hash).where(
                        LogTree.tenant == self.tenant,
                        LogTree.level == level,
                        LogTree.idx.in_(ordered[start : start + 500]),
                    )
                )
        nodes: dict[tree.Node, bytes] = {}
        for start in range(0, len(parts), 16):
            group = parts[start : start + 16]
            stmt = group[0] if len(group) == 1 else union_all(*group)
            for lv, ix, h in await session.execute(stmt):
                nodes[(int(lv), int(ix))] = node_hash(h, int(lv), int(ix))
        try:
            return {p: tree.proof_from_nodes(plan, nodes) for p, plan in ranges.items()}
        except tree.MissingNodeError as error:
            raise damaged(error) from None

    # -- auditing and rebuilding the stored tree ---------------------------------------

    async def audit(self, unit: Unit, progress: Progress | None = None) -> LogAudit:
        """Re-derive the stored tree from the seals and name the first position it disagrees.

        ``unit(fn)`` runs ``fn(session)`` in a read-only transaction of the store; one per
        :data:`AUDIT_PAGE` leaves. Seals landing meanwhile extend the log beyond what is
        checked and change nothing below it.
        """
        return await audit_pages(self, unit, False, progress)

    async def reindex(self, unit: Unit, progress: Progress | None = None) -> LogAudit:
        """Rebuild the stored tree from the seals where it disagrees with them (resumable).

        Each page is a transaction holding the tenant's log counter, so no seal interleaves
        with a page; a page already right is left as it is, so running it again after an
        interruption redoes nothing that was done. Seals between pages are repaired by the
        pages that follow; the last page, under the counter, removes anything beyond the log.
        """
        return await audit_pages(self, unit, True, progress)
