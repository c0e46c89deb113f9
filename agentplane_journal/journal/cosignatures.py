"""Witness cosignatures in the database: stored per checkpoint, re-verified when read back.

A base of :class:`~agentplane_journal.journal.store.SqlJournalStore`. What it holds:

* **Only verified cosignatures are stored.** :meth:`Cosignatures.store_cosignatures`
  checks each one against its witness's key and the checkpoint before the INSERT; the row
  keeps the witness's vkey beside the line, so every row can be checked again on its own.
* **Nothing is trusted on the way out.** A row is evidence an operator (or an attacker with
  write access) could edit. :meth:`Cosignatures.read_cosignatures` parses and verifies
  every row against the checkpoint asked about and its own vkey, and reports a row that
  fails (a hostile line, a root of another checkpoint, a SQLite value of the wrong storage
  class) as a finding instead of serving it or raising. :meth:`cosignature_lines` returns
  only what verified: that is what ``serve`` appends to a served checkpoint and what
  ``receipt`` puts in a proof; a reader still checks them against *its* policy.
* **The witness's size is remembered by its cosignatures.** The largest size a key
  cosigned for this tenant, among the rows that verify, is the ``old`` size the next
  add-checkpoint sends; no second table. A witness moved on by someone else answers 409
  with its size, and the client retries from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.ids import Digest
from agentplane_journal.db.models import LogCosignature, LogTree
from agentplane_journal.db.unit import Repository
from agentplane_journal.errors import CorruptLogError
from agentplane_journal.journal.log_audit import MAX_LOG_INDEX
from agentplane_journal.tlog import tree
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.cosignature import Cosignature, CosignerKey
from agentplane_journal.tlog.merkle import EMPTY_ROOT

__all__ = ["CosignatureRead", "Cosignatures"]

_SIZES_TRIED = 64  # stored rows of one witness tried, newest first, for its size


@dataclass(frozen=True, slots=True)
class CosignatureRead:
    """The stored cosignatures of one checkpoint: those that verify, and what did not."""

    valid: tuple[tuple[CosignerKey, Cosignature], ...]
    findings: tuple[str, ...]

    @property
    def lines(self) -> list[str]:
        """The verified signature lines, each ending in a newline, oldest cosigner first."""
        return [cosig.line for _, cosig in self.valid]


def _check_row(
    checkpoint: Checkpoint, row: tuple[object, ...]
) -> tuple[CosignerKey, Cosignature] | str:
    """A stored row's verified (key, cosignature), or why it is not one."""
    cosigner, key_id, root, vkey, cosigned_at, line = row
    who = f"cosignature row of {cosigner!r}" if isinstance(cosigner, str) else "cosignature row"
    if not isinstance(vkey, str) or not isinstance(line, str):
        return f"{who} at size {checkpoint.size}: its vkey or line is not text"
    if not isinstance(root, bytes | bytearray | memoryview) or bytes(root) != bytes(
        checkpoint.root
    ):
        return f"{who} at size {checkpoint.size}: it is stored for another root"
    try:
        key = CosignerKey.from_vkey(vkey)
        cosig = Cosignature.parse(line)
    except ValueError as exc:
        return f"{who} at size {checkpoint.size}: {exc}"
    if (cosig.name, cosig.key_hash, cosig.timestamp) != (cosigner, key_id, cosigned_at):
        return f"{who} at size {checkpoint.size}: its columns do not match its line"
    if not key.verify(checkpoint.to_note(), cosig):
        return (
            f"{who} at size {checkpoint.size}: the signature does not verify over this "
            "checkpoint with its own key (altered, or never this witness's)"
        )
    return key, cosig


