"""The tenant's log as C2SP tlog-tiles: hash tiles and entry bundles read from the stored tree.

The arithmetic (which tiles, their paths, the bundle format, what an entry is) is
:mod:`agentplane_journal.tlog.tiles`; this module is the SQL. A hash tile is one range read
of the stored nodes at level ``8 * L`` (the tree is stored, so nothing is rehashed), an entry
bundle one range read of the leaves joined to their seals. Both only read nodes that are
complete below the size they are asked for, and complete nodes never change, so a tile read
after a checkpoint of that size is the tile of that checkpoint, whatever seals land
meanwhile. Every hash is checked to be 32 bytes, every range to be dense, and every entry to
hash to its leaf: a damaged row is :class:`CorruptLogError` naming its position, never a
tile that would not verify.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, exists, select
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.db.models import Journal, LogTree, RunSeal
from agentplane_journal.errors import CorruptLogError
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.merkle import raw_leaf
from agentplane_journal.tlog.tiles import TILE_WIDTH, Tile, encode_bundle

if TYPE_CHECKING:
    from agentplane_journal.journal.store import SqlJournalStore

__all__ = [
    "cosignature_lines",
    "entry_bundles",
    "hash_tiles",
    "log_exists",
    "log_tenants",
    "read_entries",
    "read_hashes",
    "recent_seals",
]

_PAGE = 16 * TILE_WIDTH  # rows per statement when a range spans many tiles


def _hash(value: Any, level: int, idx: int) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview) or len(value) != 32:
        raise CorruptLogError(
            idx << level, f"stored tree node (level {level}, index {idx}) is not a 32-byte hash"
        )
    return bytes(value)


async def read_hashes(session: AsyncSession, tenant: str, level: int, lo: int, hi: int) -> bytes:
    """The stored node hashes ``(level, lo..hi-1)``, concatenated; every one must be there."""
    out = bytearray()
    for start in range(lo, hi, _PAGE):
        end = min(hi, start + _PAGE)
        rows = await session.execute(
            select(LogTree.idx, LogTree.hash)
            .where(
                LogTree.tenant == tenant,
                LogTree.level == level,
                LogTree.idx >= start,
                LogTree.idx < end,
            )
            .order_by(LogTree.idx)
        )
        expect = start
        for idx, value in rows:
            if idx != expect:
                break
            out += _hash(value, level, idx)
            expect += 1
        if expect != end:
            raise CorruptLogError(
                expect << level,
                f"the stored tree lacks node (level {level}, index {expect}), which a tile needs",
            )
    return bytes(out)


async def read_entries(session: AsyncSession, tenant: str, lo: int, hi: int) -> list[bytes]:
    """Leaves ``lo..hi-1`` as entries (their sealed chain heads), each checked against its leaf."""
    out: list[bytes] = []
    for start in range(lo, hi, _PAGE):
        end = min(hi, start + _PAGE)
        rows = await session.execute(
            select(LogTree.idx, LogTree.hash, RunSeal.chain_head)
            .select_from(
                LogTree.__table__.outerjoin(
                    RunSeal,
                    and_(RunSeal.tenant == LogTree.tenant, RunSeal.run_id == LogTree.run_id),
                )
            )
            .where(
                LogTree.tenant == tenant,
                LogTree.level == 0,
                LogTree.idx >= start,
                LogTree.idx < end,
            )
            .order_by(LogTree.idx)
        )
        expect = start
        for idx, leaf, head in rows:
            if idx != expect:
                break
            if not isinstance(head, bytes | bytearray | memoryview) or len(head) != 32:
                raise CorruptLogError(idx, f"leaf {idx} has no 32-byte sealed chain head")
            if raw_leaf(bytes(head)) != _hash(leaf, 0, idx):
                raise CorruptLogError(
                    idx, f"leaf {idx} is not the hash of its run's sealed chain head"
                )
            out.append(bytes(head))
            expect += 1
        if expect != end:
            raise CorruptLogError(expect, f"the stored tree lacks leaf {expect}")
    return out


async def hash_tiles(
    store: SqlJournalStore, tiles: Sequence[Tile], *, session: AsyncSession | None = None
) -> list[bytes]:
    """The contents of ``tiles`` (of one level, consecutive), in one read-only transaction."""
    if not tiles:
        return []
    level = tiles[0].node_level
    lo, hi = tiles[0].first_node, tiles[-1].first_node + tiles[-1].width

    async def unit(session: AsyncSession) -> bytes:
        return await read_hashes(session, store.tenant, level, lo, hi)

    data = await store.unit(unit, read_only=True, session=session)
    out = []
    for tile in tiles:
        at = (tile.first_node - lo) * 32
        out.append(data[at : at + tile.width * 32])
    return out


async def entry_bundles(
    store: SqlJournalStore, tiles: Sequence[Tile], *, session: AsyncSession | None = None
) -> list[bytes]:
    """The entry bundles of level-0 ``tiles`` (consecutive), in one read-only transaction."""
    if not tiles:
        return []
    lo, hi = tiles[0].first_node, tiles[-1].first_node + tiles[-1].width

    async def unit(session: AsyncSession) -> list[bytes]:
        return await read_entries(session, store.tenant, lo, hi)

    entries = await store.unit(unit, read_only=True, session=session)
    return [encode_bundle(entries[t.first_node - lo : t.first_node - lo + t.width]) for t in tiles]


async def cosignature_lines(store: SqlJournalStore, note_body: str) -> list[str]:
    """The witness cosignature lines (``— name base64\\n``) stored for this checkpoint
    body, appended after the log's own signature wherever a checkpoint is published
    (``tiles export``, ``serve``'s ``/<tenant>/checkpoint`` and audit page).

    Only cosignatures that verify again as they are read come back
    (:meth:`~agentplane_journal.journal.cosignatures.Cosignatures.cosignature_lines`); a
    checkpoint of a size no witness was asked about (``agentplane-journal witness``) has none.
    """
    try:
        checkpoint = Checkpoint.from_note(note_body)
    except ValueError:
        return []  # not a checkpoint body this log writes: nothing stored can match it
    return await store.cosignature_lines(checkpoint)


async def recent_seals(
    store: SqlJournalStore,
    limit: int,
    *,
    before: int | None = None,
    session: AsyncSession | None = None,
) -> list[tuple[object, ...]]:
    """Up to ``limit`` seals of the log, newest first, those with a ``log_index`` below
    ``before`` (a page of the audit page's list): ``(run_id, chain_head, log_index,
    outcome, sealed_at)`` *as stored* (the audit page shows a hostile row as failing, never
    crashes)."""
    stmt = (
        select(
            RunSeal.run_id,
            RunSeal.chain_head,
            RunSeal.log_index,
            RunSeal.outcome,
            RunSeal.sealed_at,
        )
        .where(RunSeal.tenant == store.tenant)
        .order_by(RunSeal.log_index.desc())
        .limit(limit)
    )
    if before is not None:
        stmt = stmt.where(RunSeal.log_index < before)

    async def unit(session: AsyncSession) -> list[tuple[object, ...]]:
        return [tuple(row) for row in await session.execute(stmt)]

    return await store.unit(unit, read_only=True, session=session)


async def log_exists(store: SqlJournalStore, *, session: AsyncSession | None = None) -> bool:
    """Whether the tenant has any run (a record or a seal): a page for one that has none
    is a 404, so a made-up name renders nothing (two primary-key probes)."""
    stmt = select(
        exists().where(Journal.tenant == store.tenant),
        exists().where(RunSeal.tenant == store.tenant),
    )

    async def unit(session: AsyncSession) -> bool:
        return any((await session.execute(stmt)).one())

    return await store.unit(unit, read_only=True, session=session)


async def log_tenants(store: SqlJournalStore, *, session: AsyncSession | None = None) -> list[str]:
    """Every tenant with a sealed run (the audit page's index)."""
    stmt = select(RunSeal.tenant).distinct().order_by(RunSeal.tenant)

    async def unit(session: AsyncSession) -> list[str]:
        return [str(t) for t in (await session.execute(stmt)).scalars()]

    return await store.unit(unit, read_only=True, session=session)
