"""What ``serve`` publishes: the stored tree, checked against the seals before it is signed.

The stored tree (``log_tree``) is derived data that anyone with write access to the database
can edit. A server that signed whatever root it read would sign their edit: one deleted
leaf row is a signed rollback, one edited node a signed root no sealed heads produce.
:class:`ServedLog` keeps, per tenant, the size and root it has itself re-derived from the
seals, and publishes nothing else:

* **A checkpoint is signed only for a verified root.** Each request reads the stored size
  and frontier (one statement) and, in one more, the last leaf and the last seal, which
  must be of the same run (a deleted last leaf, or a leaf no seal made, differs). The
  leaves sealed since the last request are then re-derived from their seals, page by page,
  exactly as ``verify --all`` does (:func:`~agentplane_journal.journal.log_audit.audit_pages`'
  pages: each seal checked against the head its run's records end at, each stored node it
  completes compared with the one it should be), continuing from the frontier kept in
  memory, and the stored frontier must fold to the same root. So each request checks only
  what is new; the first one after a start checks the whole log once.
* **A tile is served only from rows that hash to that root.** A hash tile's nodes, or an
  entry bundle's leaves (each checked against its seal's head), are hashed up with the
  ~2 log2 n stored nodes beside them (:func:`~agentplane_journal.tlog.tree.sibling_nodes`)
  and must give the verified root: an edited leaf or node is never served, however long
  ago the root was checked.
* **Damage is sticky.** Whatever disagreement is found is kept (:attr:`ServedLog.damage`):
  the checkpoint endpoint answers 500 naming it and the audit page says FAILING, until a
  re-derivation of the whole log from its seals (tried again after
  :data:`RECHECK_AFTER_DAMAGE` seconds) passes, after ``reindex-log`` say.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.ids import Digest
from agentplane_journal.db.models import LogTree, RunSeal
from agentplane_journal.errors import CorruptLogError
from agentplane_journal.journal.cosignatures import _nodes
from agentplane_journal.journal.log_audit import MAX_LOG_INDEX, _audit_page, _Finding, _PageState
from agentplane_journal.journal.tiles import read_entries, read_hashes
from agentplane_journal.tlog import tree
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.merkle import EMPTY_ROOT, raw_leaf
from agentplane_journal.tlog.tiles import Tile, encode_bundle

if TYPE_CHECKING:
    from agentplane_journal.journal.store import SqlJournalStore

__all__ = ["FAILING_RUNS_KEPT", "RECHECK_AFTER_DAMAGE", "ServedLog"]

#: Seconds a found damage is answered as it is before the whole log is re-derived again.
RECHECK_AFTER_DAMAGE = 30.0
#: Runs remembered as seen failing (the front page names them), per tenant.
FAILING_RUNS_KEPT = 100
_RETRIES = 5


class _Ends:
    """The stored frontier and, from one later statement, the last leaf and the last seal."""

    def __init__(self, size: int, nodes: dict[tree.Node, bytes], ends: Any) -> None:
        self.size = size
        self.nodes = nodes
        self.leaf_idx, self.leaf_run, self.seal_run = ends


async def _read_ends(session: AsyncSession, store: SqlJournalStore) -> _Ends:
    snap = await store.tenant_log.snapshot(session, "frontier")
    tenant = store.tenant
    leaf = (
        select(LogTree.idx, LogTree.run_id)
        .where(LogTree.tenant == tenant, LogTree.level == 0, LogTree.idx <= MAX_LOG_INDEX)
        .order_by(LogTree.idx.desc())
        .limit(1)
        .subquery()
    )
    seal = (
        select(RunSeal.run_id)
        .where(RunSeal.tenant == tenant)
        .order_by(RunSeal.log_index.desc())
        .limit(1)
        .scalar_subquery()
    )
    row = (
        await session.execute(
            select(
                select(leaf.c.idx).scalar_subquery(),
                select(leaf.c.run_id).scalar_subquery(),
                seal,
            )
        )
    ).one()
    return _Ends(snap.size, snap.nodes, tuple(row))


class ServedLog:
    """One tenant's log as ``serve`` publishes it: only what it re-derived from the seals."""

    def __init__(self, store: SqlJournalStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._lock = asyncio.Lock()
        self._state = self._fresh()
        self._root: Digest = EMPTY_ROOT
        self.damage: CorruptLogError | None = None
        self._damaged_at = 0.0
        self.failing_runs: dict[str, str] = {}
        self._verified: Checkpoint | None = None  # the last checkpoint verified
        self._generation = 0  # how many damages were found (one found mid-check stands)

    @staticmethod
    def _fresh() -> _PageState:
        return {"builder": tree.TreeBuilder(), "after": None, "at": 0, "limit": None, "kept": 0}

    def saw_run(self, run: str, ok: bool, detail: str) -> tuple[bool, str]:
        """Remember a run's verdict from a page (the failing ones, bounded, for the front
        page); returns it."""
        if ok:
            self.failing_runs.pop(run, None)
        elif run in self.failing_runs or len(self.failing_runs) < FAILING_RUNS_KEPT:
            self.failing_runs[run] = detail
        return ok, detail

    @property
    def verified_size(self) -> int:
        """How many leaves have been re-derived from their seals (and found right)."""
        return self._state["at"]

    def _fail(self, position: int, detail: str) -> CorruptLogError:
        """Remember a disagreement (sticky) and forget what was verified: the next check,
        after :data:`RECHECK_AFTER_DAMAGE`, re-derives the whole log."""
        self.damage = CorruptLogError(position, detail)
        self._damaged_at = self._clock()
        self._generation += 1
        self._verified = None
        self._state, self._root = self._fresh(), EMPTY_ROOT
        return self.damage

    async def checkpoint(self) -> Checkpoint:
        """The current checkpoint, its root re-derived from the seals; ``CorruptLogError``
        naming the damage if the stored tree disagrees with them (or did, lately)."""
        async with self._lock:
            if self.damage is not None:
                if self._clock() - self._damaged_at < RECHECK_AFTER_DAMAGE:
                    raise self.damage
            generation = self._generation
            try:
                cp = await self._advance()
            except CorruptLogError as exc:
                raise self._fail(exc.position, exc.detail) from None
            if generation != self._generation and self.damage is not None:
                raise self.damage  # a tile found damage meanwhile: it stands
            self.damage, self._verified = None, cp
            return cp

    async def _advance(self) -> Checkpoint:
        store = self._store
        for _ in range(_RETRIES):
            ends: _Ends = await store.unit(
                lambda session: _read_ends(session, store), read_only=True
            )
            last = ends.leaf_idx
            if (type(last) is int and last + 1 == ends.size) or (last is None and not ends.size):
                break
        else:
            raise CorruptLogError(0, "the stored tree's size kept changing while it was read")
        size, at = ends.size, self._state["at"]
        if size < at:
            raise CorruptLogError(
                size,
                f"the stored tree holds {size} leaves, but {at} sealed runs were verified in "
                "it before: leaves were removed (a rollback)",
            )
        if ends.leaf_run != ends.seal_run:
            raise CorruptLogError(
                max(size - 1, 0),
                f"the last sealed run is {ends.seal_run!r}, but the stored tree's last leaf is "
                f"of {ends.leaf_run!r}: the tree lacks a sealed run's leaf, or holds one no "
                "seal made",
            )
        log, state = store.tenant_log, self._state
        while state["at"] < size:
            finding = _Finding()
            state["limit"] = size

            async def page(session: AsyncSession, finding: _Finding = finding) -> tuple[int, bool]:
                return await _audit_page(session, log, state, finding, False)

            _, done = await store.unit(page, read_only=True)
            if finding.position is not None:
                raise CorruptLogError(finding.position, finding.detail or "")
            if done and self._state["at"] < size:
                raise CorruptLogError(
                    self._state["at"],
                    f"the stored tree holds {size} leaves, but only {self._state['at']} "
                    "runs are sealed",
                )
        builder = self._state["builder"]
        if size:
            mine = dict(builder.frontier_hashes())
            for node in tree.frontier(size):
                if ends.nodes.get(node) != mine.get(node):
                    level, idx = node
                    raise CorruptLogError(
                        idx << level,
                        f"stored node (level {level}, index {idx}) is not the hash of the "
                        "sealed heads below it: the stored root is not the sealed heads' root",
                    )
            self._root = Digest._trusted(builder.root() or b"")
        return Checkpoint(store.origin, size, self._root if size else EMPTY_ROOT)

    async def _check(self, cp: Checkpoint, level: int, lo: int, given: list[bytes]) -> None:
        """Hash ``given`` (the nodes ``(level, lo..)``) up with the stored nodes beside them;
        they must give the verified root of ``cp``."""
        wanted = tree.sibling_nodes(cp.size, level, lo, lo + len(given))
        store = self._store

        async def unit(session: AsyncSession) -> dict[tree.Node, bytes]:
            return await _nodes(session, store.tenant, wanted)

        stored = await store.unit(unit, read_only=True)
        try:
            root = tree.root_with(cp.size, level, lo, given, stored)
        except tree.MissingNodeError as error:
            lv, ix = error.node
            raise self._fail(ix << lv, str(error)) from None
        if root != bytes(cp.root):
            first = lo << level
            raise self._fail(
                first,
                f"the stored nodes (level {level}, index {lo}..{lo + len(given) - 1}), or those "
                f"beside them, do not hash to the root verified from the {cp.size} seals",
            )

    async def tile(self, t: Tile, entries: bool) -> bytes | None:
        """A hash tile or entry bundle, checked against the verified root; ``None`` if the
        verified log does not hold it yet; ``CorruptLogError`` if its rows are damaged."""
        cp = self._verified
        if (
            cp is None
            or self.damage is not None
            or t.first_node + t.width > cp.size >> t.node_level
        ):
            # Beyond what is verified (or nothing is): check the log as it is now first.
            # Within it, the verified root stays the root of that prefix however the log
            # grows, so a tile is checked against it without re-reading the log's ends.
            cp = await self.checkpoint()
        if t.first_node + t.width > cp.size >> t.node_level:
            return None
        lo, hi = t.first_node, t.first_node + t.width
        store = self._store
        try:
            if entries:

                async def read_bundle(session: AsyncSession) -> list[bytes]:
                    return await read_entries(session, store.tenant, lo, hi)

                heads = await store.unit(read_bundle, read_only=True)
                await self._check(cp, 0, lo, [raw_leaf(h) for h in heads])
                return encode_bundle(heads)

            async def read_tile(session: AsyncSession) -> bytes:
                return await read_hashes(session, store.tenant, t.node_level, lo, hi)

            data = await store.unit(read_tile, read_only=True)
        except CorruptLogError as exc:
            raise self._fail(exc.position, exc.detail) from None
        await self._check(cp, t.node_level, lo, [data[i : i + 32] for i in range(0, len(data), 32)])
        return data