async def _nodes(
    session: AsyncSession, tenant: str, wanted: Sequence[tree.Node]
) -> dict[tree.Node, bytes]:
    """The stored tree nodes ``wanted`` (at most ~3 log2 n), by primary key, per level."""
    levels: dict[int, set[int]] = {}
    for level, idx in wanted:
        levels.setdefault(level, set()).add(idx)
    parts = [
        select(LogTree.level, LogTree.idx, LogTree.hash).where(
            LogTree.tenant == tenant, LogTree.level == level, LogTree.idx.in_(sorted(idxs))
        )
        for level, idxs in sorted(levels.items())
    ]
    if not parts:
        return {}
    stmt = parts[0] if len(parts) == 1 else union_all(*parts)
    found: dict[tree.Node, bytes] = {}
    for level, idx, value in await session.execute(stmt):
        if not isinstance(value, bytes | bytearray | memoryview) or len(value) != 32:
            raise CorruptLogError(
                int(idx) << int(level), f"stored tree node ({level}, {idx}) is not 32 bytes"
            )
        found[(int(level), int(idx))] = bytes(value)
    return found


class Cosignatures(Repository):
    """The store's witness cosignatures (no state of its own)."""

    # Set by SqlJournalStore; declared for the type checker.
    tenant: str
    origin: str

    async def store_cosignatures(
        self, checkpoint: Checkpoint, cosignatures: Sequence[tuple[CosignerKey, Cosignature]]
    ) -> int:
        """Store cosignatures of ``checkpoint`` (this tenant's); the number newly stored.

        Each is verified against its key first; one that does not verify is a
        ``ValueError`` and nothing is stored. A cosignature already stored for the same
        size and key is kept as it was (the first one a witness gave).
        """
        if checkpoint.origin != self.origin:
            raise ValueError(
                f"the checkpoint is of log {checkpoint.origin!r}, not of this tenant's log "
                f"{self.origin!r}"
            )
        note = checkpoint.to_note()
        rows = []
        for key, cosig in cosignatures:
            if not key.verify(note, cosig):
                raise ValueError(
                    f"the cosignature by {key.name!r} does not verify over {checkpoint.origin} "
                    f"at size {checkpoint.size}; it was not stored"
                )
            rows.append(
                {
                    "tenant": self.tenant,
                    "tree_size": checkpoint.size,
                    "cosigner": cosig.name,
                    "key_id": cosig.key_hash,
                    "root": bytes(checkpoint.root),
                    "vkey": key.vkey,
                    "cosigned_at": cosig.timestamp,
                    "line": cosig.line[:-1],
                }
            )
        if not rows:
            return 0

        async def unit(session: AsyncSession) -> int:
            stmt = self.dialect.insert(LogCosignature).on_conflict_do_nothing(
                index_elements=["tenant", "tree_size", "cosigner", "key_id"]
            )
            stored = 0
            conn = await session.connection()
            for row in rows:  # one statement each: rowcount says which were new
                result = await conn.execute(stmt.values(**row))
                stored += max(result.rowcount or 0, 0)
            return stored

        return await self.unit(unit)

    async def read_cosignatures(self, checkpoint: Checkpoint) -> CosignatureRead:
        """The stored cosignatures of ``checkpoint``, each verified again; the failures as
        findings (never raised)."""

        async def unit(session: AsyncSession) -> list[tuple[object, ...]]:
            rows = await session.execute(
                select(
                    LogCosignature.cosigner,
                    LogCosignature.key_id,
                    LogCosignature.root,
                    LogCosignature.vkey,
                    LogCosignature.cosigned_at,
                    LogCosignature.line,
                )
                .where(
                    LogCosignature.tenant == self.tenant,
                    LogCosignature.tree_size == checkpoint.size,
                )
                .order_by(LogCosignature.cosigner, LogCosignature.key_id)
            )
            return [tuple(r) for r in rows]

        valid: list[tuple[CosignerKey, Cosignature]] = []
        findings: list[str] = []
        for row in await self.unit(unit, read_only=True):
            checked = _check_row(checkpoint, row)
            if isinstance(checked, str):
                findings.append(checked)
            else:
                valid.append(checked)
        return CosignatureRead(tuple(valid), tuple(findings))

    async def cosignature_lines(self, checkpoint: Checkpoint) -> list[str]:
        """The verified stored cosignature lines of ``checkpoint``, each ending in a newline:
        append them to the checkpoint's signed note to serve it cosigned."""
        return (await self.read_cosignatures(checkpoint)).lines

    async def witness_size(self, key: CosignerKey) -> int:
        """The largest size ``key`` cosigned for this tenant (0 if none): the ``old`` size of
        the next add-checkpoint to that witness. Read on the primary.

        Only a row that verifies counts (against the checkpoint of this log at its size, with
        its own key): a garbage row, at a size beyond the log or with a line that never
        verified, would otherwise make the round report a fork without asking the witness.
        The newest :data:`_SIZES_TRIED` rows are tried; if none verifies, 0 (the witness
        answers 409 with its size, and the round resends from there).
        """

        async def unit(session: AsyncSession) -> list[tuple[object, ...]]:
            rows = await session.execute(
                select(
                    LogCosignature.tree_size,
                    LogCosignature.cosigner,
                    LogCosignature.key_id,
                    LogCosignature.root,
                    LogCosignature.vkey,
                    LogCosignature.cosigned_at,
                    LogCosignature.line,
                )
                .where(
                    LogCosignature.tenant == self.tenant,
                    LogCosignature.cosigner == key.name,
                    LogCosignature.key_id == key.key_hash,
                )
                .order_by(LogCosignature.tree_size.desc())
                .limit(_SIZES_TRIED)
            )
            return [tuple(r) for r in rows]

        for size, *row in await self.unit(unit, read_only=True, primary=True):
            if type(size) is not int or not 0 < size <= MAX_LOG_INDEX + 1:
                continue
            try:
                checkpoint, _ = await self.checkpoint_at(size)
            except (ValueError, CorruptLogError):
                continue  # beyond this log, or its tree is damaged: not a size it holds
            if not isinstance(_check_row(checkpoint, tuple(row)), str):
                return size
        return 0

    async def checkpoint_at(self, size: int, old_size: int = 0) -> tuple[Checkpoint, list[Digest]]:
        """The checkpoint of this log at a past ``size`` and the consistency proof to it from
        ``old_size``, from the stored tree in one snapshot.

        Stored nodes never change below the size they were complete at, so a checkpoint
        signed once keeps its proofs however the log grows meanwhile: the witnesses of one
        round are all asked about the same checkpoint. ``ValueError`` if ``size`` is beyond
        the log or ``old_size`` beyond ``size``.
        """
        if not 0 <= old_size <= size:
            raise ValueError(f"old size {old_size} is not within 0..{size}")
        if size > MAX_LOG_INDEX + 1:
            raise ValueError(f"this log has fewer than {size} leaves (no log holds that many)")
        if size == 0:
            return Checkpoint(self.origin, 0, EMPTY_ROOT), []
        ranges = tree.consistency_ranges(old_size, size) if 0 < old_size < size else []
        wanted = list(tree.frontier(size))
        for lo, hi in ranges:
            wanted += tree.range_nodes(lo, hi)
        wanted.append((0, size - 1))

        async def unit(session: AsyncSession) -> dict[tree.Node, bytes]:
            return await _nodes(session, self.tenant, wanted)

        nodes = await self.unit(unit, read_only=True, primary=True)
        if (0, size - 1) not in nodes:
            raise ValueError(f"this log has fewer than {size} leaves")
        try:
            root = tree.root_from_nodes(size, nodes)
            proof = tree.proof_from_nodes(ranges, nodes) if ranges else []
        except tree.MissingNodeError as error:
            level, idx = error.node
            raise CorruptLogError(idx << level, str(error)) from None
        return Checkpoint(self.origin, size, Digest._trusted(root)), proof

    async def cosigned_sizes(self) -> list[int]:
        """The checkpoint sizes of this tenant that have stored cosignatures, largest first."""

        async def unit(session: AsyncSession) -> list[object]:
            rows = await session.execute(
                select(LogCosignature.tree_size)
                .where(LogCosignature.tenant == self.tenant)
                .distinct()
                .order_by(LogCosignature.tree_size.desc())
            )
            return list(rows.scalars())

        return [
            s
            for s in await self.unit(unit, read_only=True)
            if type(s) is int and 0 <= s <= MAX_LOG_INDEX + 1
        ]
