"""The log commands: ``checkpoint``, ``prove``, ``consistency`` and ``reindex-log``.

What the Merkle log of sealed runs says and proves, and the audit of its stored tree that
``verify --all`` runs. A proof is always read with the checkpoint of the same log size:
when a seal lands between the two reads, both are taken again (:data:`_RETRIES` times).
Signed notes are read and checked by ``cli.notes``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli import notes as notes
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.db import _existing, _store
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.errors import CorruptLogError, CorruptRecordError
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion
from agentplane_journal.tlog.merkle import verify_consistency

if TYPE_CHECKING:
    from agentplane_journal.cli.notes import SavedNote
    from agentplane_journal.core.signing import Verifier
    from agentplane_journal.tlog.note import NoteVerifier

_RETRIES = 5  # snapshots re-taken when the log grows between two reads


async def _inclusion_snapshot(
    store: SqlJournalStore, run: RunId
) -> tuple[Checkpoint, Inclusion | None]:
    """A checkpoint and an inclusion proof for the same log size (retried if it grows)."""
    for _ in range(_RETRIES):
        cp = await store.checkpoint()
        inc = await store.inclusion_proof(run)
        if inc is None or inc.size == cp.size:
            return cp, inc
    raise _Exit(2, "the log kept growing while reading a proof; try again")


async def _consistency_snapshot(
    store: SqlJournalStore, old_size: int
) -> tuple[Checkpoint, list[Digest] | None]:
    """The current checkpoint and a consistency proof from ``old_size`` to it.

    ``None`` for the proof when the log is smaller than ``old_size``.
    """
    for _ in range(_RETRIES):
        cp = await store.checkpoint()
        if old_size > cp.size:
            return cp, None
        proof = await store.consistency_proof(old_size)
        if await store.checkpoint() == cp:
            return cp, proof
    raise _Exit(2, "the log kept growing while reading a proof; try again")


#: Exit code of ``consistency`` and ``prove --checkpoint`` when the server is a standby whose
#: log is smaller than the saved checkpoint: behind, not tampered with (retry, or ask the
#: primary). A primary's log smaller than a saved checkpoint stays a failure (exit 1).
EXIT_BEHIND = 3


async def _refuse_if_behind(store: SqlJournalStore, old: Checkpoint, size: int) -> None:
    """Exit :data:`EXIT_BEHIND` when this log of ``size`` leaves is smaller than the saved
    checkpoint because the server answering is a standby that has not replayed it yet."""
    if old.size > size and await store.reads_from_standby():
        raise _Exit(
            EXIT_BEHIND,
            f"this server is behind (size {size} < {old.size}): it is a standby still "
            "replaying the primary's log and has not reached the saved checkpoint; nothing "
            "was found wrong. Retry when it has caught up, or run against the primary",
        )


def _read_note(value: str, keys: list[NoteVerifier]) -> SavedNote:
    """A checkpoint note (``@file``, ``@-`` for stdin), its signature checked with ``keys``."""
    try:
        return notes.read_note(value, keys)
    except notes.NoteProblem as exc:
        raise _Exit(exc.code, exc.message) from None


def _signed_check(saved: SavedNote) -> list[tuple[bool, str]]:
    return [(True, f"the saved note is signed by trusted key {k}") for k in saved.signed_by]


def _check_origin(store: SqlJournalStore, old: Checkpoint) -> None:
    if old.origin != store.origin:
        raise _Exit(
            1,
            f"FAILED: the saved checkpoint is for log {old.origin!r}, but tenant "
            f"{store.tenant!r} here is log {store.origin!r} (check --tenant and --origin)",
        )


def _audit_progress(label: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A progress callback for the log's page-by-page audits, and how to close its bar."""
    bar: list[fmt.Progress] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(fmt.Progress(label, total, threshold=10_000))
        bar[0].update(done)

    def close() -> None:
        if bar:
            bar[0].close()

    return update, close


