"""Auditing and rebuilding a tenant's stored Merkle tree from its seals, page by page.

The stored tree (``log_tree``) is derived data: leaf ``i`` is the hash of the chain head of
the sealed run with the ``i``-th smallest ``run_seal.log_index``, and every other node hashes
its two children. :func:`audit_pages` re-derives it from the seals, one transaction per
:data:`AUDIT_PAGE` leaves, and names the first position where the stored tree disagrees;
with ``fix`` it rewrites what disagrees (resumably), under the tenant's log counter so no
seal interleaves with a page. :meth:`TenantLog.audit
<agentplane_journal.journal.log.TenantLog.audit>`
and ``reindex`` call it; the tree arithmetic is :mod:`agentplane_journal.tlog.tree`'s, and this
module is only its SQL.

Every row is read as an attacker with write access may have left it: a node at level -1, a
hash of the wrong length, on SQLite a TEXT where an integer belongs. Such a row is a finding
of the audit, never an exception, and the rebuild removes it. What the rebuild can repair is
what the seals determine: the tree, and the seals' ``log_index`` values, which are only an
order (a position is a rank), so renumbering them densely in their order changes no leaf.
What it cannot repair is a seal itself: a chain head that is not the head its run's records
end at is reported (:attr:`LogAudit.kept`), and the tree keeps the leaf it holds for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, cast

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    delete,
    func,
    literal,
    not_,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql import ColumnElement

from agentplane_journal.db.dialect import Dialect
from agentplane_journal.db.models import Journal, JournalCounter, LogTree, RunSeal
from agentplane_journal.tlog import tree as tree
from agentplane_journal.tlog.merkle import raw_leaf


class TenantLog(Protocol):
    """What an audit needs of :class:`agentplane_journal.journal.log.TenantLog` (which calls
    it): a protocol, so this module does not import the one that imports it."""

    tenant: str
    counter_name: str
    dialect: Dialect


__all__ = ["AUDIT_PAGE", "MAX_LOG_INDEX", "LogAudit", "Progress", "Unit", "audit_pages"]

#: Leaves per transaction when auditing or rebuilding the stored tree (a power of two).
AUDIT_PAGE = 4096

#: The largest ``log_index`` (and log counter) a seal may hold: far beyond any log, and far
#: enough below 2**63 - 1 that adding a batch to it never overflows a BIGINT.
MAX_LOG_INDEX = (1 << 62) - 1

Progress = Callable[[int, int], None]
Unit = Callable[..., Awaitable[Any]]

_BYTES = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class LogAudit:
    """What re-deriving the stored tree from the seals found.

    ``size`` leaves were checked; ``first_bad`` is the first leaf position whose part of the
    log disagrees with the seals (``None``: the log is intact), ``detail`` says how.
    ``repaired`` counts the stored rows a rebuild rewrote or removed (0 for an audit).
    ``kept`` counts the seals no rebuild can repair (a chain head its run's records do not
    end at, or not a chain head at all): they are reported by the rebuild too, and stay so.
    """

    size: int
    first_bad: int | None = None
    detail: str | None = None
    repaired: int = 0
    kept: int = 0

    @property
    def ok(self) -> bool:
        return self.first_bad is None


def _valid_node(dialect: Dialect) -> ColumnElement[bool]:
    """SQL: the ``log_tree`` row is a node a seal could have written (the others are hostile)."""
    # ``+ 0``: a check of the value, never an index range. SQLite otherwise took the level
    # range for the index search over a page's ``level = L AND idx BETWEEN a AND b`` and
    # walked every level's nodes (0.6 s a page at 100k leaves, whatever its size).
    return and_(
        (LogTree.level + 0).between(0, tree.MAX_LEVEL),
        (LogTree.idx + 0).between(0, MAX_LOG_INDEX),
        func.length(LogTree.hash) == 32,
        dialect.stored_as(LogTree.level, "integer"),
        dialect.stored_as(LogTree.idx, "integer"),
        dialect.stored_as(LogTree.hash, "blob"),
        dialect.stored_as(LogTree.run_id, "text", "null"),
    )


def _valid_index(dialect: Dialect) -> ColumnElement[bool]:
    """SQL: the seal's ``log_index`` is one a seal could have been handed."""
    return and_(
        RunSeal.log_index.between(0, MAX_LOG_INDEX),
        dialect.stored_as(RunSeal.log_index, "integer"),
    )


