"""verify-export and restore's pass one in memory that does not grow with the file (issue 32).

Pure, then both dialects. The streaming Merkle root equals :func:`merkle.root` byte for byte
on every size up to 1,100 and around powers of two; the log's leaves, fed in any order with
positions repeated or missing, reach exactly the verdict sorting every leaf reached (the
old code, kept here as the reference); the scratch set of runs met is exact (a set's answer
on every sequence, in memory or spilled); the report names a bounded sample of sound runs
and counts every one; and a verify's peak memory over 20,000 runs is that of 2,000. On both
dialects, a run's block repeated after the runs met have spilled to the scratch file is
still named by ``verify-export`` and refused by ``restore`` with nothing written.
"""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentplane_journal import AGENTPLANE_0_22, RunId, SqlJournalStore
from agentplane_journal.cli.backup import verify_file
from agentplane_journal.core.ids import Digest
from agentplane_journal.core.record import Record
from agentplane_journal.exportfmt.lines import (
    Trailer,
    header_line,
    record_line,
    run_line,
    trailer_line,
)
from agentplane_journal.exportfmt.settle import (
    Frontier,
    LogLeaves,
    Tally,
    settle_trailer,
    settle_tree,
)
from agentplane_journal.exportfmt.verify import SOUND_LISTED, ExportVerifier
from agentplane_journal.journal import export_seen
from agentplane_journal.journal import restore as restore_mod
from agentplane_journal.journal.export_seen import SpilledRuns
from agentplane_journal.journal.restore import RestoreRefused, restore_export
from agentplane_journal.tlog import merkle
from agentplane_journal.tlog.checkpoint import Checkpoint

from support.exports import build, export_to, fix_trailer, lines_of, other_tenant, write_lines

ORIGIN = "example.com/log"


def _seal(i: int) -> Digest:
    return Digest.of(i.to_bytes(8, "big"))


SIZES = [*range(0, 1100), 2047, 2048, 2049, 4095, 4096, 4097, 10_001]


def test_the_streaming_root_is_merkle_root_byte_for_byte() -> None:
    leaves = [merkle.leaf_hash(_seal(i)) for i in range(max(SIZES))]
    tree = Frontier()
    for n in range(max(SIZES) + 1):
        if n in SIZES:
            assert tree.root() == merkle.root(leaves[:n]), n
            assert bytes(tree.root()) == bytes(merkle.root(leaves[:n]))
        if n < len(leaves):
            tree.push(bytes(leaves[n]))
    assert Frontier().root() == merkle.EMPTY_ROOT


def _reference(pairs: list[tuple[int, Digest]], against: Checkpoint) -> list[str]:
    """The verdict of the code before: every leaf held, sorted, then judged."""
    findings: list[str] = []
    leaves = sorted(pairs, key=lambda il: il[0])
    if len(leaves) != against.size:
        return ["count"]
    positions = [i for i, _ in leaves]
    if positions != list(range(len(leaves))):
        dup = sorted(i for i, n in Counter(positions).items() if n > 1)
        missing = sorted(set(range(len(leaves))) - set(positions))
        return [f"positions {dup} {missing}"]
    if merkle.root([merkle.leaf_hash(s) for _, s in leaves]) != against.root:
        findings.append("root")
    return findings


def _streamed(pairs: list[tuple[int, Digest]], against: Checkpoint) -> list[str]:
    leaves = LogLeaves()
    for index, seal in pairs:
        leaves.add(index, seal)
    found: list[str] = []
    settle_tree(found, leaves, against)
    if not found:
        return []
    if "sealed run(s) and its checkpoint commits to" in found[0]:
        return ["count"]
    if "log positions are not the contiguous" in found[0]:
        assert (leaves.duplicated(), leaves.missing()) != ([], [])
        text = found[0]
        dup = leaves.duplicated()
        missing = leaves.missing()
        assert (f"position(s) {dup} duplicated" in text) == bool(dup)
        assert (f"position(s) {missing} missing" in text) == bool(missing)
        return [f"positions {dup} {missing}"]
    assert "Merkle root rebuilt" in found[0]
    return ["root"]


