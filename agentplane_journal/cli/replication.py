"""``replication``: what a failover could lose now, from the primary's point of view.

Asynchronous replication acknowledges a commit before any standby has it, so promoting a
standby can lose the last acknowledged writes (and hand their sequence numbers out again).
This command shows that window as it is at this moment: for each streaming standby, the
bytes of WAL it has not flushed (lost by a failover to it now) and not replayed (what its
readers do not see yet); with ``--read-url`` (a standby), the log itself: how many sealed
runs of the tenant the standby's checkpoint lacks. ``checkpoint --require-standby`` (in
``cli.log``) closes the window for the checkpoints it hands out. See
docs/operations/topology.md, "The asynchronous window".
"""

from __future__ import annotations

import argparse
from typing import Any

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.base import _Exit
from agentplane_journal.cli.db import _store
from agentplane_journal.db.replication import ReplicationState
from agentplane_journal.journal.store import SqlJournalStore

#: Exit code of ``checkpoint --require-standby`` when no standby received it in time.
EXIT_UNREPLICATED = 4


def _bytes(n: int | None) -> str:
    return "?" if n is None else f"{n} B"


def state_json(state: ReplicationState) -> dict[str, Any]:
    return {
        "position": state.position,
        "safe": state.safe,
        "standbys": [
            {
                "name": s.name,
                "state": s.state,
                "sync_state": s.sync_state,
                "unflushed_bytes": s.unflushed,
                "unreplayed_bytes": s.unreplayed,
                "replay_lag_seconds": s.replay_lag,
            }
            for s in state.standbys
        ],
    }


def loss_summary(state: ReplicationState) -> str:
    """One sentence: what a failover at this moment could lose."""
    if state.position is None:
        return "no replication (SQLite): the database file is the only copy"
    if not state.standbys:
        return (
            "no standby is connected: the primary is the only copy of everything since "
            "the last backup"
        )
    if state.safe:
        names = ", ".join(s.name or "?" for s in state.standbys if s.unflushed == 0)
        return f"a failover now to {names} loses nothing acknowledged so far"
    least = min((s.unflushed for s in state.standbys if s.unflushed is not None), default=None)
    return (
        "every standby lacks acknowledged writes: a failover now loses at least "
        f"{_bytes(least)} of WAL (the newest commits, their sequence numbers reusable)"
    )


async def cmd_replication(args: argparse.Namespace) -> int:
    read = getattr(args, "read_target", None)
    async with _store(args) as store:
        state = await store.replication()
        logs: dict[str, Any] | None = None
        if read is not None:
            # The standby's log against the primary's, for this tenant.
            on_standby = await store.checkpoint()
            async with await SqlJournalStore.connect(
                args.target.url, tenant=args.tenant, origin=args.origin, schema=args.schema
            ) as primary:
                on_primary = await primary.checkpoint()
            logs = {
                "primary_size": on_primary.size,
                "standby_size": on_standby.size,
                "missing_seals": max(on_primary.size - on_standby.size, 0),
            }
    if args.json:
        fmt.print_json({**state_json(state), "log": logs, "summary": loss_summary(state)})
        return 0
    if state.position is not None:
        print(f"primary WAL at {state.position}")
    for s in state.standbys:
        lag = "-" if s.replay_lag is None else f"{s.replay_lag:.3f}s"
        print(
            f"standby {s.name or '?'}: {s.state}, {s.sync_state}; not flushed "
            f"{_bytes(s.unflushed)}, not replayed {_bytes(s.unreplayed)}, replay lag {lag}"
        )
    if logs is not None:
        print(
            f"log of {args.tenant!r}: {logs['primary_size']} sealed runs on the primary, "
            f"{logs['standby_size']} on the --read-url standby ({logs['missing_seals']} "
            "a failover to it would lose now, if its flushed WAL is not replayed first)"
        )
    print(loss_summary(state))
    return 0


async def require_standby(store: SqlJournalStore, within: float) -> None:
    """Refuse (exit :data:`EXIT_UNREPLICATED`) unless a standby has flushed everything the
    primary acknowledged so far (a checkpoint just read among it) within ``within`` s."""
    state = await store.wait_standby(within)
    if state.position is None:
        raise _Exit(2, "--require-standby: SQLite has no standby (no replication)")
    if not state.safe:
        raise _Exit(
            EXIT_UNREPLICATED,
            f"no standby received this checkpoint within {within:g}s ({loss_summary(state)}); "
            "not handed out: a failover now could lose the runs it covers",
        )
