"""Checkpoints and inclusion proofs: what a log publishes and what a reader keeps.

A checkpoint note is the body of a C2SP tlog-checkpoint, ``{origin}\\n{size}\\n{root}\\n``
with the root in padded standard base64, so witnesses and other transparency tooling can
read it. Parsing is strict and refuses anything ``to_note`` would not have produced: a
checkpoint is evidence, and a parser that guesses is a parser that can be fooled. The rules
are agentplane 0.22.0's ``Checkpoint::from_note``: exactly three lines, each ending in a
newline, nothing after; a non-empty origin; a size in its one decimal spelling; a root in
canonical base64 (re-encoding gives the same text) of 32 bytes. And, checked at the door
as 0.22.0's ``is_coherent`` is: a size-0 note only with the empty log's root, since any
other root names a log that cannot exist (and a witness that remembered it would report
every honest later checkpoint as a fork).
"""

from __future__ import annotations

import base64
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentplane_journal.core.b64 import b64decode_canonical
from agentplane_journal.core.error_groups import CorruptionError
from agentplane_journal.core.ids import Digest
from agentplane_journal.tlog.merkle import EMPTY_ROOT, leaf_hash, verify_inclusion

if TYPE_CHECKING:
    from agentplane_journal.tlog.note import NoteSigner, NoteVerifier

__all__ = ["V040_EMPTY_ROOT", "Checkpoint", "Inclusion", "IncoherentCheckpointError"]

V040_EMPTY_ROOT = Digest.ZERO
"""agentplane 0.4.0's root of the empty log: 32 zero bytes, a known deviation from RFC 6962
(whose empty root is SHA-256 of nothing, :data:`~agentplane_journal.tlog.merkle.EMPTY_ROOT`).
Notes 0.4.0 published for an empty log carry it; see :attr:`Checkpoint.is_v040_empty`."""

_U64_MAX = 2**64 - 1


class IncoherentCheckpointError(ValueError, CorruptionError):
    """A checkpoint note whose size and root cannot both be true: size 0 beside a root that
    is not the empty log's. Well formed, but it names a log that cannot exist, so it was
    altered or is not a checkpoint of an empty log (the command line reports it as FAILED)."""


def _size_problem(text: str) -> str | None:
    """Why ``text`` is not the one decimal spelling ``to_note`` writes, if it is not."""
    if not text:
        return "the size line is empty"
    if text != text.strip():
        return f"size {text!r} has surrounding space"
    if text[0] in "+-":
        return f"size {text!r} has a sign"
    # ASCII digits only: str.isdigit would take other scripts' digits.
    if not (text.isascii() and text.isdigit()):
        return f"size {text!r} has a character that is not an ASCII digit"
    if len(text) > 1 and text[0] == "0":
        return f"size {text!r} has a leading zero"
    return None


