"""An operator's view of open runs: in flight, in doubt, abandoned, stopped.

Read-only, from the journal and the lease rows (``agentplane-journal steps`` prints it). A
run is *open* while it has a ``RunAdmitted`` and no ``RunSealed``; it is then

* ``abandoned``: its lease lapsed still naming an owner (the recovery queue; a sweeper will
  take it over);
* ``in_doubt``: unleased (released when it stopped) with an effect started and unresolved:
  waiting for a decision (a reconcile function, or a person), then ``Steps.resume``;
* ``in_flight``: leased live by ``owner`` (an effect shown in doubt there may just be
  running);
* ``stopped``: unleased with nothing in doubt (its worker stopped; resume it).

A run whose records do not verify is listed as ``damaged`` with the error in ``error``
(``agentplane-journal verify RUN`` shows the damage), and the listing goes on: one damaged
run never hides the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentplane_journal.core.batch import RELEASED_OWNER
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.errors import DAMAGE
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.steps.history import RunHistory
from agentplane_journal.steps.workflow import admitted_call

__all__ = ["RunStatus", "open_runs"]


@dataclass(frozen=True, slots=True)
class RunStatus:
    run_id: RunId
    state: str
    workflow: str
    owner: str
    epoch: int
    records: int
    in_doubt: tuple[tuple[str, EffectKey], ...]
    error: str = ""


async def open_runs(store: SqlJournalStore, limit: int = 100) -> list[RunStatus]:
    """The open runs among the ``limit`` most recently active, newest first."""
    abandoned = set(await store.abandoned_runs(limit))
    found: list[RunStatus] = []
    for run, _ in await store.recent_runs(None, limit):
        try:
            records = await store.read(run)
            history = RunHistory.of(records)
            if history.admitted is None or history.conclusion is not None:
                continue
            name, _, _ = admitted_call(history.admitted)
        except DAMAGE as error:
            found.append(RunStatus(run, "damaged", "?", "", 0, 0, (), str(error)))
            continue
        lease = await store.lease_of(run)
        owner, epoch = (lease[0], lease[1]) if lease is not None else ("", 0)
        doubt = tuple((_kind(history.effects[key][0].body), key) for key in history.in_doubt())
        if run in abandoned:
            state = "abandoned"
        elif owner == RELEASED_OWNER or lease is None:
            state = "in_doubt" if doubt else "stopped"
        else:
            state = "in_flight"
        found.append(RunStatus(run, state, name, owner, epoch, len(records), doubt))
    return found


def _kind(body: dict[str, Any]) -> str:
    """The effect's kind from its ``EffectStarted`` descriptor, ``?`` if it names none."""
    descriptor = body.get("descriptor")
    kind = descriptor.get("kind") if isinstance(descriptor, dict) else None
    return kind if isinstance(kind, str) else "?"
