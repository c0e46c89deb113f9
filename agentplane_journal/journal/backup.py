"""A whole-database backup on disk: every tenant's export file, then the manifest.

The layout is :mod:`agentplane_journal.exportfmt.backup_manifest`'s. Each member is written by
:func:`~agentplane_journal.journal.export.write_export`, exactly the file a one-tenant
export writes, so a member is read by everything that reads format 1. The manifest goes
last, so a backup cut short has none and is refused whole rather than restored in part.
Checking a backup's files against its manifest (:func:`read_backup`) costs one read of
each file (its SHA-256) and nothing of the database.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentplane_journal.exportfmt.backup_manifest import (
    MANIFEST,
    Manifest,
    ManifestError,
    Member,
    member_file,
    parse_manifest,
)
from agentplane_journal.exportfmt.lines import Trailer
from agentplane_journal.journal.export import write_export
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = [
    "BackupProblem",
    "Exported",
    "export_database",
    "file_digest",
    "member_problem",
    "read_backup",
    "read_manifest",
]

TenantProgress = Callable[[str, int, int], None]
"""Told ``(tenant, runs, records)`` as each tenant's file is written."""


class BackupProblem(ValueError):
    """The directory is not a whole backup (no manifest, a member missing, cut or changed)."""


@dataclass(frozen=True, slots=True)
class Exported:
    """One tenant as exported: its member, and the checkpoint read from the database
    (a drill verifies the file against this one, not against the file's own header)."""

    member: Member
    checkpoint: Checkpoint
    trailer: Trailer


def file_digest(path: Path) -> tuple[int, str]:
    """``(length, SHA-256 hex)`` of the file at ``path``, read in 1 MiB pieces."""
    h = hashlib.sha256()
    length = 0
    with path.open("rb") as f:
        while piece := f.read(1 << 20):
            h.update(piece)
            length += len(piece)
    return length, h.hexdigest()


async def export_database(
    store: SqlJournalStore,
    directory: Path,
    tenants: list[str],
    progress: TenantProgress | None = None,
) -> list[Exported]:
    """Write ``tenants``' exports and the manifest into ``directory`` (new or empty).

    ``store`` is any handle on the database; each tenant is reached with ``for_tenant``,
    keeping the handle's origin (so tenant ``acme``'s log is ``ORIGIN/acme``).
    """
    directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
    if any(directory.iterdir()):  # noqa: ASYNC240
        raise BackupProblem(
            f"{directory} is not empty; a backup goes into a new (or empty) directory, so "
            "that no file of an older backup can be taken for part of this one"
        )
    done: list[Exported] = []
    for index, tenant in enumerate(tenants, 1):
        log = store if tenant == store.tenant else store.for_tenant(tenant)
        name = member_file(index, tenant)
        path = directory / name

        def told(runs: int, records: int, tenant: str = tenant) -> None:
            if progress is not None:
                progress(tenant, runs, records)

        with path.open("w", encoding="utf-8", newline="\n") as out:
            cp, trailer = await write_export(log, out, None, told)
        length, sha = file_digest(path)
        member = Member(
            tenant=tenant,
            file=name,
            profile=(await log.wire_profile()).name,
            origin=cp.origin,
            size=cp.size,
            root=cp.root.hex(),
            runs=trailer.runs_requested,
            records=trailer.records,
            unreadable=len(trailer.unreadable),
            bytes=length,
            sha256=sha,
        )
        done.append(Exported(member, cp, trailer))
    manifest = Manifest([e.member for e in done])
    partial = directory / (MANIFEST + ".partial")
    partial.write_text(manifest.to_text(), encoding="utf-8")
    partial.replace(directory / MANIFEST)
    return done


def read_manifest(directory: Path) -> Manifest:
    """The manifest of the backup in ``directory``; :class:`BackupProblem` for a directory
    without one (not a backup, or one cut short) or one that does not parse."""
    path = directory / MANIFEST
    if not path.is_file():
        raise BackupProblem(
            f"{directory} holds no {MANIFEST}: not a backup, or one cut short before its "
            "manifest (written last) — take the backup again"
        )
    try:
        return parse_manifest(path.read_text(encoding="utf-8"))
    except (ManifestError, UnicodeDecodeError) as exc:
        raise BackupProblem(str(exc)) from None


def member_problem(directory: Path, member: Member) -> str | None:
    """What is wrong with ``member``'s file (missing, another length or digest), or None."""
    file = directory / member.file
    if not file.is_file():
        return f"tenant {member.tenant!r}: {file} is missing; the backup is not whole"
    length, sha = file_digest(file)
    if (length, sha) != (member.bytes, member.sha256):
        return (
            f"tenant {member.tenant!r}: {file} is {length} bytes with SHA-256 {sha}, the "
            f"manifest says {member.bytes} bytes with {member.sha256}: it was cut, damaged "
            "or replaced since the backup was taken"
        )
    return None


def read_backup(directory: Path) -> Manifest:
    """:func:`read_manifest`, every member's file checked (:class:`BackupProblem` for the
    first that is wrong): what a restore needs before it writes anything."""
    manifest = read_manifest(directory)
    for member in manifest.members:
        if (problem := member_problem(directory, member)) is not None:
            raise BackupProblem(problem)
    return manifest