def _origin_problem(origin: str) -> str | None:
    if not origin:
        return "the origin line is empty"
    for ch in origin:
        if unicodedata.category(ch) == "Cc":
            return f"the origin {origin!r} contains the control character U+{ord(ch):04X}"
    return None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The log's signed-able state: its name, its size and its RFC 6962 root."""

    origin: str
    size: int
    root: Digest

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str):
            raise TypeError(f"origin must be a str, not {type(self.origin).__name__}")
        problem = _origin_problem(self.origin)
        if problem:
            raise ValueError(f"checkpoint origin: {problem}")
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise TypeError(f"size must be an int, not {type(self.size).__name__}")
        if not 0 <= self.size <= _U64_MAX:
            raise ValueError(f"checkpoint size {self.size} is outside 0..{_U64_MAX}")
        if not isinstance(self.root, Digest):
            raise TypeError(f"root must be a Digest, not {type(self.root).__name__}")

    @property
    def is_v040_empty(self) -> bool:
        """Is this agentplane 0.4.0's empty-log checkpoint (size 0, root 32 zero bytes)?

        Such a note is honest, only spelt the 0.4.0 way: an empty log is a prefix of every
        log, so a reader checking that a log only grew since this note has nothing to check
        (``verify_consistency`` itself follows the RFC and refuses the zero root; callers
        that accept 0.4.0's notes ask this first, as ``agentplane-journal consistency``
        does). :meth:`from_note` returns the note as written, zero root included, so the
        checkpoint still says exactly what was published; :meth:`normalized` gives the RFC
        spelling.
        """
        return self.size == 0 and self.root == V040_EMPTY_ROOT

    @property
    def is_coherent(self) -> bool:
        """Can this size and root both be true? Only size 0 is checkable without the log:
        the empty log has one root (RFC 6962's). A 0.4.0 empty-log note is not coherent in
        this sense (see :attr:`is_v040_empty`; :meth:`normalized` makes it so)."""
        return self.size != 0 or self.root == EMPTY_ROOT

    def normalized(self) -> Checkpoint:
        """The RFC 6962 spelling: a 0.4.0 empty-log checkpoint gets the RFC empty root."""
        return Checkpoint(self.origin, 0, EMPTY_ROOT) if self.is_v040_empty else self

    def to_note(self) -> str:
        """The C2SP checkpoint body: three lines, each ending in a newline."""
        root = base64.b64encode(bytes(self.root)).decode("ascii")
        return f"{self.origin}\n{self.size}\n{root}\n"

    def to_signed_note(self, signer: NoteSigner, *others: NoteSigner) -> str:
        """The C2SP signed note: :meth:`to_note`, a blank line, one signature line per signer.

        The log's key name SHOULD be its origin (c2sp.org/tlog-checkpoint); that is the
        caller's choice of ``NoteSigner(name, seed)``, not enforced here.
        """
        from agentplane_journal.tlog.note import sign_note

        return sign_note(self.to_note(), signer, *others)

    @classmethod
    def from_signed_note(
        cls, text: str | bytes, verifier_keys: Iterable[NoteVerifier | str]
    ) -> Checkpoint:
        """The checkpoint of a signed note that a trusted key signed; refuse anything else.

        ``verifier_keys`` are ``name+hash+base64key`` strings (or :class:`NoteVerifier`).
        Refused: a note no trusted key signed (only unknown keys), a trusted key's signature
        that does not verify (:class:`~agentplane_journal.tlog.note.NoteVerificationError`), a
        malformed note, and a body that is not a strict checkpoint (``ValueError``).
        Signatures from keys not trusted here (witness cosignatures, a rotated key) are
        ignored, as the signed-note spec requires.

        Extension lines (c2sp.org/tlog-checkpoint's optional fourth and later body lines)
        are refused: this package's logs never write them, so a note carrying them was not
        written by one, and the spec itself does not recommend them (monitors cannot audit
        them). The signatures are checked before the body is parsed, so nothing unsigned is
        ever interpreted.
        """
        from agentplane_journal.tlog.note import open_note

        body = open_note(text, verifier_keys).text
        lines = body[:-1].split("\n")
        if len(lines) > 3:
            raise ValueError(
                f"signed checkpoint: the body has {len(lines) - 3} extension line(s) after the "
                "root; this package's logs never write extension lines, so it refuses them "
                "rather than vouch for text it cannot check"
            )
        return cls.from_note(body)

    @classmethod
    def from_note(cls, text: str) -> Checkpoint:
        """Parse exactly what :meth:`to_note` writes; anything else is a ``ValueError`` that
        names the rule the text breaks.

        The rules (agentplane 0.22.0's): three lines, each ending in a newline, nothing
        after them (no missing final newline, no ``\\r``, no extension line); a non-empty
        origin without control characters; a size of ASCII digits with no sign, no leading
        zero and no surrounding space, at most 2^64 - 1; a root in canonical standard
        base64 (padded, re-encoding gives the same text) of exactly 32 bytes; and a size-0
        note only with the empty log's root (:class:`IncoherentCheckpointError` otherwise).
        Each rule refuses a second spelling of one checkpoint: the signature covers the text,
        so two texts naming one checkpoint would both verify. Stricter than agentplane
        0.4.0, which ignored trailing lines and accepted a trimmed or unpadded root.
        Extension lines and signatures must be split off by the caller
        (:meth:`from_signed_note`), so nothing unverified rides along with a checkpoint.

        One exception to the size-0 rule, flagged: agentplane 0.4.0's empty-log note (size
        0, root ``AAAA…AAA=``, 32 zero bytes, 0.4.0's known deviation from RFC 6962) parses
        to a checkpoint with exactly that root and :attr:`is_v040_empty` set; it is not
        silently rewritten to the RFC root, so ``to_note`` gives back the note as published.
        """
        if not isinstance(text, str):
            raise TypeError(f"a checkpoint note is a str, not {type(text).__name__}")
        if not text.endswith("\n"):
            raise ValueError(
                "checkpoint note: it must end with a newline after the root line (the final "
                "newline is part of the text a signature covers)"
            )
        lines = text[:-1].split("\n")
        if len(lines) != 3:
            raise ValueError(
                f"checkpoint note: expected exactly 3 lines (origin, size, root), each ending "
                f"in a newline and nothing after them; found {len(lines)}"
            )
        origin, size_text, root_text = lines
        problem = _origin_problem(origin)
        if problem:
            raise ValueError(f"checkpoint note: {problem}")
        problem = _size_problem(size_text)
        if problem:
            raise ValueError(
                f"checkpoint note: {problem}; the size is a non-negative decimal integer "
                "written one way only (ASCII digits, no sign, no leading zero, no space)"
            )
        size = int(size_text)
        if size > _U64_MAX:
            raise ValueError(f"checkpoint note: size {size} does not fit 64 bits")
        try:
            root = b64decode_canonical(root_text)
        except ValueError as exc:
            raise ValueError(
                f"checkpoint note: root {root_text!r} is not canonical standard padded "
                f"base64: {exc}"
            ) from None
        if len(root) != 32:
            raise ValueError(f"checkpoint note: root decodes to {len(root)} bytes, not 32")
        checkpoint = cls(origin, size, Digest(root))
        if not checkpoint.is_coherent and not checkpoint.is_v040_empty:
            raise IncoherentCheckpointError(
                f"checkpoint note: size 0 names the empty log, whose root is SHA-256 of "
                f"nothing ({base64.b64encode(bytes(EMPTY_ROOT)).decode('ascii')}), but this "
                f"note's root is {root_text}: a log that cannot exist (the note was altered, "
                "or it is not a checkpoint of an empty log)"
            )
        return checkpoint


@dataclass(frozen=True, slots=True)
class Inclusion:
    """Proof that a sealed run is leaf ``index`` of the log of ``size`` leaves.

    ``seal`` is the run's raw chain head (what a reader of the run computes itself), not
    the leaf hash; :meth:`verify` applies ``leaf_hash``.
    """

    index: int
    size: int
    seal: Digest
    proof: tuple[Digest, ...]

    def __post_init__(self) -> None:
        for name in ("index", "size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name} {value} is negative")
        if not isinstance(self.seal, Digest):
            raise TypeError(f"seal must be a Digest, not {type(self.seal).__name__}")
        proof = tuple(self.proof)
        for item in proof:
            if not isinstance(item, Digest):
                raise TypeError(f"proof holds Digests, not {type(item).__name__}")
        object.__setattr__(self, "proof", proof)

    def verify(self, root: Digest) -> bool:
        """Does this proof place the run's seal in the tree with ``root``?"""
        return verify_inclusion(leaf_hash(self.seal), self.index, self.size, self.proof, root)
