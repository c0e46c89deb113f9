"""A run's writes refused: the lease and the fence, exactly-once and at-most-once keys, a
chain position taken, a sealed run, a record too large, ``append_atomic``'s transaction ended."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    ConflictError,
    RefusedError,
)
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.errors.advice import _run


class LeaseHeldError(ConflictError):
    """Another owner holds a live lease on the run."""

    def __init__(self, run: RunId, owner: str, epoch: int, remaining_secs: int) -> None:
        self.run = _run(run)
        self.owner = owner
        self.epoch = epoch
        self.remaining_secs = remaining_secs
        super().__init__(
            f"run {self.run} is leased by {owner!r} at epoch {epoch} for another "
            f"{remaining_secs}s; retry after it lapses or is released"
        )


class LeaseNotHeldError(ConflictError):
    """A renewal found no live lease of this ``owner`` at this ``epoch``: stop working on the run.

    The lease was released (the run concluded), lapsed (anyone may have taken it) or is held
    by somebody else (somebody did). ``found`` says which, as the store saw it just after the
    refused renewal; the decision itself was the renewal's own guarded statement. Nothing
    was written: a renewal never claims a lease.
    """

    def __init__(self, run: RunId, owner: str, epoch: int, found: str = "") -> None:
        self.run = _run(run)
        self.owner = owner
        self.epoch = epoch
        self.found = found
        why = f" ({found})" if found else ""
        super().__init__(
            f"{owner!r} no longer holds the lease of run {self.run} at epoch {epoch}{why}; "
            "stop working on the run: you no longer own it, and the store fences your next "
            "append"
        )


class DuplicateEffectError(ConflictError):
    """A second ``EffectStarted`` for one effect key in one run: exactly-once holding."""

    def __init__(self, effect_key: EffectKey) -> None:
        if not isinstance(effect_key, EffectKey):
            raise TypeError(f"effect_key must be an EffectKey, not {type(effect_key).__name__}")
        self.effect_key = effect_key
        super().__init__(
            f"effect ek:{effect_key.hex()} has already started in this run; it must not run twice "
            "(reconcile it instead of starting it again)"
        )


class AppendConflictError(ConflictError):
    """An append raced another writer: the chain position it wrote was taken meanwhile.

    The journal's primary key ``(tenant, run_id, seq)`` refused the batch's rows, so nothing of
    the batch was written (the transaction, or the host's savepoint, rolled back). The run mutex
    serialises the store's own writers, so the other writer bypassed it (a statement of its own
    on the journal table, or a host's ``append_atomic`` work that inserted records itself).
    Retryable: the next append reads the new head. Distinct from :class:`DuplicateEffectError`
    (exactly-once holding), which a retry can never get past; the two are told apart by the
    constraint the database names, never guessed.
    """

    def __init__(self, run: RunId, seq: int, constraint: str) -> None:
        self.run = _run(run)
        self.seq = seq
        self.constraint = constraint
        super().__init__(
            f"append to run {self.run} raced another writer: chain position {seq} (or a later "
            f"one of the batch) was written meanwhile (unique violation on {constraint!r}); "
            "nothing of this batch was written: read the head and retry"
        )


class DuplicateAdmissionError(ConflictError):
    """A second admission under a key this tenant already issued: at-most-once holding.

    ``key`` is the admission key, ``run`` the :class:`RunId` that holds it: the answer a
    caller who retried a delivery needs (the run its first delivery started). Raised only
    for a refusal that surely did not commit: nothing of the batch was written and no key
    was spent. ``run`` may be the appending run itself, when it was already admitted under
    this key.
    """

    def __init__(self, key: str, run: RunId) -> None:
        self.key = key
        self.run = _run(run)
        super().__init__(
            f"admission key {key!r} is already held by run {self.run}; nothing of this batch "
            "was written: answer the caller with that run instead of starting another (a key "
            "is free again only once forget_admissions retires it)"
        )


class RunSealedError(ConflictError):
    """The run is sealed into the log and accepts no more appends."""

    def __init__(self, run: RunId, outcome: str) -> None:
        self.run = _run(run)
        self.outcome = outcome
        super().__init__(
            f"run {self.run} is sealed as {outcome!r}; a sealed journal accepts no appends"
        )


class TransactionEndedError(RefusedError):
    """``append_atomic``'s ``work`` ended, or tried to end, the transaction holding the run mutex.

    ``session.commit()``, ``rollback()`` or ``close()`` inside ``work`` releases the run mutex
    and the fence the append was checked under, so the batch is refused: nothing of it was
    appended. Whatever ``work`` committed itself before that stays committed. A statement that
    would end or control the transaction (``COMMIT``, ``ROLLBACK``, ``SAVEPOINT``, ... as SQL
    text) is refused before it reaches the database (``statement`` names its verb): then the
    transaction never ended, and nothing of ``work``'s writes nor of the batch is committed.
    """

    def __init__(self, run: RunId, statement: str | None = None) -> None:
        self.run = _run(run)
        self.statement = statement
        if statement is None:
            message = (
                f"append_atomic's work ended the transaction on run {self.run} (it called "
                "session.commit(), rollback() or close()), which released the run mutex and the "
                "fence; nothing of its batch was appended. Return the appends and let the store "
                "end the transaction (or, in your own session, pass session= and commit yourself)"
            )
        else:
            message = (
                f"append_atomic's work ran a {statement} statement on run {self.run}'s "
                "transaction: it would end or control the transaction that holds the run mutex "
                "and the fence, so it was refused before reaching the database, and nothing of "
                "work's writes or of its batch was committed. Write inside the transaction and "
                "return the appends; the store ends it (a savepoint of your own: "
                "session.begin_nested())"
            )
        super().__init__(message)
