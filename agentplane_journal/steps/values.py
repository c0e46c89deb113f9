"""What the durable-steps layer hands back and what a user's code hands it: plain values.

* An **admission** (:class:`Fresh`, :class:`Finished`, :class:`InFlight`) is what
  ``Workflow.start`` answers: this call ran the run, or the key's run already finished (its
  recorded :class:`Outcome`), or it is still running somewhere (its id).
* A **reconciliation** (:class:`Landed`, :class:`DidNotHappen`, :class:`Unknown`) is what a
  reconcile function answers about an effect in doubt; it is journaled as an
  ``EffectReconciled`` record with agentplane's disposition (``landed``,
  ``did_not_happen``, ``in_doubt``).
* :class:`SafeToRetry` is what an effect raises when the call provably did not take effect
  (refused before dispatch, a 503 with the request intact): only then is it called again.

Pure values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from agentplane_journal.core.ids import RunId

__all__ = [
    "Admission",
    "DidNotHappen",
    "Finished",
    "Fresh",
    "InFlight",
    "Landed",
    "Outcome",
    "Reconciliation",
    "SafeToRetry",
    "Unknown",
]

R = TypeVar("R")

#: agentplane's dispositions (``core::Disposition``), as records spell them.
LANDED = "landed"
DID_NOT_HAPPEN = "did_not_happen"
IN_DOUBT = "in_doubt"

#: The conclusions this layer writes (``RunSealed.outcome``).
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"


class SafeToRetry(Exception):
    """Raise from an effect when the call surely did not take effect; it is then retried.

    Any other exception from an effect may have reached the outside world, so it is never
    retried blindly: with a reconcile function the provider is asked, without one the effect
    fails for good (``EffectFailedError`` in the workflow).
    """


@dataclass(frozen=True, slots=True)
class Landed(Generic[R]):
    """The reconcile function found the effect applied; ``result`` is what it returned."""

    result: R


@dataclass(frozen=True, slots=True)
class DidNotHappen:
    """The reconcile function found the effect not applied: it is safe to call it (once)."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """The reconcile function could not tell; the effect stays in doubt, the run stops."""

    detail: str = ""


Reconciliation = Landed[R] | DidNotHappen | Unknown


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    """A concluded run's answer, read from its ``RunSealed`` record.

    ``status`` is ``succeeded`` (``result`` is the workflow's return value, as JSON gave it
    back), ``failed`` or ``cancelled`` (``reason`` says why).
    """

    status: str
    result: R | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Fresh(Generic[R]):
    """This call admitted the run and ran it to success; ``result`` is its return value."""

    run_id: RunId
    result: R


@dataclass(frozen=True, slots=True)
class Finished(Generic[R]):
    """The key's run had already concluded; ``outcome`` is what it recorded. Nothing ran."""

    run_id: RunId
    outcome: Outcome[R]


@dataclass(frozen=True, slots=True)
class InFlight:
    """The key's run is admitted and not concluded (running, or waiting for recovery)."""

    run_id: RunId


Admission = Fresh[R] | Finished[R] | InFlight
