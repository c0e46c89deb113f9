"""What re-hashing the head costs each append: client CPU per append, in microseconds.

    python bench/head_check.py [--records 20000]

Every ``append`` and ``seal`` re-hashes the last row it chains onto and checks its columns
against its body (``statements.record_from_row``), in the run-state round trip it already
made: no extra statement, only the last row's ``prev_hash``/``raw`` and columns on the wire
and this client work. Compared here with what the head read cost before (wrapping the hash
column as a Digest), for a typical record (bench/append.py's payload) and a 64 KiB one.
A figure, never an assertion; interleaved rounds, best of each.
"""

from __future__ import annotations

import argparse
import time

from agentplane_journal import Append, Digest, Record, RunId
from agentplane_journal.db.statements import digest, record_from_row

PAYLOAD = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}


def head_row(payload: dict) -> tuple:
    run = RunId.generate()
    rec = Record.seal(Append(run, "Note", payload).body(7, 1), Digest.ZERO)
    att = (None, None)
    return (
        7,
        bytes(rec.prev_hash),
        bytes(rec.hash),
        rec.raw,
        *att,
        str(run),
        1,
        "Note",
        None,
        None,
    )


def per_call(fn, row, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn(row)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20000)
    n = parser.parse_args().records
    for label, payload in (("typical", PAYLOAD), ("64 KiB", {"text": "x" * 65536})):
        row = head_row(payload)
        old, new = [], []
        for _ in range(5):
            old.append(per_call(lambda r: digest(r[2], r[0]), row, n))
            new.append(per_call(record_from_row, row, n))
        print(
            f"{label:8} record ({len(row[3])} bytes): head read {min(old):.2f} us before, "
            f"{min(new):.2f} us with the re-hash and column checks "
            f"(+{min(new) - min(old):.2f} us per append)"
        )


if __name__ == "__main__":
    main()
