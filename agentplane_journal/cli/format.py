"""How the `agentplane-journal` command prints things: record lines, JSON shapes, progress.

Kept apart from :mod:`agentplane_journal.cli.main` so the command module reads as "what each
command asks the store", and so the export line format (which independent verifiers parse)
is defined in exactly one place. The format itself is documented in ``cli``'s docstring.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from agentplane_journal.core.append import RESERVED_MEMBERS
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.core.record import Record
from agentplane_journal.core.values import Cancellation
from agentplane_journal.errors import Database, command
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion

__all__ = [
    "EXPORT_FORMAT",
    "Progress",
    "b64",
    "checkpoint_json",
    "export_header",
    "export_inclusion",
    "export_record",
    "failure_line",
    "log_audit_line",
    "log_failure_line",
    "reindex_line",
    "print_checks",
    "print_consistency",
    "print_hashes",
    "print_prove",
    "print_runs",
    "print_show",
    "print_verify_summary",
    "inclusion_json",
    "iso_time",
    "print_json",
    "record_json",
    "RECORD_HEADER",
    "record_fields",
    "record_line",
    "short",
]

#: The first line of every export names its format; bump it if a line's shape changes.
EXPORT_FORMAT = "agentplane-journal-export/1"

_FIELDS_WIDTH = 44


def iso_time(seconds: int | float) -> str:
    """UTC ISO 8601 with a ``Z``, to the second (the store keeps whole seconds)."""
    moment = datetime.fromtimestamp(int(seconds), UTC)
    return moment.isoformat().replace("+00:00", "Z")


def short(digest: Digest) -> str:
    """The first 12 hex digits: enough to tell hashes apart by eye, short enough for a line."""
    return digest.hex()[:12]


def b64(data: bytes) -> str:
    """Standard padded base64, the checkpoint note's own encoding."""
    return base64.b64encode(data).decode("ascii")


def print_json(value: Any, stream: TextIO | None = None) -> None:
    """One JSON document, indented for people (``jq`` reads it as well)."""
    print(json.dumps(value, indent=2, ensure_ascii=False), file=stream or sys.stdout)


# -- records -----------------------------------------------------------------------------


_BARE = re.compile(r"[\w.@:/+-]+")


def _scalar(value: Any) -> str:
    """A plain word as it is; anything with spaces or quotes as JSON."""
    if isinstance(value, str) and _BARE.fullmatch(value):
        return value
    return json.dumps(value, ensure_ascii=False)


def _nested(value: Any) -> str:
    """A nested payload value in a word: its ``kind``/``mode`` tag if it has one."""
    if isinstance(value, dict):
        for tag in ("kind", "mode", "reason"):
            tagged = value.get(tag)
            if isinstance(tagged, str):
                return tagged
        return "{...}"
    return "[...]" if value else "[]"


# Payload fields an operator looks for first, and the ones that are noise at their usual value.
_FIRST = ("descriptor", "outcome", "disposition", "error", "actor", "reason", "text", "capability")
_QUIET = {"backoff_ms": 0, "mutates": True, "attempt": 1}
_HIDDEN = frozenset({"input", "input_label", "recovery"})


def record_fields(record: Record) -> str:
    """Step, phase and effect key, then the telling payload fields, then the case."""
    body = record.body
    parts: list[str] = []
    if record.step is not None:
        parts.append(f"step={record.step}")
    if record.phase != "forward":
        parts.append(record.phase)
    if "effect_key" in body:
        parts.append(f"ek:{str(body['effect_key'])[:8]}")
    payload = [name for name in body if name not in RESERVED_MEMBERS and name not in _HIDDEN]
    payload.sort(key=lambda name: _FIRST.index(name) if name in _FIRST else len(_FIRST))
    for name in payload:
        value = body[name]
        if name in _QUIET and value == _QUIET[name]:
            continue
        if name == "descriptor" and isinstance(value, dict):
            parts.append(_nested(value))
        elif isinstance(value, dict | list):
            parts.append(f"{name}={_nested(value)}")
        elif name == "chain_head" and isinstance(value, str):
            parts.append(f"{name}={value[:8]}")
        else:
            parts.append(f"{name}={_scalar(value)}")
    if "case" in body:
        parts.append(f"case_{body['case']}")
    text = " ".join(parts)
    if len(text) > _FIELDS_WIDTH:
        text = text[: _FIELDS_WIDTH - 3] + "..."
    return text


def record_line(record: Record) -> str:
    """``seq  epoch  kind  fields  signer  hash`` on one line."""
    signer = "-" if record.attestation is None else record.attestation.key_id
    return (
        f"{record.seq:>4} {record.epoch:>5}  {record.kind:<16} "
        f"{record_fields(record):<{_FIELDS_WIDTH}}  {signer:<10}  {short(record.hash)}"
    )


