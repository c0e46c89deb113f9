"""The witness commands: ``witness``, ``receipt`` and ``verify-receipt``.

``witness`` signs the tenant's checkpoint, asks the policy's witnesses to cosign it
(c2sp.org/tlog-witness), stores what verifies and reports the quorum: exit 0 when it is
met, 1 when it is not or a witness reports a fork. ``receipt RUN`` writes a sealed run's
c2sp.org/tlog-proof@v1 file, with the largest cosigned checkpoint that holds the run.
``verify-receipt FILE --policy POLICY`` checks one offline, with no database.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli import notes as notes
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.db import _run_id, _store
from agentplane_journal.errors import CorruptLogError
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.tlog.policy import Policy, parse_policy
from agentplane_journal.tlog.receipt import Receipt, verify_receipt

__all__ = ["cmd_receipt", "cmd_verify_receipt", "cmd_witness"]


def _policy(path: str) -> Policy:
    try:
        return parse_policy(Path(path).read_bytes())
    except OSError as exc:
        raise _Exit(2, f"cannot read the policy {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise _Exit(2, f"the policy {path}: {exc}") from None


def _read(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise _Exit(2, f"cannot read the receipt {path}: {exc.strerror}") from None


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _Exit(2, f"cannot write the receipt to {path}: {exc.strerror}") from None


def _signer(args: argparse.Namespace, store: SqlJournalStore) -> NoteSigner:
    try:
        return notes.load_signer(args.sign_key_file, args.key_name or store.origin)
    except notes.NoteProblem as exc:
        raise _Exit(exc.code, exc.message) from None


async def cmd_witness(args: argparse.Namespace) -> int:
    from agentplane_journal.witness.client import witness_round

    policy = _policy(args.policy)
    async with _store(args) as store:
        signer = _signer(args, store)
        if policy.logs and signer.verifier not in policy.log_keys:
            print(
                f"agentplane-journal: warning: the policy does not list this log's key "
                f"{signer.verifier_key}; its readers will not accept the checkpoint",
                file=sys.stderr,
            )
        try:
            result = await witness_round(store, signer, policy, request_timeout=args.timeout)
        except ImportError as exc:
            raise _Exit(2, str(exc)) from None
    cp = result.checkpoint
    if args.json:
        fmt.print_json(
            {
                **fmt.checkpoint_json(cp),
                "witnesses": [
                    {"witness": o.witness, "status": o.status, "detail": o.detail}
                    for o in result.outcomes
                ],
                "cosigned_by": list(result.cosigned_by),
                "quorum": policy.describe_quorum(),
                "quorum_met": result.quorum_met,
                "forked": result.forked,
                "stored_findings": list(result.findings),
                "note": result.cosigned_note,
            }
        )
    else:
        print(f"checkpoint {cp.origin} size {cp.size}")
        for o in result.outcomes:
            print(f"  {o.status.upper():<12} {o.witness}: {o.detail}")
        for finding in result.findings:
            print(f"  FAILED stored {finding}")
        verdict = "MET" if result.quorum_met else "NOT MET"
        print(
            f"quorum {verdict}: {policy.describe_quorum()}; cosigned by "
            f"{', '.join(result.cosigned_by) or 'none'}"
        )
    if result.forked:
        print(
            "FAILED a witness reports a fork: it holds a view of this log that this checkpoint "
            "does not extend (see the witness lines above)",
            file=sys.stderr,
        )
        return 1
    return 0 if result.quorum_met else 1


async def _receipt(
    store: SqlJournalStore, run_text: str, signer: NoteSigner
) -> tuple[Receipt, int, list[str]]:
    """The run's receipt on the largest cosigned checkpoint holding it (else the current
    one), the number of cosignatures it carries, and the stored rows that did not verify
    (reported, never put in the receipt)."""
    run = _run_id(run_text)
    inc = await store.inclusion_proof(run)
    if inc is None:
        raise _Exit(1, f"{run} is not sealed, so it is not in the log yet (only sealed runs are)")
    findings: list[str] = []
    chosen: tuple[Checkpoint, list[str]] | None = None
    for size in await store.cosigned_sizes():
        if size <= inc.index:
            break
        if size > inc.size:
            findings.append(
                f"cosignature rows at size {size}: beyond this log's {inc.size} leaves, so "
                "none of them can verify"
            )
            continue
        try:
            cp, _ = await store.checkpoint_at(size)
        except (ValueError, CorruptLogError) as exc:
            findings.append(f"cosignature rows at size {size}: {exc}")
            continue
        read = await store.read_cosignatures(cp)
        findings += read.findings
        if read.lines:
            chosen = (cp, read.lines)
            break
    if chosen is None:
        cp, _ = await store.checkpoint_at(inc.size)
        chosen = (cp, [])
    cp, lines = chosen
    paths = await store.inclusion_paths_at(cp.size, [inc.index])
    note = cp.to_signed_note(signer) + "".join(lines)
    receipt = Receipt(str(run), inc.seal, inc.index, tuple(paths[inc.index]), note)
    return receipt, len(lines), findings


async def cmd_receipt(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        signer = _signer(args, store)
        receipt, cosigned, findings = await _receipt(store, args.run, signer)
    for finding in findings:
        print(f"agentplane-journal: FAILED stored {finding} (left out)", file=sys.stderr)
    text = receipt.to_text()
    if args.output:
        _write(args.output, text)
    else:
        sys.stdout.write(text)
    if not cosigned:
        print(
            "agentplane-journal: warning: no stored cosignature covers this run yet; the "
            "receipt carries the log's signature only (run `agentplane-journal witness`)",
            file=sys.stderr,
        )
    return 0


async def cmd_verify_receipt(args: argparse.Namespace) -> int:
    policy = _policy(args.policy)
    data = _read(args.file)
    report = verify_receipt(data, policy, args.run)
    if args.json:
        fmt.print_json(
            {
                "ok": report.ok,
                "run": None if report.receipt is None else report.receipt.run,
                "run_proven": False,  # the run id is the receipt's claim (see "claims")
                "checks": [{"ok": ok, "check": text} for ok, text in report.checks],
                "claims": list(report.claims),
                "cosigned_by": list(report.cosigned_by),
            }
        )
    else:
        for ok, text in report.checks:
            print(f"{'ok    ' if ok else 'FAILED'} {text}")
        for text in report.claims:
            print(f"claim  {text}")
    return 0 if report.ok else 1
