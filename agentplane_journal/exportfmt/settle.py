"""What only a whole export file can show, settled in memory that does not grow with it.

:class:`~agentplane_journal.exportfmt.verify.ExportVerifier` reads the file line by line;
this module holds what it keeps across runs and judges at the end:

* the **log's leaves** (:class:`LogLeaves`): each sealed block's ``(index, seal)`` folded
  into a streaming RFC 6962 root as it arrives (:class:`Frontier`: one subtree root per set
  bit of the size, so O(log n) digests). A file in log order (every export this package
  writes) holds nothing else; a block that arrives before a lower position is held until
  the gap fills (so a file in another order holds its early leaves, as the whole list was
  held before), and a position met twice is remembered to name it. The verdict is the one
  sorting every leaf gave: the count against the checkpoint, then positions exactly
  ``0..N`` (duplicated and missing ones named), then the root;
* the **trailer's accounting** and the **case layer** (:func:`settle_trailer`,
  :func:`settle_cases`), which need counts and the few runs the file declares damaged;
* :class:`SeenRuns`, what names a run's second block: *exact* (a probabilistic filter could
  miss a repeat and call the file SOUND). In memory by default (a run id per run); the
  command line and restore pass one in a temporary SQLite file instead
  (:mod:`agentplane_journal.journal.export_seen`), which this pure module cannot open.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.tlog import merkle
from agentplane_journal.tlog.checkpoint import Checkpoint

__all__ = [
    "Frontier",
    "InMemorySeen",
    "LogLeaves",
    "SeenRuns",
    "Tally",
    "settle_cases",
    "settle_trailer",
    "settle_tree",
]


class SeenRuns(Protocol):
    """The run ids whose blocks were met so far: exact, never probabilistic."""

    def add(self, run: str) -> bool:
        """Note ``run``; ``True`` the first time it is noted, ``False`` on every repeat."""
        ...


class InMemorySeen:
    """:class:`SeenRuns` as a set (memory: a run id per run)."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: set[str] = set()

    def add(self, run: str) -> bool:
        if run in self._runs:
            return False
        self._runs.add(run)
        return True


class Frontier:
    """RFC 6962's root of leaf hashes appended in order, holding one subtree root per set
    bit of the size: ``MTH(D[n])`` splits at the largest power of two below ``n``, so the
    tree of ``n`` leaves is its complete subtrees left to right (sizes the binary digits of
    ``n``) folded from the right, which is what :meth:`root` computes
    (:func:`agentplane_journal.tlog.merkle.root`'s tree, byte for byte)."""

    __slots__ = ("_nodes", "size")

    def __init__(self) -> None:
        self._nodes: list[bytes] = []
        self.size = 0

    def push(self, leaf: bytes) -> None:
        """Append a raw leaf hash (``merkle.raw_leaf`` of the value)."""
        nodes = self._nodes
        nodes.append(leaf)
        self.size += 1
        n = self.size
        while not n & 1:  # two complete subtrees of one size become one
            right = nodes.pop()
            nodes[-1] = merkle.raw_node(nodes[-1], right)
            n >>= 1

    def root(self) -> Digest:
        """The tree head over what was pushed; ``merkle.EMPTY_ROOT`` for nothing."""
        if not self._nodes:
            return merkle.EMPTY_ROOT
        r = self._nodes[-1]
        for left in reversed(self._nodes[:-1]):
            r = merkle.raw_node(left, r)
        return Digest(r)


class LogLeaves:
    """The sealed blocks' ``(index, seal)`` pairs, folded into the log's root as they come
    (see the module's docstring for what is held)."""

    __slots__ = ("_dup", "_early", "_tree", "count")

    def __init__(self) -> None:
        self._tree = Frontier()
        self._early: dict[int, bytes] = {}  # positions above the next one, until it comes
        self._dup: set[int] = set()
        self.count = 0

    def add(self, index: int, seal: Digest) -> None:
        self.count += 1
        tree, early = self._tree, self._early
        if index < tree.size or index in early:
            self._dup.add(index)
            return
        leaf = merkle.raw_leaf(bytes(seal))
        if index != tree.size:
            early[index] = leaf
            return
        tree.push(leaf)
        while early and tree.size in early:
            tree.push(early.pop(tree.size))

    @property
    def contiguous(self) -> bool:
        """Positions exactly ``0..count``: each met once, none missing."""
        return self._tree.size == self.count

    def duplicated(self) -> list[int]:
        return sorted(self._dup)

    def missing(self) -> list[int]:
        """Positions below ``count`` no block carries (all below the tree's size are)."""
        return [i for i in range(self._tree.size, self.count) if i not in self._early]

    def root(self) -> Digest:
        """The root over positions ``0..count`` (meaningful when :attr:`contiguous`)."""
        return self._tree.root()