async def _audit_log(store: SqlJournalStore, quiet: bool) -> dict[str, Any]:
    update, close = _audit_progress("checking the log's stored tree")
    try:
        audit = await store.audit_log(update)
    except (CorruptRecordError, CorruptLogError) as exc:  # a seal row that is not a seal
        result: dict[str, Any] = {
            "ok": False,
            "leaves": None,
            "position": None,
            "error": exc.detail,
        }
        if not quiet:
            print(fmt.log_failure_line(result))
        return result
    finally:
        close()
    result = {
        "ok": audit.ok,
        "leaves": audit.size,
        "position": audit.first_bad,
        "error": audit.detail,
        "unrepairable": audit.kept,
    }
    if not audit.ok and not quiet:
        print(fmt.log_failure_line(result))
    return result


async def cmd_reindex_log(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        update, close = _audit_progress("rebuilding the log's stored tree")
        try:
            report = await store.reindex_log(update)
        finally:
            close()
    result = {
        "tenant": store.tenant,
        "leaves": report.size,
        "first_bad": report.first_bad,
        "detail": report.detail,
        "rewritten": report.repaired,
        "seals_not_repairable": report.kept,
    }
    if args.json:
        fmt.print_json(result)
    else:
        print(fmt.reindex_line(result))
    if report.kept:
        # The tree is rebuilt from the seals; a seal that disagrees with its own run's
        # records is the evidence itself, and no rebuild can say which of the two is true.
        print(
            f"FAILED {report.kept} seal(s) cannot be rebuilt from the seals: each holds a "
            "chain head its run's records do not end at (the seal or the records were "
            "edited); `verify --all` names the runs",
            file=sys.stderr,
        )
        return 1
    return 0


async def cmd_checkpoint(args: argparse.Namespace) -> int:
    if args.key_name is not None and args.sign_key_file is None:
        raise _Exit(2, "--key-name names the key of --sign-key-file; give both")
    async with _store(args) as store:
        signer = None
        if args.sign_key_file is not None:
            # The log's key name SHOULD be its origin (c2sp.org/tlog-checkpoint).
            try:
                signer = notes.load_signer(args.sign_key_file, args.key_name or store.origin)
            except notes.NoteProblem as exc:
                raise _Exit(exc.code, exc.message) from None
        cp = await store.checkpoint()
        if args.require_standby is not None:
            from agentplane_journal.cli.replication import require_standby

            await require_standby(store, args.require_standby)
    note = cp.to_note() if signer is None else cp.to_signed_note(signer)
    if args.json:
        extra = {} if signer is None else {"note": note, "verifier_key": signer.verifier_key}
        fmt.print_json({**fmt.checkpoint_json(cp), **extra})
    else:
        sys.stdout.write(note)
    return 0


async def _verify_run(
    store: SqlJournalStore, run: RunId, verifier: Verifier | None, require: bool
) -> dict[str, Any]:
    try:
        head = await store.verify(run, verifier, require)
    except CorruptRecordError as exc:
        return {"run": str(run), "ok": False, "seq": exc.seq, "error": exc.detail}
    return {"run": str(run), "ok": True, "head": head.hex()}


async def _prove(
    store: SqlJournalStore, run: RunId, old: Checkpoint | None
) -> tuple[Checkpoint, Inclusion, list[tuple[bool, str]]]:
    """The current checkpoint, the run's inclusion proof and each check's verdict."""
    for _ in range(_RETRIES):
        cp, inc = await _inclusion_snapshot(store, run)
        if inc is None:
            raise _Exit(
                1,
                f"{run} is not sealed, so it is not in the log yet "
                "(only sealed runs are; `show` lists its records)",
            )
        checks: list[tuple[bool, str]] = []
        chain = await _verify_run(store, run, None, False)
        if chain["ok"]:
            same = chain["head"] == inc.seal.hex()
            checks.append((same, "the run's records verify and end at the sealed head"))
        else:
            checks.append(
                (
                    False,
                    "the run's records verify and end at the sealed head "
                    f"(seq {chain['seq']}: {chain['error']})",
                )
            )
        if old is None or old.size == cp.size:
            label = "current" if old is None else "saved"
            root = cp.root if old is None else old.root
            checks.append((inc.verify(root), f"leaf {inc.index} is in the {label} checkpoint"))
        elif old.size > cp.size:
            checks.append(
                (False, f"the saved checkpoint has {old.size} leaves, this log only {cp.size}")
            )
        elif inc.index >= old.size:
            checks.append(
                (
                    False,
                    f"the run was sealed after the saved checkpoint (it is leaf {inc.index}, "
                    f"the saved checkpoint has {old.size}): prove it without --checkpoint",
                )
            )
        else:
            # The store proves inclusion at the current size only, so a run in an older
            # checkpoint is proved in two steps: it is in the current log, and the current
            # log extends the saved one, whose first old.size leaves include this one.
            now, proof = await _consistency_snapshot(store, old.size)
            if now != cp:
                continue  # a seal landed between the two proofs: take both again
            extends = proof is not None and verify_consistency(
                old.size, old.root, cp.size, cp.root, proof
            )
            checks.append((inc.verify(cp.root), f"leaf {inc.index} is in the current checkpoint"))
            checks.append((extends, "the current log extends the saved checkpoint"))
        return cp, inc, checks
    raise _Exit(2, "the log kept growing while reading a proof; try again")


async def cmd_prove(args: argparse.Namespace) -> int:
    if args.note_key and not args.checkpoint:
        raise _Exit(2, "--note-key checks the signature of --checkpoint NOTE; give both")
    saved = _read_note(args.checkpoint, args.note_key) if args.checkpoint else None
    old = None if saved is None else saved.checkpoint
    async with _store(args) as store:
        if old is not None:  # before the run's records: a standby behind may lack them
            _check_origin(store, old)
            await _refuse_if_behind(store, old, (await store.checkpoint()).size)
        run = await _existing(store, args.run)
        try:
            cp, inc, checks = await _prove(store, run, old)
        except CorruptLogError as exc:
            raise _Exit(1, await _why_unprovable(store, run, exc)) from None
    if saved is not None:
        checks = _signed_check(saved) + checks
    ok = all(passed for passed, _ in checks)
    if args.json:
        fmt.print_json(
            {
                "run": str(run),
                "origin": cp.origin,
                **fmt.inclusion_json(inc),
                "checkpoint": fmt.checkpoint_json(cp),
                "saved_checkpoint": None if old is None else fmt.checkpoint_json(old),
                "checks": [{"ok": passed, "check": text} for passed, text in checks],
                "ok": ok,
            }
        )
    else:
        fmt.print_prove(run, cp, inc, old, checks)
    return 0 if ok else 1


async def _why_unprovable(store: SqlJournalStore, run: RunId, exc: CorruptLogError) -> str:
    """What a proof that could not be read says: the seal lies, or the stored tree does.

    ``reindex-log`` rebuilds the stored tree from the seals, so it is the cure only when the
    seal is sound; a seal whose chain head is not the head its run's records end at is the
    finding itself (an edited seal, or records edited under it), and nothing can rebuild it.
    """
    chain = await _verify_run(store, run, None, False)
    if not chain["ok"]:
        return (
            f"FAILED {run}: its seal and its records disagree (seq {chain['seq']}: "
            f"{chain['error']}): the seal or the records were edited; `reindex-log` cannot "
            "repair that (it rebuilds only the stored tree, from the seals)"
        )
    return (
        f"FAILED {run}: the stored tree is damaged at position {exc.position} "
        f"({exc.detail}); the run's records and seal agree, so `agentplane-journal "
        "reindex-log` rebuilds the tree from the seals"
    )


async def cmd_consistency(args: argparse.Namespace) -> int:
    saved = _read_note(args.old_note, args.note_key)
    old = saved.checkpoint
    async with _store(args) as store:
        _check_origin(store, old)
        cp, proof = await _consistency_snapshot(store, old.size)
        await _refuse_if_behind(store, old, cp.size)
    # agentplane 0.4.0 wrote the empty log's root as 32 zero bytes; the RFC check refuses
    # that root, but the note is honest: the empty log is a prefix of every log.
    ok = proof is not None and (
        old.is_v040_empty or verify_consistency(old.size, old.root, cp.size, cp.root, proof)
    )
    if args.json:
        fmt.print_json(
            {
                "saved": fmt.checkpoint_json(old),
                "current": fmt.checkpoint_json(cp),
                "proof": None if proof is None else [p.hex() for p in proof],
                "saved_is_agentplane_0_4_0_empty_log": old.is_v040_empty,
                "saved_signed_by": list(saved.signed_by),
                "ok": ok,
            }
        )
    else:
        fmt.print_checks(_signed_check(saved))
        fmt.print_consistency(old, cp, proof, ok)
    return 0 if ok else 1
