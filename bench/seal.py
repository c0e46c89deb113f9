"""Client CPU per appended record before any SQL: building the Append, sealing its batch.

    python bench/seal.py [--rounds 15] [--number 5000]

Both hot paths (PostgreSQL's statement, SQLite's hop) and the general unit of work do this
for every record: ``Append(...)`` validates the payload (its canonical bytes), and
``_batch.chain_batch`` builds the body, its canonical bytes, the chained hash, the
``Record`` and the journal row. Printed per record, in microseconds, for bench/append.py's
payload (~150 bytes) and a flat one, with canonical JSON through ``canonical_bytes`` (the C
encoder's fast path where it applies) and through the general encoder alone, interleaved
in rounds (median, min-max). A figure, never an assertion.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

from agentplane_journal import Append, Digest, RunId
from agentplane_journal.core import canon as canon
from agentplane_journal.core.batch import chain_batch

NESTED = {"text": "a realistic note of a few dozen bytes", "step_output": {"ok": True, "n": 42}}
FLAT = {"text": "a realistic note of a few dozen bytes", "ok": True, "n": 42}


def cases(payload: dict) -> dict[str, Callable[[], object]]:
    run = RunId.generate()
    run_id = str(run)
    item = Append(run, "Note", payload)
    body = item.body(1, 1)

    def append_and_seal() -> object:
        return chain_batch(
            "default", run_id, 1, 0, Digest.ZERO, [Append(run, "Note", payload)], None
        )

    return {
        "Append()": lambda: Append(run, "Note", payload),
        "chain_batch of 1": lambda: chain_batch("default", run_id, 1, 0, Digest.ZERO, [item], None),
        "Append + seal": append_and_seal,
        "canonical body": lambda: canon.canonical_bytes(body, path="body"),
        "  general encoder": lambda: canon._general_bytes(body, "body"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=5000)
    args = parser.parse_args()
    for label, payload in (("nested", NESTED), ("flat", FLAT)):
        runs = cases(payload)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                seconds = timeit.timeit(fn, number=args.number)
                times[name].append(seconds / args.number * 1e6)
        size = len(canon.canonical_bytes(Append(RunId.generate(), "Note", payload).body(1, 1)))
        print(f"{label} payload (a {size}-byte record), µs per record:")
        for name, values in times.items():
            print(
                f"  {name:18} {statistics.median(values):6.2f}"
                f"  ({min(values):.2f}-{max(values):.2f})"
            )


if __name__ == "__main__":
    main()
