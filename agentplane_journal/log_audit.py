"""Auditing and rebuilding a tenant's stored Merkle tree from its seals, page by page.

The stored tree (``log_tree``) is derived data: leaf ``i`` is the hash of the chain head of
the sealed run with the ``i``-th smallest ``run_seal.log_index``, and every other node hashes
its two children. :func:`audit_pages` re-derives it from the seals, one transaction per
:data:`AUDIT_PAGE` leaves, and names the first position where the stored tree disagrees;
with ``fix`` it rewrites what disagrees (resumably), under the tenant's log counter so no
seal interleaves with a page. :meth:`TenantLog.audit <agentplane_journal.log.TenantLog.audit>`
and ``reindex`` call it; the tree arithmetic is :mod:`agentplane_journal.tree`'s, and this
module is only its SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, func, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from . import tree
from .models import JournalCounter, LogTree, RunSeal

if TYPE_CHECKING:
    from .log import TenantLog

__all__ = ["AUDIT_PAGE", "LogAudit", "Progress", "Unit", "audit_pages"]

#: Leaves per transaction when auditing or rebuilding the stored tree (a power of two).
AUDIT_PAGE = 4096

Progress = Callable[[int, int], None]
Unit = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class LogAudit:
    """What re-deriving the stored tree from the seals found.

    ``size`` leaves were checked; ``first_bad`` is the first leaf position whose part of the
    stored tree disagrees with the seals (``None``: the tree is intact), ``detail`` says how.
    ``repaired`` counts the stored rows a rebuild rewrote or removed (0 for an audit).
    """

    size: int
    first_bad: int | None = None
    detail: str | None = None
    repaired: int = 0

    @property
    def ok(self) -> bool:
        return self.first_bad is None


async def _census(session: AsyncSession, tenant: str) -> tuple[int, int, list[tuple[int, int]]]:
    """One snapshot: the tree's size, the number of seals, and each level's last index."""
    size = (
        select(func.coalesce(func.max(LogTree.idx) + 1, 0))
        .where(LogTree.tenant == tenant, LogTree.level == 0)
        .scalar_subquery()
    )
    seals = select(func.count()).where(RunSeal.tenant == tenant).scalar_subquery()
    rows = (
        await session.execute(
            select(size, seals, LogTree.level, func.max(LogTree.idx))
            .select_from(LogTree)
            .where(LogTree.tenant == tenant)
            .group_by(LogTree.level)
        )
    ).all()
    if not rows:
        count = (await session.execute(select(seals))).scalar_one()
        return 0, int(count), []
    return int(rows[0][0]), int(rows[0][1]), [(int(r[2]), int(r[3])) for r in rows]


async def _audit_page(
    session: AsyncSession, log: TenantLog, state: dict[str, Any], finding: _Finding, fix: bool
) -> tuple[int, bool]:
    """Check (or rewrite) the next page of leaves; ``(rows rewritten, last page?)``."""
    tenant, a = log.tenant, state["at"]
    if fix:
        # The counter's lock, as a seal takes it: no seal runs while this page does.
        await session.execute(
            select(JournalCounter.value)
            .where(JournalCounter.name == log.counter_name)
            .with_for_update()
        )
    want = AUDIT_PAGE if state["limit"] is None else min(AUDIT_PAGE, state["limit"] - a)
    query = (
        select(RunSeal.run_id, RunSeal.chain_head, RunSeal.log_index)
        .where(RunSeal.tenant == tenant)
        .order_by(RunSeal.log_index)
        .limit(want)
    )
    if state["after"] is not None:
        query = query.where(RunSeal.log_index > state["after"])
    seals = (await session.execute(query)).all()
    b = a + len(seals)
    stored: dict[tree.Node, tuple[bytes, str | None]] = {}
    if seals:
        # One SELECT per level by the primary key's prefix (see TenantLog.paths_at), in one
        # statement.
        parts = [
            select(LogTree.level, LogTree.idx, LogTree.hash, LogTree.run_id).where(
                LogTree.tenant == tenant,
                LogTree.level == level,
                LogTree.idx.between(lo, hi),
            )
            for level, lo, hi in _completed_ranges(a, b)
        ]
        rows = await session.execute(parts[0] if len(parts) == 1 else union_all(*parts))
        stored = {(int(lv), int(ix)): (bytes(h), rid) for lv, ix, h, rid in rows}
    builder: tree.TreeBuilder = state["builder"]
    wrong: list[tree.Node] = []
    expected: list[dict[str, Any]] = []
    for offset, (run_id, head, _) in enumerate(seals):
        position = a + offset
        if head is None or len(head) != 32:
            finding.add(position, f"the seal of {run_id} holds a chain head of bad length")
        leaf = hashlib.sha256(b"\x00" + bytes(head or b"")).digest()
        for node, value in builder.add(leaf):
            run = run_id if node[0] == 0 else None
            have = stored.get(node)
            if have == (value, run):
                continue
            level, idx = node
            if have is None:
                what = "is missing"
            elif have[0] != value:
                what = "does not hash its children" if level else "is not the seal's hash"
            else:
                what = f"names run {have[1]}, not {run_id}"
            finding.add(idx << level, f"stored node (level {level}, index {idx}) {what}")
            wrong.append(node)
            expected.append(
                {"tenant": tenant, "level": level, "idx": idx, "hash": value, "run_id": run}
            )
    limit = state["limit"]
    state["at"], last = b, len(seals) < want or (limit is not None and b >= limit)
    if seals:
        state["after"] = seals[-1][2]
    repaired = 0
    if fix and wrong:
        runs = [e["run_id"] for e in expected if e["run_id"] is not None]
        if runs:  # a run's leaf row elsewhere (a permuted tree) would block the unique key
            await session.execute(
                delete(LogTree).where(LogTree.tenant == tenant, LogTree.run_id.in_(runs))
            )
        await session.execute(
            delete(LogTree).where(
                LogTree.tenant == tenant,
                or_(*(and_(LogTree.level == lv, LogTree.idx == ix) for lv, ix in wrong)),
            )
        )
        await session.execute(LogTree.__table__.insert(), expected)
        repaired += len(wrong)
    if fix and last:
        beyond = (LogTree.idx + 1).op("<<")(LogTree.level) > b
        result = await session.execute(delete(LogTree).where(LogTree.tenant == tenant, beyond))
        if result.rowcount:
            finding.add(b, f"{result.rowcount} stored node(s) beyond the {b} sealed runs")
            repaired += result.rowcount
    return repaired, last


class _Finding:
    """The first (lowest) bad position seen so far."""

    def __init__(self) -> None:
        self.position: int | None = None
        self.detail: str | None = None

    def add(self, position: int, detail: str) -> None:
        if self.position is None or position < self.position:
            self.position, self.detail = position, detail


def _completed_ranges(a: int, b: int) -> list[tuple[int, int, int]]:
    """Per level, the index range of the stored nodes completed by leaves ``a..b-1``."""
    out = []
    for level in range(tree.MAX_LEVEL + 1):
        lo, hi = ((a + 1) + (1 << level) - 1 >> level) - 1, (b >> level) - 1
        if (1 << level) > b:
            break
        if lo <= hi:
            out.append((level, lo, hi))
    return out


async def audit_pages(log: TenantLog, unit: Unit, fix: bool, progress: Progress | None) -> LogAudit:
    """Re-derive the tree from the seals, page by page; report (and with ``fix``, rewrite)."""
    census = await unit(lambda session: _census(session, log.tenant))
    size, seals, maxima = census
    total = max(size, seals)
    finding = _Finding()
    # An audit checks the log as the census saw it (seals landing meanwhile are beyond it);
    # a rebuild goes on to whatever is sealed when its last page runs.
    state = {"builder": tree.TreeBuilder(), "after": None, "at": 0, "limit": None}
    if not fix:
        state["limit"] = seals
    repaired = 0
    while True:
        page, done = await unit(
            lambda session: _audit_page(session, log, state, finding, fix), primary=fix
        )
        repaired += page
        if progress is not None:
            progress(min(state["at"], total), total)
        if done:
            break
    checked = state["at"]
    if not fix:
        if size != checked:
            finding.add(
                min(size, checked),
                f"the stored tree holds {size} leaves, but {checked} runs are sealed",
            )
        for level, top in maxima:
            if (top + 1) << level > size:
                finding.add(
                    max(top << level, size),
                    f"the stored tree holds node (level {level}, index {top}) beyond its "
                    f"{size} leaves",
                )
    return LogAudit(checked, finding.position, finding.detail, repaired)
