"""``tiles export``: a tenant's log written to a directory as C2SP tlog-tiles.

``DIR/checkpoint`` (the signed note, with any witness cosignatures), ``DIR/tile/<L>/<N>``
and ``DIR/tile/entries/<N>`` (and their ``.p/<W>`` partials): a directory any static web
server can serve as the log, and any tlog-tiles client can check without the database.

Incremental, and safe to interrupt: the size last exported is read back from
``DIR/checkpoint``, only the tiles completed since (and the new partials) are written, and
the checkpoint is written last, so a reader never sees a checkpoint whose tiles are not
there yet. Every file is written to a temporary name and renamed into place. A full tile is
never rewritten: if one is already there it must hold exactly what the log says, or the
export stops (someone else's log, or a log rewritten since: a split view in the making).
Before anything is written the new log is proven consistent with the exported checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli import notes as notes
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.db import _store
from agentplane_journal.core.ids import Digest
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.journal.tiles import cosignature_lines, entry_bundles, hash_tiles
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.merkle import verify_consistency
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.tlog.tiles import Tile, new_tiles

__all__ = ["ExportReport", "TileConflictError", "cmd_tiles_export", "export_tiles", "signed_note"]

_BATCH = 64  # tiles read per transaction


class TileConflictError(Exception):
    """A full tile already in the directory differs from the log's: refused, nothing rewritten."""


@dataclass(frozen=True)
class ExportReport:
    size: int
    old_size: int
    written: int  # files written, the checkpoint included
    kept: int  # full tiles already there (and equal)


async def signed_note(store: SqlJournalStore, cp: Checkpoint, signer: NoteSigner) -> str:
    """The checkpoint as published: the log's signature, then any witness cosignatures."""
    note = cp.to_signed_note(signer)
    return note + "".join(await cosignature_lines(store, cp.to_note()))


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def exported_checkpoint(directory: Path, origin: str) -> Checkpoint | None:
    """The checkpoint an earlier export left (its body only; ``None``: no export yet)."""
    path = directory / "checkpoint"
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    body = text.split("\n\n", 1)[0] + "\n"
    try:
        cp = Checkpoint.from_note(body)
    except ValueError as exc:
        raise _Exit(
            2, f"{path} is not a checkpoint note ({exc}); export into a new directory"
        ) from None
    if cp.origin != origin:
        raise _Exit(
            2,
            f"{directory} holds log {cp.origin!r}, not {origin!r}; give each tenant its own "
            "directory",
        )
    return cp


def _runs(tiles: list[Tile]) -> list[list[Tile]]:
    """Consecutive tiles of one level, at most :data:`_BATCH` per group."""
    groups: list[list[Tile]] = []
    for tile in tiles:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and last.level == tile.level
            and last.index + 1 == tile.index
            and len(groups[-1]) < _BATCH
        ):
            groups[-1].append(tile)
        else:
            groups.append([tile])
    return groups


def _put(path: Path, data: bytes, full: bool) -> bool:
    """Write ``path`` (atomically) unless a full tile is there already; True if written."""
    if full and path.exists():
        if path.read_bytes() != data:
            raise TileConflictError(
                f"{path} is already there and differs from the log's tile: this directory "
                "holds another log, or this log was rewritten since it was exported; full "
                "tiles are never rewritten (export into a new directory, and investigate)"
            )
        return False
    _write_atomic(path, data)
    return True


async def export_tiles(store: SqlJournalStore, directory: Path, signer: NoteSigner) -> ExportReport:
    """Write what is new in the log since ``directory``'s checkpoint; the checkpoint last."""
    old = exported_checkpoint(directory, store.origin)
    old_size = 0 if old is None else old.size
    for _ in range(5):
        cp = await store.checkpoint()
        if cp.size < old_size:
            raise TileConflictError(
                f"{directory} holds a checkpoint of {old_size} entries, but the log has "
                f"{cp.size}: the log was truncated or this is another database"
            )
        proof: list[Digest] = []
        if old is not None and 0 < old_size < cp.size:
            proof = await store.consistency_proof(old_size)
            if await store.checkpoint() != cp:
                continue  # the log grew between the two reads: take both again
        break
    else:
        raise _Exit(2, "the log kept growing while reading a proof; try again")
    if (
        old is not None
        and old_size
        and not verify_consistency(old.size, old.root, cp.size, cp.root, proof)
    ):
        raise TileConflictError(
            f"the log of {cp.size} entries is NOT consistent with the checkpoint in "
            f"{directory} ({old_size} entries): history was rewritten; nothing written"
        )
    written = kept = 0
    plan = new_tiles(old_size, cp.size)
    for group in _runs(plan):
        for tile, data in zip(group, await hash_tiles(store, group), strict=True):
            if _put(directory / tile.path(), data, tile.full):
                written += 1
            else:
                kept += 1
        if group[0].level == 0:
            for tile, data in zip(group, await entry_bundles(store, group), strict=True):
                if _put(directory / tile.entries_path(), data, tile.full):
                    written += 1
                else:
                    kept += 1
    # Always rewritten (it is the one mutable file): a new key or new cosignatures count.
    _write_atomic(directory / "checkpoint", (await signed_note(store, cp, signer)).encode())
    written += 1
    return ExportReport(size=cp.size, old_size=old_size, written=written, kept=kept)


async def cmd_tiles_export(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    async with _store(args) as store:
        try:
            signer = notes.load_signer(args.sign_key_file, args.key_name or store.origin)
        except notes.NoteProblem as exc:
            raise _Exit(exc.code, exc.message) from None
        try:
            report = await export_tiles(store, directory, signer)
        except TileConflictError as exc:
            raise _Exit(1, f"FAILED: {exc}") from None
        except OSError as exc:
            raise _Exit(2, f"cannot write the tiles into {directory}: {exc}") from None
    result = {
        "tenant": store.tenant,
        "origin": store.origin,
        "size": report.size,
        "previous_size": report.old_size,
        "files_written": report.written,
        "full_tiles_kept": report.kept,
        "verifier_key": signer.verifier_key,
    }
    if args.json:
        fmt.print_json(result)
    else:
        sys.stdout.write(
            f"{store.origin}: {report.size} entries ({report.size - report.old_size} new), "
            f"{report.written} files written to {directory}\n"
        )
    return 0
