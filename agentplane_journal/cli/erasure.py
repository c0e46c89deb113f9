"""``erase`` and ``erasures``: destroy a scope's wrapping key and journal it; list erasures.

``erase`` needs the key custody (``--key-file``); ``erasures`` reads the journal only, so an
auditor with no keys lists what was erased, by whom and when (docs/concepts/erasure.md).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.db import _store

KEY_FILE_ENV = "AGENTPLANE_JOURNAL_KEY_FILE"


def _shape(erasure: Any) -> dict[str, Any]:
    return {
        "scope": erasure.scope,
        "by": erasure.by,
        "at": int(erasure.at),
        "reason": erasure.reason,
        "run": str(erasure.run),
        "covered_run": erasure.covered_run,
        "covered_through_seq": erasure.covered_through_seq,
    }


def _line(erasure: Any) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(erasure.at))
    covered = (
        f", covering {erasure.covered_run} through seq {erasure.covered_through_seq}"
        if erasure.covered_run
        else ""
    )
    why = f" ({erasure.reason})" if erasure.reason else ""
    return (
        f"{erasure.scope}: erased {when} by {erasure.by}{why}{covered}; journaled in {erasure.run}"
    )


async def cmd_erase(args: argparse.Namespace) -> int:
    from agentplane_journal.keyring import FileKeySource, Keyring, SealedJournal

    path = args.key_file or os.environ.get(KEY_FILE_ENV)
    if not path:
        raise _Exit(2, f"erase needs the scope keys: --key-file PATH (or ${KEY_FILE_ENV})")
    async with _store(args) as store:
        journal = SealedJournal(store, Keyring(FileKeySource(path)))
        erasure = await journal.erase(args.scope, by=args.by, reason=args.reason or "")
    if args.json:
        fmt.print_json(_shape(erasure))
    else:
        print(_line(erasure))
        print(
            "the scope's wrapping key is destroyed: its payloads are unreadable in every copy, "
            "backups included; the runs still verify (`agentplane-journal verify --all`)"
        )
    return 0


async def cmd_erasures(args: argparse.Namespace) -> int:
    from agentplane_journal.keyring.journal import journaled_erasures

    async with _store(args) as store:
        found = await journaled_erasures(store, args.limit)
    if args.json:
        fmt.print_json({"tenant": store.tenant, "erasures": [_shape(e) for e in found]})
    else:
        if not found:
            print(f"tenant {store.tenant!r}: no erasures journaled")
        for erasure in found:
            print(_line(erasure))
    return 0