def settle_tree(findings: list[str], leaves: LogLeaves, against: Checkpoint) -> None:
    """The leaves against ``against``: their count, their positions, then the root."""
    if leaves.count != against.size:
        findings.append(
            f"the export carries {leaves.count} sealed run(s) and its checkpoint commits to "
            f"{against.size} — the difference is runs that were in the log and are not in "
            "this file"
        )
        return
    if not leaves.contiguous:
        dup, missing = leaves.duplicated(), leaves.missing()
        findings.append(
            f"the run blocks' log positions are not the contiguous 0..{against.size} the "
            "checkpoint commits to — "
            + (f"position(s) {dup} duplicated" if dup else "")
            + (", " if dup and missing else "")
            + (f"position(s) {missing} missing" if missing else "")
            + ", so this file describes a different log than the one it names"
        )
        return
    if leaves.root() != against.root and not (against.size == 0 and against.is_v040_empty):
        findings.append(
            "the Merkle root rebuilt from this export does not match the checkpoint it "
            "claims to be a copy of"
        )


@dataclass(slots=True)
class Tally:
    """The counts and the damaged runs the trailer is held to."""

    run_blocks: int = 0
    read_runs: int = 0
    empty: list[RunId] = field(default_factory=list)
    claims: dict[str, Any] = field(default_factory=dict)
    unreadable: list[tuple[RunId, str]] = field(default_factory=list)


def settle_trailer(
    findings: list[str], not_checked: list[str], tally: Tally, complete: bool, records: int
) -> None:
    """Declared-unreadable and emptied runs, then the trailer's counts against the file's."""
    declared = {run for run, _ in tally.unreadable}
    for run, reason in tally.unreadable:
        not_checked.append(
            f"run {run}: the export declares it unreadable ({reason}), so its records are "
            "not in this file and nothing about it was verified"
        )
    for run in tally.empty:
        if run not in declared:
            findings.append(
                f"run {run}: its block carries no records and the export does not declare "
                "it unreadable — either the records were removed after the export was "
                "taken, or the file was cut short before them"
            )
    if not complete:
        return
    requested = tally.claims.get("runs_requested")
    exported = tally.claims.get("runs_exported")
    claimed = tally.claims.get("records")
    if requested is None or exported is None or claimed is None:
        findings.append(
            "the trailer is missing counts this format always writes (runs_requested, "
            "runs_exported, records) — a reader cannot hold the file to its own accounting"
        )
        return
    if requested != tally.run_blocks:
        findings.append(
            f"the trailer says {requested} run(s) were requested and this file carries "
            f"{tally.run_blocks} run block(s) — whole runs were removed or added after "
            "the export was taken"
        )
    if exported != tally.read_runs:
        findings.append(
            f"the trailer says {exported} run(s) were exported in full and this file "
            f"carries records for {tally.read_runs} — a run's records were removed after "
            "the export was taken"
        )
    if claimed != records:
        findings.append(
            f"the trailer says {claimed} record(s) were written and this file carries "
            f"{records} — record lines were removed or added after the export was taken"
        )


def settle_cases(
    findings: list[str], not_checked: list[str], carried: set[str], stamped: set[str]
) -> None:
    """Cases stamped on records against the case blocks the file carries."""
    if not carried:
        if stamped:
            not_checked.append(
                f"the case layer — {len(stamped)} case(s) are stamped on records and "
                "this file carries no case blocks (this package keeps no case store, so "
                "its exports never do)"
            )
        return
    for case in sorted(stamped - carried):
        findings.append(
            f"case {case} is stamped on exported records and missing from the case layer "
            "— the journal names a matter this file does not carry"
        )
    not_checked.append(
        "the case layer's contents — blob bytes and sealed case state are questions about "
        "a live agentplane plane, which neither an offline file nor this package answers"
    )