@pytest.mark.parametrize("seed", range(300))
def test_leaves_in_any_order_reach_the_verdict_sorting_them_reached(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(0, 40)
    pairs = [(i, _seal(i)) for i in range(n)]
    honest = Checkpoint(ORIGIN, n, merkle.root([merkle.leaf_hash(s) for _, s in pairs]))
    shape = rng.choice(["in order", "shuffled", "damaged", "damaged shuffled"])
    if shape.startswith("damaged") and n:
        for _ in range(rng.randrange(1, 4)):
            what = rng.choice(["dup", "drop", "far", "swap seal"])
            if what == "dup":
                pairs.append(rng.choice(pairs))
            elif what == "drop" and pairs:
                pairs.pop(rng.randrange(len(pairs)))
            elif what == "far":
                pairs.append((n + rng.randrange(0, 5), _seal(999)))
            elif pairs:
                k = rng.randrange(len(pairs))
                pairs[k] = (pairs[k][0], _seal(10_000 + k))
    if "shuffled" in shape or "damaged" in shape:
        rng.shuffle(pairs)
    for against in (honest, Checkpoint(ORIGIN, len(pairs), honest.root)):
        assert _streamed(pairs, against) == _reference(pairs, against), (shape, pairs)


def test_the_positions_finding_names_exactly_what_is_wrong() -> None:
    """The finding's text, whole: a missing position alone is named with nothing else, and a
    duplicated one always comes with the position it pushed out (the count matched)."""
    root = merkle.root([merkle.leaf_hash(_seal(i)) for i in range(3)])
    gap = LogLeaves()
    for i in (0, 2, 3):
        gap.add(i, _seal(i))
    found: list[str] = []
    settle_tree(found, gap, Checkpoint(ORIGIN, 3, root))
    assert found == [
        "the run blocks' log positions are not the contiguous 0..3 the checkpoint commits "
        "to — position(s) [1] missing, so this file describes a different log than the one "
        "it names"
    ]
    twice = LogLeaves()
    for i in (0, 1, 1):
        twice.add(i, _seal(i))
    found = []
    settle_tree(found, twice, Checkpoint(ORIGIN, 3, root))
    assert found == [
        "the run blocks' log positions are not the contiguous 0..3 the checkpoint commits "
        "to — position(s) [1] duplicated, position(s) [2] missing, so this file describes "
        "a different log than the one it names"
    ]


def test_an_emptied_run_block_is_named_with_both_explanations() -> None:
    found: list[str] = []
    not_checked: list[str] = []
    tally = Tally(empty=[RunId("01HZY0000000000000000000AA")])
    settle_trailer(found, not_checked, tally, complete=False, records=0)
    assert found == [
        "run run_01HZY0000000000000000000AA: its block carries no records and the export "
        "does not declare it unreadable — either the records were removed after the export "
        "was taken, or the file was cut short before them"
    ]
    assert not_checked == []


def test_a_file_in_log_order_holds_no_leaf_back() -> None:
    leaves = LogLeaves()
    for i in range(5000):
        leaves.add(i, _seal(i))
        assert not leaves._early and len(leaves._tree._nodes) <= 13
    assert leaves.contiguous and leaves.count == 5000


@pytest.mark.parametrize("kept", [0, 1, 3, 4096])
@pytest.mark.parametrize("seed", range(20))
def test_the_scratch_set_of_runs_is_exact(kept: int, seed: int) -> None:
    rng = random.Random(seed)
    ids = sorted(RunId.generate().ulid for _ in range(60))
    order = rng.choice(["ascending", "shuffled", "descending"])
    seq = ids if order == "ascending" else ids[::-1] if order == "descending" else ids[:]
    if order == "shuffled":
        rng.shuffle(seq)
    seq = seq + [rng.choice(ids) for _ in range(rng.randrange(0, 20))]
    if rng.random() < 0.5:
        rng.shuffle(seq)
    seen: set[str] = set()
    with SpilledRuns(kept) as spilled:
        for run in seq:
            assert spilled.add(run) == (run not in seen), (order, kept)
            seen.add(run)
    with pytest.raises(RuntimeError, match="after close"):
        spilled.add(ids[0])


def _file(runs: int, sealed_every: int = 2) -> Iterator[str]:
    """An honest export of ``runs`` one-record runs (every ``sealed_every``-th in the log),
    generated as it is read."""
    ids = [RunId.generate() for _ in range(runs)]
    heads = []
    for run in ids:
        body = {"seq": 1, "run": run.ulid, "epoch": 1, "v": 1, "kind": "Note", "text": "x"}
        heads.append(Record.seal(body, Digest.ZERO, canon=AGENTPLANE_0_22.canonicalize))
    sealed = [
        (run, rec)
        for k, (run, rec) in enumerate(zip(ids, heads, strict=True))
        if k % sealed_every == 0
    ]
    leaves = [merkle.leaf_hash(rec.hash) for _, rec in sealed]
    cp = Checkpoint(ORIGIN, len(sealed), merkle.root(leaves))
    yield header_line(cp, 1)
    index = {run: i for i, (run, _) in enumerate(sealed)}
    for run, rec in [*sealed, *((r, x) for r, x in zip(ids, heads, strict=True) if r not in index)]:
        at = index.get(run)
        yield run_line(run, at, rec.hash if at is not None else None)
        yield record_line(rec)
    yield trailer_line(Trailer(runs, runs, runs, 0))


def test_the_report_names_a_sample_of_sound_runs_and_counts_them_all() -> None:
    lines = list(_file(SOUND_LISTED + 7))
    for listed, named in ((None, SOUND_LISTED + 7), (SOUND_LISTED, SOUND_LISTED), (0, 0)):
        check = ExportVerifier(sound_listed=listed)
        for line in lines:
            check.feed(line)
        report = check.finish(None)
        assert report.findings == [] and report.is_sound
        assert len(report.sound) == named and report.runs_sound == SOUND_LISTED + 7
        assert report.to_json()["runs_sound"] == SOUND_LISTED + 7


def test_the_verifier_notes_runs_in_the_set_it_is_given() -> None:
    """The command line passes a set spilled to a scratch file: the verifier must note runs
    there, not in a set of its own in memory (which would grow with the file)."""

    class Noted:
        def __init__(self) -> None:
            self.runs: list[str] = []

        def add(self, run: str) -> bool:
            self.runs.append(run)
            return self.runs.count(run) == 1

    noted = Noted()
    check = ExportVerifier(seen=noted)
    for line in _file(5):
        check.feed(line)
    assert check.finish(None).is_sound
    assert len(noted.runs) == 5 and len(set(noted.runs)) == 5


def _peak(runs: int, tmp_path: Path) -> int:
    path = tmp_path / f"{runs}.jsonl"
    write_lines(path, list(_file(runs)))
    tracemalloc.start()
    try:
        report = verify_file(path, None, [])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.findings == [] and report.runs_sound == runs
    return peak


@pytest.mark.slow
def test_a_verify_of_20000_runs_peaks_where_one_of_2000_does(tmp_path: Path) -> None:
    small, large = _peak(2000, tmp_path), _peak(20_000, tmp_path)
    # Before: a leaf, a run id and a listed RunId per run (~340 B): +6 MiB here.
    assert large < small + (1 << 20), (small, large)


# -- both dialects: a repeat after the spill -------------------------------------------------

RUN_BLOCK = '"kind":"agentplane.export.run"'


def _repeat_last(lines: list[str], sealed: bool) -> list[str]:
    """The last (sealed or open) run's block and records repeated before the trailer."""
    starts = [i for i, x in enumerate(lines) if RUN_BLOCK in x and (('"index"' in x) == sealed)]
    start = starts[-1] if not sealed else starts[0]
    end = start + 1
    while end < len(lines) and not lines[end].startswith('{"kind"'):
        end += 1
    return fix_trailer([*lines[:-1], *lines[start:end], lines[-1]])


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "open"])
async def test_a_block_repeated_after_the_runs_spilled_is_named_and_refused(
    store: SqlJournalStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed: bool
) -> None:
    monkeypatch.setattr(export_seen, "KEPT", 2)  # 12 runs: the scratch file holds most
    await build(store, 12, long=False)
    path = tmp_path / "e.jsonl"
    cp, _ = await export_to(store, path)
    assert verify_file(path, cp, []).is_sound
    edited = write_lines(tmp_path / "edited.jsonl", _repeat_last(lines_of(path), sealed))
    report = verify_file(edited, cp, [])
    assert not report.is_sound
    assert any("a second block for this run" in f for f in report.findings), report.findings
    monkeypatch.setattr(restore_mod, "BATCH", 3)  # anything written would be committed
    target = other_tenant(store)
    with pytest.raises(RestoreRefused, match="a second block for this run"):
        await restore_export(target, edited)
    assert (await target.checkpoint()).size == 0 and not await target.audit_runs(None, 1)
    restored = await restore_export(target, path)  # the honest file, through the same spill
    assert restored.is_faithful