def _good_index(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_LOG_INDEX


def _good_counter(value: object) -> bool:
    return value is None or (type(value) is int and -1 <= value <= MAX_LOG_INDEX)


@dataclass(slots=True)
class _Census:
    size: int  # the stored tree's leaves (valid rows only)
    seals: int
    maxima: list[tuple[int, int]]  # per level, the last index stored
    hostile: int  # rows that are no node a seal writes
    bad_indexes: int  # seals whose log_index is no position
    counter: object  # the log counter's value as stored (None: no row)


async def _census(session: AsyncSession, log: TenantLog) -> _Census:
    """One snapshot: the tree's size and shape, the seals, and what in them is hostile."""
    tenant, dialect = log.tenant, log.dialect
    valid = and_(LogTree.tenant == tenant, _valid_node(dialect))
    size = (
        select(func.coalesce(func.max(LogTree.idx) + 1, 0))
        .where(valid, LogTree.level == 0)
        .scalar_subquery()
    )
    seals = select(func.count()).where(RunSeal.tenant == tenant).scalar_subquery()
    bad = (
        select(func.count())
        .where(RunSeal.tenant == tenant, not_(_valid_index(dialect)))
        .scalar_subquery()
    )
    hostile = (
        select(func.count())
        .where(LogTree.tenant == tenant, not_(_valid_node(dialect)))
        .scalar_subquery()
    )
    counter = (
        select(JournalCounter.value)
        .where(JournalCounter.name == log.counter_name)
        .scalar_subquery()
    )
    head = (await session.execute(select(size, seals, bad, hostile, counter))).one()
    rows = await session.execute(
        select(LogTree.level, func.max(LogTree.idx)).where(valid).group_by(LogTree.level)
    )
    maxima = [(int(level), int(top)) for level, top in rows]
    return _Census(int(head[0]), int(head[1]), maxima, int(head[3]), int(head[2]), head[4])


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


async def _lock_counter(session: AsyncSession, log: TenantLog) -> object:
    """The counter's lock, as a seal takes it: no seal runs while this transaction does.

    Taken by rewriting the row with its own value, not ``FOR UPDATE``: a new row version, as
    a seal's, so PostgreSQL's one-statement conclusion (``backends/postgresql/conclude.py``),
    which trusts the log in its snapshot while the counter row is the version it saw,
    never hashes onto a frontier this page repaired after that snapshot."""
    return (
        await session.execute(
            update(JournalCounter)
            .where(JournalCounter.name == log.counter_name)
            .values(value=JournalCounter.value)
            .returning(JournalCounter.value)
        )
    ).scalar_one_or_none()


async def _renumber(session: AsyncSession, log: TenantLog, finding: _Finding) -> int:
    """Renumber the seals ``0..n-1`` in their order if any ``log_index`` is no position,
    and reset the log counter if it lies; the number of rows rewritten.

    A position is the rank of a seal's ``log_index``, so a dense relabelling in the same
    order changes no leaf: it only takes the hostile values (2**63 - 1, on which every later
    seal would overflow; a negative one; TEXT on SQLite) out of the counter's way. Two
    passes, so that no intermediate value collides with another seal's (the unique key is
    checked row by row): first to values past the last rank that no seal holds, then to the
    ranks. Never below 0 on the way: ``run_seal_log_index_check`` refuses that.
    """
    tenant = log.tenant
    counter = await _lock_counter(session, log)
    conn = await session.connection()
    bad = (
        await session.execute(
            select(func.count()).where(RunSeal.tenant == tenant, not_(_valid_index(log.dialect)))
        )
    ).scalar_one()
    rewritten = 0
    if bad:
        rows = (
            await session.execute(
                select(RunSeal.run_id, RunSeal.log_index)
                .where(RunSeal.tenant == tenant)
                .order_by(RunSeal.log_index)
            )
        ).all()
        taken = {int(v) for _, v in rows if type(v) is int or (type(v) is float and v.is_integer())}
        moves = [(run, i) for i, (run, v) in enumerate(rows) if not (type(v) is int and v == i)]
        first = next(i for i, (_, v) in enumerate(rows) if not _good_index(v))
        finding.add(
            first,
            f"the seal of {rows[first][0]} has log_index {_show(rows[first][1])}, not a "
            f"position 0..{MAX_LOG_INDEX}: the seals were renumbered in their order",
        )
        temps, t = [], len(rows)
        for _ in moves:
            while t in taken:
                t += 1
            temps.append(t)
            t += 1
        stmt = (
            update(RunSeal.__table__)
            .where(RunSeal.tenant == tenant, RunSeal.run_id == bindparam("r_id"))
            .values(log_index=bindparam("pos"))
        )
        for values in (temps, [i for _, i in moves]):
            params = [{"r_id": run, "pos": v} for (run, _), v in zip(moves, values, strict=True)]
            for start in range(0, len(params), 1000):
                await conn.execute(stmt, params[start : start + 1000])
        rewritten += len(moves)
    if bad or not _good_counter(counter):
        if not bad:
            finding.add(
                (
                    await session.execute(select(func.count()).where(RunSeal.tenant == tenant))
                ).scalar_one(),
                f"the log counter holds {_show(counter)}, not a position: it was reset",
            )
        top = (
            select(func.coalesce(func.max(RunSeal.log_index), -1))
            .where(RunSeal.tenant == tenant)
            .scalar_subquery()
        )
        d = log.dialect
        reset = d.insert(JournalCounter).values(name=log.counter_name, value=top)
        await conn.execute(
            reset.on_conflict_do_update(
                index_elements=[JournalCounter.name], set_={"value": reset.excluded.value}
            )
        )
        rewritten += 1
    return rewritten


def _seal_problem(sealed: bytes | None, head: object, ended: object) -> str | None:
    """Why a seal cannot be a seal of its run's records, or ``None``.

    ``ended`` is the hash column of the run's last record (``None``: it has none, as in a
    log adopted without its journal): a seal is taken at that head, and no record can follow.
    """
    if sealed is None:
        what = "NULL" if head is None else ("text" if isinstance(head, str) else "no bytes")
        return f"holds {what} as its chain head, not 32 bytes"
    if len(sealed) != 32:
        return f"holds a chain head of {len(sealed)} bytes, not 32"
    if ended is not None and (not isinstance(ended, _BYTES) or bytes(ended) != sealed):
        return (
            "holds a chain head its run's records do not end at "
            "(the seal or the records were edited)"
        )
    return None


class _PageState(TypedDict):
    """Where :func:`audit_pages` is, carried from one page's transaction to the next."""

    builder: tree.TreeBuilder
    after: object  # the last page's last log_index, as stored (compared in SQL)
    at: int  # leaves checked so far
    limit: int | None  # the seals to check (None: a rebuild, to the last one)
    kept: int  # seals no rebuild can repair


async def _audit_page(
    session: AsyncSession, log: TenantLog, state: _PageState, finding: _Finding, fix: bool
) -> tuple[int, bool]:
    """Check (or rewrite) the next page of leaves; ``(rows rewritten, last page?)``."""
    tenant, a, dialect = log.tenant, state["at"], log.dialect
    if fix:
        await _lock_counter(session, log)
    want = AUDIT_PAGE if state["limit"] is None else min(AUDIT_PAGE, state["limit"] - a)
    # The head the run's records end at (its last record's hash column): one probe of the
    # journal's primary key per seal.
    ended = (
        select(Journal.hash)
        .where(Journal.tenant == RunSeal.tenant, Journal.run_id == RunSeal.run_id)
        .order_by(Journal.seq.desc())
        .limit(1)
        .correlate(RunSeal)
        .scalar_subquery()
    )
    query = (
        select(RunSeal.run_id, RunSeal.chain_head, RunSeal.log_index, ended)
        .where(RunSeal.tenant == tenant)
        .order_by(RunSeal.log_index)
        .limit(want)
    )
    if state["after"] is not None:
        query = query.where(RunSeal.log_index > state["after"])
    seals = (await session.execute(query)).all()
    b = a + len(seals)
    stored: dict[tree.Node, tuple[bytes, Any]] = {}
    if seals:
        # One SELECT per level by the primary key's prefix (see TenantLog.paths_at), in one
        # statement; rows no seal could have written are not nodes (the last page sweeps them).
        parts = [
            select(LogTree.level, LogTree.idx, LogTree.hash, LogTree.run_id).where(
                LogTree.tenant == tenant,
                LogTree.level == level,
                LogTree.idx.between(lo, hi),
                _valid_node(dialect),
            )
            for level, lo, hi in _completed_ranges(a, b)
        ]
        rows = await session.execute(parts[0] if len(parts) == 1 else union_all(*parts))
        stored = {(int(lv), int(ix)): (bytes(h), rid) for lv, ix, h, rid in rows}
    builder: tree.TreeBuilder = state["builder"]
    wrong: list[tree.Node] = []
    expected: list[dict[str, Any]] = []
    for offset, (run_id, head, index, last) in enumerate(seals):
        position = a + offset
        if not _good_index(index):
            finding.add(
                position,
                f"the seal of {run_id} has log_index {_show(index)}, not a position "
                f"0..{MAX_LOG_INDEX} (`reindex-log` renumbers the seals in their order)",
            )
        sealed = bytes(head) if isinstance(head, _BYTES) else None
        leaf = raw_leaf(sealed or b"")
        problem = _seal_problem(sealed, head, last)
        if problem is not None:
            # Not the tree's to fix: the leaf it holds for the run stays (it is the log's
            # word against the seal's), and the seal stays reported.
            finding.add(
                position,
                f"the seal of {run_id} {problem}: no rebuild can repair a seal "
                f"(`verify {run_id}` shows the run)",
            )
            state["kept"] += 1
            have = stored.get((0, position))
            if have is not None and have[1] == run_id:
                leaf = have[0]
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
    state["at"], last_page = b, len(seals) < want or (limit is not None and b >= limit)
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
    if fix and last_page:
        # Node (level, idx) lies within b leaves iff (idx + 1) << level <= b, that is iff
        # idx < b >> level: shifting the bound, not the stored index, cannot overflow.
        beyond = LogTree.idx >= literal(b, BigInteger).op(">>")(LogTree.level)
        # A DELETE's result is a CursorResult (AsyncSession.execute is typed as any Result).
        result = cast(
            "CursorResult[Any]",
            await session.execute(
                delete(LogTree).where(
                    LogTree.tenant == tenant, or_(not_(_valid_node(dialect)), beyond)
                )
            ),
        )
        if result.rowcount:
            finding.add(
                b,
                f"{result.rowcount} stored row(s) beyond the {b} sealed runs or no node at all",
            )
            repaired += result.rowcount
    return repaired, last_page


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
    census: _Census = await unit(lambda session: _census(session, log))
    total = max(census.size, census.seals)
    finding = _Finding()
    repaired = 0
    if fix:  # positions first: the pages read the seals in log_index order
        repaired += await unit(lambda session: _renumber(session, log, finding), primary=True)
    # An audit checks the log as the census saw it (seals landing meanwhile are beyond it);
    # a rebuild goes on to whatever is sealed when its last page runs.
    state: _PageState = {
        "builder": tree.TreeBuilder(),
        "after": None,
        "at": 0,
        "limit": None,
        "kept": 0,
    }
    if not fix:
        state["limit"] = census.seals
    while True:
        page, done = await unit(
            lambda session: _audit_page(session, log, state, finding, fix), primary=fix
        )
        repaired += page
        if progress is not None:
            progress(min(state["at"], total), total)
        if done:
            break
    checked, size = state["at"], census.size
    if not fix:
        if size != checked:
            finding.add(
                min(size, checked),
                f"the stored tree holds {size} leaves, but {checked} runs are sealed",
            )
        for level, top in census.maxima:
            if (top + 1) << level > size:
                finding.add(
                    max(top << level, size),
                    f"the stored tree holds node (level {level}, index {top}) beyond its "
                    f"{size} leaves",
                )
        if census.hostile:
            finding.add(
                min(size, checked),
                f"the stored tree holds {census.hostile} row(s) that are no node a seal "
                f"writes (a level outside 0..{tree.MAX_LEVEL}, a negative index, a hash not "
                "of 32 bytes, or a value of the wrong type)",
            )
        if not _good_counter(census.counter):
            finding.add(
                checked,
                f"the log counter holds {_show(census.counter)}, not a position: the next "
                "seal would fail (`reindex-log` resets it)",
            )
    return LogAudit(checked, finding.position, finding.detail, repaired, state["kept"])
