"""The tlog-witness ``add-checkpoint`` exchange as data: the request body, the answer's meaning.

Pure, so the rules that decide whether a witness's answer is an alarm read in one place and
are tested without a network (:mod:`agentplane_journal.witness.client` only moves bytes).
The status semantics are agentplane 0.22.0's (``journal/witness_http.rs``), which follow
c2sp.org/tlog-witness:

* **200**: one or more signature lines; the ones from the witness's key must verify over
  the checkpoint, else the answer is :class:`WitnessUnavailableError` (a witness whose
  signature does not verify has said nothing).
* **409** ``text/x.tlog.size``: *stale*, not forked. The body is the witness's size (a
  uint64, as C2SP says), and a 409 whose body is not one is an unavailable witness, never
  a fork (a blank body, ``-1``, ``2**64`` or an HTML error page from a proxy must not page
  anyone about integrity).
* **422**: the consistency proof does not verify against what the witness holds, or the
  same size with another root: *forked* (:class:`WitnessForkedError`).
* **400**: only a fork-class answer when the request itself shows why (old size above the
  checkpoint size: the log shrank below what the witness saw); a 400 for a request whose
  old size is within the checkpoint is the witness's problem, *unavailable*.
* **403** / **404** / anything else: *unavailable*, naming what to configure.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from agentplane_journal.core.error_groups import (
    ConflictError,
    CorruptionError,
    StoreError,
    UnavailableError,
)
from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.cosignature import Cosignature, CosignerKey

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_PROOF_LINES",
    "UINT64_MAX",
    "WitnessError",
    "WitnessForkedError",
    "WitnessStaleError",
    "WitnessUnavailableError",
    "add_checkpoint_body",
    "read_answer",
]

MAX_PROOF_LINES = 63
"""The most consistency proof lines a client may send."""

MAX_ANSWER_BYTES = 64 * 1024
"""The largest answer body read from a witness: a cosignature line is ~150 bytes, a size
20 digits; anything near this is not an answer, and is not read on."""

UINT64_MAX = (1 << 64) - 1
"""C2SP sizes are uint64: a decimal, no sign, no leading zero, at most this."""

_SIZE_TYPE = "text/x.tlog.size"


# What a witness's answer means, as errors (agentplane_journal.errors re-exports them).


class WitnessError(StoreError):
    """A witness did not cosign a checkpoint (c2sp.org/tlog-witness). ``witness`` names it.

    Three kinds, because they ask for three different reactions: :class:`WitnessStaleError`
    (routine: the witness is at another size, retry from there), :class:`WitnessForkedError`
    (an integrity alarm: the witness holds a view this log is not consistent with) and
    :class:`WitnessUnavailableError` (the witness could not be asked or answered nonsense).
    """

    def __init__(self, witness: str, message: str) -> None:
        super().__init__(f"witness {witness}: {message}")
        self.witness = witness


class WitnessStaleError(WitnessError, ConflictError):
    """409: the old size sent is not the witness's; ``witness_size`` is the size it holds.

    Not a fork: another submitter (or an earlier run of this one) moved the witness on. The
    client retries once from that size; only a size larger than this log is alarming, and
    that is reported as :class:`WitnessForkedError`.
    """

    def __init__(self, witness: str, witness_size: int) -> None:
        super().__init__(
            witness, f"it last cosigned size {witness_size}, not the old size sent (409)"
        )
        self.witness_size = witness_size


class WitnessForkedError(WitnessError, CorruptionError):
    """The witness refused the checkpoint as inconsistent with what it saw (422), or it saw
    a larger tree than this log has. Either this log forked or shrank, or someone showed the
    witness another log under this origin and key: a split view. Investigate before anything
    else; re-submitting cannot fix it."""


class WitnessUnavailableError(WitnessError, UnavailableError):
    """The witness could not be asked, or its answer was not a protocol answer (a timeout, a
    404 for an origin it does not know, a 403 for a log key it does not trust, a 200 without
    a valid cosignature from its key). Nothing is known about the log from it."""


def add_checkpoint_body(old_size: int, proof: Sequence[Digest], signed_note: str) -> bytes:
    """``old <size>``, one base64 hash per line, a blank line, the signed checkpoint."""
    if isinstance(old_size, bool) or not isinstance(old_size, int) or old_size < 0:
        raise ValueError(f"old size must be a non-negative int, not {old_size!r}")
    if len(proof) > MAX_PROOF_LINES:
        raise ValueError(f"a consistency proof has at most {MAX_PROOF_LINES} hashes")
    lines = [f"old {old_size}\n"]
    lines += [base64.b64encode(bytes(h)).decode("ascii") + "\n" for h in proof]
    return ("".join(lines) + "\n" + signed_note).encode("utf-8")


def _size(text: str) -> int | None:
    """A C2SP uint64 size (the body of a 409), or ``None`` for anything else: a sign, a
    leading zero, non-ASCII digits, or a value of 2**64 or more (bounded before ``int()``)."""
    text = text.strip()
    if not text or not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0"):
        return None
    if len(text) > len(str(UINT64_MAX)) or int(text) > UINT64_MAX:
        return None
    return int(text)


def read_answer(
    witness: str,
    key: CosignerKey,
    checkpoint: Checkpoint,
    old_size: int,
    status: int,
    content_type: str | None,
    body: bytes,
) -> Cosignature:
    """The verified cosignature by ``key`` in a witness's answer, or the error it amounts to.

    ``witness`` names the witness in messages. Lines from other keys in a 200 are ignored,
    as the spec asks; the newest valid one from ``key`` is returned.
    """
    text = body.decode("utf-8", "replace")
    short = text.strip().replace("\n", " ")[:200]
    if status == 200:
        note = checkpoint.to_note()
        found: list[Cosignature] = []
        for line in text.split("\n"):
            if not line.strip():
                continue
            try:
                cosig = Cosignature.parse(line)
            except ValueError:
                continue  # another signature type, or noise: not this key's cosignature
            if key.verify(note, cosig) and cosig.timestamp > 0:
                found.append(cosig)
        if not found:
            raise WitnessUnavailableError(
                witness,
                "it answered 200 without a valid cosignature/v1 from its key "
                f"{key.vkey} (check the witness key in the policy)",
            )
        return max(found, key=lambda c: c.timestamp)
    if status == 409:
        size = _size(text)
        media = (content_type or "").split(";")[0].strip().lower()
        if size is None or (media and media != _SIZE_TYPE):
            raise WitnessUnavailableError(
                witness, f"it answered 409 (stale) but its body is not a tree size: {short!r}"
            )
        raise WitnessStaleError(witness, size)
    if status == 422:
        raise WitnessForkedError(
            witness,
            f"it refused {checkpoint.origin} at size {checkpoint.size} as inconsistent with "
            f"the tree it holds (422, old size {old_size}): this log forked or someone showed "
            "the witness another log under this origin and key",
        )
    if status == 400 and old_size > checkpoint.size:
        raise WitnessForkedError(
            witness,
            f"it holds size {old_size}, larger than this log's {checkpoint.size}: the log "
            "shrank below what the witness saw",
        )
    if status == 400:
        raise WitnessUnavailableError(
            witness,
            f"it answered 400 for a well-formed request (old size {old_size} <= size "
            f"{checkpoint.size}): {short!r}",
        )
    if status == 403:
        raise WitnessUnavailableError(
            witness,
            "it does not trust the log key that signed the checkpoint (403); give the "
            "witness the log's verifier key (`checkpoint --json` prints it)",
        )
    if status == 404:
        raise WitnessUnavailableError(
            witness,
            f"it does not know the origin {checkpoint.origin!r} (404); configure the log on "
            "the witness, or check the URL's submission prefix",
        )
    raise WitnessUnavailableError(witness, f"it answered HTTP {status}: {short!r}")