RECORD_HEADER = (
    f"{'SEQ':>4} {'EPOCH':>5}  {'KIND':<16} {'FIELDS':<{_FIELDS_WIDTH}}  {'SIGNER':<10}  HASH"
)


def record_json(record: Record) -> dict[str, Any]:
    """A record for ``show --json``: the decoded body beside its link, hash and signer."""
    att = record.attestation
    return {
        "seq": record.seq,
        "epoch": record.epoch,
        "kind": record.kind,
        "body": record.body,
        "prev_hash": record.prev_hash.hex(),
        "hash": record.hash.hex(),
        "key_id": None if att is None else att.key_id,
    }


# -- checkpoints and proofs ----------------------------------------------------------------


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint with its root in both encodings and the note verbatim."""
    return {
        "origin": cp.origin,
        "size": cp.size,
        "root": {"hex": cp.root.hex(), "base64": b64(bytes(cp.root))},
        "note": cp.to_note(),
    }


def inclusion_json(inc: Inclusion) -> dict[str, Any]:
    return {
        "index": inc.index,
        "size": inc.size,
        "seal": inc.seal.hex(),
        "proof": [p.hex() for p in inc.proof],
    }


# -- command reports (text) ---------------------------------------------------------------


def print_runs(rows: list[dict[str, Any]], outcome: str | None, tenant: str) -> None:
    if not rows:
        what = f"concluded {outcome!r}" if outcome else "with records"
        print(f"no runs {what} in tenant {tenant!r}")
        return
    second = "OUTCOME" if outcome else "UPDATED (UTC)"
    print(f"{'RUN':<30}  {second:<20}  RECORDS")
    for row in rows:
        print(f"{row['run']:<30}  {row.get('outcome') or row['updated_at']:<20}  {row['records']}")


def print_show(
    run: RunId,
    tenant: str,
    records: list[Record],
    inc: Inclusion | None,
    cancel: Cancellation | None,
) -> None:
    sealed = "open (not sealed)" if inc is None else f"sealed: leaf {inc.index} of {inc.size}"
    print(f"{run}  tenant {tenant!r}  {len(records)} records  {sealed}")
    if cancel is not None:
        print(f"cancellation requested by {cancel.actor}: {cancel.reason or '(no reason)'}")
    print(RECORD_HEADER)
    for record in records:
        print(record_line(record))


def failure_line(result: dict[str, Any]) -> str:
    """How a failed run is named everywhere: the run, then ``seq N``, then why."""
    return f"FAILED {result['run']} seq {result['seq']}: {result['error']}"


def print_verify_summary(
    results: list[dict[str, Any]], tenant: str, signatures: str, single: bool
) -> None:
    failed = sum(not r["ok"] for r in results)
    if single and not failed:
        r = results[0]
        seal = r.get("sealed")
        sealed = "open (not sealed)" if seal is None else f"sealed at leaf {seal}, seal matches"
        print(f"ok {r['run']}: {r['records']} records intact, head {r['head'][:12]}; {sealed}")
    else:
        verdict = "all intact" if not failed else f"{failed} FAILED"
        print(f"verified {len(results)} runs of tenant {tenant!r}: {verdict}")
    print(f"signatures: {signatures}")


def log_failure_line(log: dict[str, Any]) -> str:
    """A stored Merkle tree that disagrees with its seals, named by its first bad position."""
    return f"FAILED log position {log['position']}: {log['error']}"


def log_audit_line(log: dict[str, Any], database: Database | None = None) -> str:
    """The log audit's line; its advice names ``database`` (the one just verified)."""
    if log["ok"]:
        return f"log: {log['leaves']} leaves, stored tree matches the seals"
    kept = log.get("unrepairable") or 0
    reindex = command("reindex-log", database)
    if kept:
        return (
            f"log: stored tree FAILED from position {log['position']}; {kept} seal(s) "
            f"disagree with their runs' records, which {reindex} cannot repair (it rebuilds "
            "the rest)"
        )
    return f"log: stored tree FAILED from position {log['position']} (rebuild it with {reindex})"


def bounds_lines(bounds: list[dict[str, Any]]) -> list[str]:
    """``verify --all``'s verdict on the counters and instants (``audit_bounds``)."""
    if not bounds:
        return ["bounds: every counter and instant is at or above its floor"]
    return [
        f"bounds: FAILED {b['table']}.{b['column']}: {b['rows']} row(s) below {b['floor']} "
        f"(first: {b['first']}); its CHECK was dropped and the row(s) edited around the store"
        for b in bounds
    ]


