"""The command line's signed-checkpoint plumbing: key files, ``--note-key``, reading notes.

Kept apart from ``cli.py`` so the rules a witness relies on read in one place:

* a signing key file holds the log's 32-byte Ed25519 seed, either raw (exactly 32 bytes, e.g.
  ``head -c 32 /dev/urandom``) or as 64 hex digits with optional surrounding whitespace
  (``openssl rand -hex 32``); its content is never printed, not even in an error;
* a note with signature lines is only accepted when a ``--note-key`` it names verifies it;
  a signed note given with no ``--note-key`` is refused (an unchecked signature proves
  nothing), and so is an unsigned note when ``--note-key`` asks for a signature;
* a note is parsed strictly (``Checkpoint.from_note``): a malformed one is a usage error
  (exit 2) naming the rule it breaks, and a size-0 note whose root is not the empty log's is
  ``FAILED`` (exit 1): well formed, but the log it names cannot exist.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from agentplane_journal.tlog.checkpoint import Checkpoint, IncoherentCheckpointError
from agentplane_journal.tlog.note import NoteSigner, NoteVerificationError, NoteVerifier, open_note

__all__ = ["NoteProblem", "SavedNote", "load_signer", "note_key", "read_note"]

_HEX_SEED = re.compile(rb"\s*([0-9a-fA-F]{64})\s*")


class NoteProblem(Exception):
    """End the command with ``code`` (1: failed to verify, 2: usage) and ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SavedNote:
    """A checkpoint read from the command line, and the trusted keys that signed it."""

    checkpoint: Checkpoint
    signed_by: tuple[str, ...] = field(default=())  # verifier keys that verified it


def note_key(text: str) -> NoteVerifier:
    """argparse type of ``--note-key``: a verifier key ``NAME+HASH+KEY``."""
    try:
        return NoteVerifier.from_key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def load_signer(path: str, name: str) -> NoteSigner:
    """The log's note signer from a seed file; the seed itself never reaches a message."""
    try:
        data = Path(path).read_bytes()
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise NoteProblem(2, f"cannot read the signing key file {path}: {exc.strerror}") from None
    if len(data) == 32:
        seed = data
    else:
        match = _HEX_SEED.fullmatch(data)
        if match is None:
            raise NoteProblem(
                2,
                f"the signing key file {path} holds {len(data)} bytes; it must hold the "
                "32-byte Ed25519 seed, raw (32 bytes) or as 64 hex digits",
            )
        seed = bytes.fromhex(match[1].decode("ascii"))
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"agentplane-journal: warning: the signing key file {path} is readable by other "
            "users; chmod 600 it",
            file=sys.stderr,
        )
    try:
        return NoteSigner(name, seed)
    except ValueError as exc:
        raise NoteProblem(2, f"--key-name: {exc}") from None


def read_note(value: str, keys: list[NoteVerifier]) -> SavedNote:
    """A checkpoint note from the argument, or from a file with ``@file`` (``@-``: stdin)."""
    if value.startswith("@"):
        name = value[1:]
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise NoteProblem(2, f"cannot read the checkpoint note from {name}: {reason}") from None
    else:
        text = value
    # Shells and editors drop or add newlines at the ends and CRs in between; none of that is
    # part of a note (its text and its signature lines each end in exactly one newline).
    text = text.replace("\r\n", "\n").strip("\n") + "\n"
    if "\n\n" not in text:
        if keys:
            raise NoteProblem(
                1,
                "FAILED: the note is not signed, but --note-key asks for a signature; "
                "give the signed note (`checkpoint --sign-key-file`) or drop --note-key",
            )
        try:
            return SavedNote(Checkpoint.from_note(text))
        except IncoherentCheckpointError as exc:
            raise NoteProblem(1, f"FAILED: {exc}") from None  # well formed, and a lie
        except ValueError as exc:
            raise NoteProblem(2, f"not a checkpoint note: {exc}") from None
    if not keys:
        raise NoteProblem(
            2,
            "the note is signed, but no --note-key is given to check its signature; pass the "
            "log's verifier key (--note-key NAME+HASH+KEY): an unchecked signature proves nothing",
        )
    try:
        opened = open_note(text, keys)
        checkpoint = Checkpoint.from_signed_note(text, keys)
    except NoteVerificationError as exc:
        raise NoteProblem(1, f"FAILED: the note's signature: {exc}") from None
    except IncoherentCheckpointError as exc:
        raise NoteProblem(1, f"FAILED: {exc}") from None
    except ValueError as exc:
        raise NoteProblem(2, f"not a signed checkpoint note: {exc}") from None
    return SavedNote(checkpoint, tuple(v.verifier_key for v in opened.verified))
