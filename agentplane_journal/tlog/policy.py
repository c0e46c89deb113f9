"""C2SP tlog-policy files: which logs and witnesses a verifier trusts, and the quorum. Pure.

A policy is what makes a cosignature mean something to a third party: it names the log
keys whose checkpoints are accepted, the witnesses (each a cosigner key, optionally the URL
a log submits to), groups of them with thresholds, and the one quorum a checkpoint's valid
cosignatures must satisfy (c2sp.org/tlog-policy, the format sigsum's tools read)::

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all|any|<k> <member>...
    quorum <name>|none

Parsing is strict where the spec is: a group or the quorum may only name what preceding
lines defined, a member at most once per group, ``1 <= k <= n``, exactly one quorum line,
no two logs or witnesses with the same public key, and only tab, newline and printable
characters. A log key is a signed-note key (type 0x01); a witness key an Ed25519
``cosignature/v1`` key (type 0x04).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentplane_journal.tlog.cosignature import CosignerKey
from agentplane_journal.tlog.note import NoteVerifier

__all__ = ["Policy", "PolicyWitness", "parse_policy"]

_NONE = "none"


@dataclass(frozen=True, slots=True)
class PolicyWitness:
    """A witness the policy names: its policy name, its cosigner key and submission URL."""

    name: str
    key: CosignerKey
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed tlog-policy: logs, witnesses, groups (threshold, members) and the quorum."""

    logs: tuple[tuple[NoteVerifier, str | None], ...]
    witnesses: tuple[PolicyWitness, ...]
    groups: tuple[tuple[str, int, tuple[str, ...]], ...]
    quorum: str

    def witness(self, name: str) -> PolicyWitness | None:
        return next((w for w in self.witnesses if w.name == name), None)

    @property
    def log_keys(self) -> tuple[NoteVerifier, ...]:
        return tuple(key for key, _ in self.logs)

    def quorum_met(self, cosigned: Iterable[str]) -> bool:
        """Do the witnesses named in ``cosigned`` (policy names) satisfy the quorum?"""
        if self.quorum == _NONE:
            return True
        seen = set(cosigned)
        met = {w.name: w.name in seen for w in self.witnesses}
        for name, k, members in self.groups:  # each only names earlier definitions
            met[name] = sum(met[m] for m in members) >= k
        return met[self.quorum]

    def describe_quorum(self) -> str:
        """The quorum rule in words, for a report."""
        if self.quorum == _NONE:
            return "no cosignature required (quorum none)"
        for name, k, members in self.groups:
            if name == self.quorum:
                return f"group {name}: {k} of {', '.join(members)}"
        return f"witness {self.quorum}"


def _fail(number: int, message: str) -> ValueError:
    return ValueError(f"policy line {number}: {message}")


def parse_policy(text: str | bytes) -> Policy:
    """Parse a policy file's text; ``ValueError`` naming the line and the rule it breaks."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the policy is not UTF-8 (this reader needs UTF-8 names)") from None
    for ch in text:
        if (ch < " " and ch not in "\t\n") or ch == "\x7f":
            raise ValueError(
                f"the policy contains U+{ord(ch):04X}; only tab, newline and printable "
                "characters are allowed"
            )
    logs: list[tuple[NoteVerifier, str | None]] = []
    witnesses: list[PolicyWitness] = []
    groups: list[tuple[str, int, tuple[str, ...]]] = []
    names: set[str] = set()
    keys: set[bytes] = set()
    quorum: str | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(" \t")
        if not line or line.startswith("#"):
            continue
        words = line.replace("\t", " ").split()
        if not words:  # only other Unicode spaces (U+00A0, U+3000, ...), which split() drops
            continue
        keyword, args = words[0], words[1:]
        if keyword == "log":
            if len(args) not in (1, 2):
                raise _fail(number, "expected 'log <vkey> [<url>]'")
            try:
                log_key = NoteVerifier.from_key(args[0])
            except ValueError as exc:
                raise _fail(number, str(exc)) from None
            if log_key.public_key in keys:
                raise _fail(number, "a log or witness with this public key is already defined")
            keys.add(log_key.public_key)
            logs.append((log_key, args[1] if len(args) == 2 else None))
        elif keyword == "witness":
            if len(args) not in (2, 3):
                raise _fail(number, "expected 'witness <name> <vkey> [<url>]'")
            name = args[0]
            if name in names or name == _NONE:
                raise _fail(number, f"the name {name!r} is already defined (or reserved)")
            try:
                key = CosignerKey.from_vkey(args[1])
            except ValueError as exc:
                raise _fail(number, str(exc)) from None
            if key.public_key in keys:
                raise _fail(number, "a log or witness with this public key is already defined")
            keys.add(key.public_key)
            names.add(name)
            witnesses.append(PolicyWitness(name, key, args[2] if len(args) == 3 else None))
        elif keyword == "group":
            if len(args) < 3:
                raise _fail(number, "expected 'group <name> all|any|<k> <member>...'")
            name, threshold, members = args[0], args[1], tuple(args[2:])
            if name in names or name == _NONE:
                raise _fail(number, f"the name {name!r} is already defined (or reserved)")
            for member in members:
                if member not in names:
                    raise _fail(number, f"group member {member!r} is not defined above")
            if len(set(members)) != len(members):
                raise _fail(number, "a group lists a member more than once")
            if threshold == "all":
                k = len(members)
            elif threshold == "any":
                k = 1
            elif threshold.isascii() and threshold.isdigit() and not threshold.startswith("0"):
                k = int(threshold)
                if not 1 <= k <= len(members):
                    raise _fail(number, f"threshold {k} is not within 1..{len(members)}")
            else:
                raise _fail(number, f"threshold {threshold!r} is not all, any or a decimal k")
            names.add(name)
            groups.append((name, k, members))
        elif keyword == "quorum":
            if len(args) != 1:
                raise _fail(number, "expected 'quorum <name>'")
            if quorum is not None:
                raise _fail(number, "a policy has exactly one quorum line")
            if args[0] != _NONE and args[0] not in names:
                raise _fail(number, f"the quorum {args[0]!r} is not defined above")
            quorum = args[0]
        else:
            raise _fail(number, f"unknown keyword {keyword!r} (log, witness, group, quorum)")
    if quorum is None:
        raise ValueError("the policy has no quorum line ('quorum none' requires no witness)")
    return Policy(tuple(logs), tuple(witnesses), tuple(groups), quorum)