def reindex_line(report: dict[str, Any]) -> str:
    head = f"log of tenant {report['tenant']!r}: {report['leaves']} leaves"
    if report["first_bad"] is None:
        return f"{head}; stored tree already matches the seals, nothing rewritten"
    return (
        f"{head}; rebuilt from position {report['first_bad']} "
        f"({report['rewritten']} stored nodes rewritten): {report['detail']}"
    )


def print_checks(checks: list[tuple[bool, str]]) -> None:
    for passed, text in checks:
        print(f"{'ok    ' if passed else 'FAILED'}  {text}")


def print_hashes(label: str, hashes: Sequence[Digest]) -> None:
    print(f"{label:<7} {len(hashes)} hashes")
    for item in hashes:
        print(f"  {item.hex()}")


def print_prove(
    run: RunId,
    cp: Checkpoint,
    inc: Inclusion,
    old: Checkpoint | None,
    checks: list[tuple[bool, str]],
) -> None:
    print(f"{run} is leaf {inc.index} of {inc.size} in log {cp.origin!r}")
    print(f"seal    {inc.seal.hex()}")
    print(f"root    {b64(bytes(cp.root))}  (current checkpoint, size {cp.size})")
    print_hashes("proof", inc.proof)
    if old is not None and old.size < cp.size:
        print(
            f"the log has grown since the saved checkpoint ({old.size} -> {cp.size} leaves):"
            " proving inclusion now, and that the log extends the saved one"
        )
    print_checks(checks)


def print_consistency(
    old: Checkpoint, cp: Checkpoint, proof: list[Digest] | None, ok: bool
) -> None:
    print(f"saved   {old.origin} size {old.size} root {b64(bytes(old.root))}")
    print(f"current {cp.origin} size {cp.size} root {b64(bytes(cp.root))}")
    if proof is None:
        print_checks(
            [
                (
                    False,
                    f"the saved checkpoint has {old.size} leaves but this log only {cp.size}: "
                    "the log was truncated or rewritten, or the note is from another log",
                )
            ]
        )
        return
    if old.is_v040_empty:
        print_checks(
            [
                (
                    True,
                    "the saved note is agentplane 0.4.0's empty-log note (size 0, root 32 "
                    "zero bytes, 0.4.0's spelling of RFC 6962's SHA-256 of nothing): an empty "
                    f"log is a prefix of every log, so this log extends it (0 -> {cp.size})",
                )
            ]
        )
        return
    print_hashes("proof", proof)
    if not ok and old.size == 0:
        print_checks(
            [
                (
                    False,
                    "the saved note claims an empty log, but its root is neither RFC 6962's "
                    "empty root (SHA-256 of nothing) nor agentplane 0.4.0's 32 zero bytes: "
                    "the note was altered, or it is not a checkpoint of an empty log",
                )
            ]
        )
        return
    if ok:
        print_checks(
            [(True, f"the current log extends the saved checkpoint ({old.size} -> {cp.size})")]
        )
    else:
        print_checks(
            [
                (
                    False,
                    "the proof does not lead from the saved root to the current one: the log "
                    "was rewritten since the note was saved, or the note was altered",
                )
            ]
        )


# -- export lines (the format is documented in cli.py's docstring) -----------------------


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def export_header(tenant: str, cp: Checkpoint) -> str:
    return _line(
        {
            "type": "header",
            "format": EXPORT_FORMAT,
            "tenant": tenant,
            "origin": cp.origin,
            "checkpoint": cp.to_note(),
            "size": cp.size,
            "root": cp.root.hex(),
        }
    )


def export_record(run: RunId, record: Record) -> str:
    att = record.attestation
    return _line(
        {
            "type": "record",
            "run": str(run),
            "seq": record.seq,
            "raw": b64(record.raw),
            "prev_hash": record.prev_hash.hex(),
            "hash": record.hash.hex(),
            "key_id": None if att is None else att.key_id,
            "signature": None if att is None else b64(att.signature),
        }
    )


def export_inclusion(run: RunId, inc: Inclusion) -> str:
    return _line({"type": "inclusion", "run": str(run), **inclusion_json(inc)})


# -- progress ------------------------------------------------------------------------------


class Progress:
    """A one-line ``\\r`` counter on a terminal; silent when the stream is not a TTY.

    Only for long jobs (``threshold`` items or more), and redrawn at most ten times a
    second, so piping the command's output or running it under CI prints nothing extra.
    """

    def __init__(
        self, label: str, total: int, *, stream: TextIO | None = None, threshold: int = 20
    ) -> None:
        self._stream = stream or sys.stderr
        self._label = label
        self._total = total
        self._last = 0.0
        isatty = getattr(self._stream, "isatty", None)
        self.enabled = total >= threshold and bool(isatty and isatty())

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < self._total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = width * done // max(self._total, 1)
        bar = "#" * filled + "." * (width - filled)
        self._stream.write(f"\r{self._label} [{bar}] {done}/{self._total}")
        self._stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
