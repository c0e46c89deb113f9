"""The store's error vocabulary.

Every error derives from :class:`StoreError` and carries its fields as attributes, so a
caller branches on the type and reads ``err.current`` instead of parsing a message. The
messages are sentences a person can act on. Bad arguments are *not* here: they are
``ValueError``/``TypeError`` raised before anything touches the database.

Attributes hold the caller's own types — ``err.run`` is the :class:`RunId` the caller passed,
``err.effect_key`` an :class:`EffectKey` — so ``err.run == run`` means what it says (ids
compare equal only to their own type, never to their text).

The distinctions matter more than the wording: a ``FencedError`` tells a stale writer to
drop the run, a ``LeaseHeldError`` tells an early one to wait; ``CommitUnknownError`` means
"may have landed", ``BackendError`` means "refused and rolled back", and an
``AppendConflictError`` "refused: another writer took that place in the chain, read the head
and retry" (never a ``DuplicateEffectError``, which is exactly-once holding).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from agentplane_journal.core.error_groups import (
    ConflictError,
    CorruptionError,
    OutcomeError,
    RefusedError,
    StoreError,
    UnavailableError,
)
from agentplane_journal.core.ids import EffectKey, RunId
from agentplane_journal.core.wire_errors import (
    CorruptRecordError,
    FencedError,
    RecordTooLargeError,
)
from agentplane_journal.tlog.witness_protocol import (
    WitnessError,
    WitnessForkedError,
    WitnessStaleError,
    WitnessUnavailableError,
)

__all__ = [
    "AppendConflictError",
    "PayloadsErasedError",
    "ConflictError",
    "CorruptionError",
    "OutcomeError",
    "RefusedError",
    "UnavailableError",
    "Database",
    "BackendError",
    "CommitUnknownError",
    "CorruptLogError",
    "CorruptRecordError",
    "CorruptRegistrationError",
    "DAMAGE",
    "DamagedRunsError",
    "DuplicateAdmissionError",
    "DuplicateEffectError",
    "FencedError",
    "LeaseHeldError",
    "LeaseNotHeldError",
    "RecordTooLargeError",
    "RunSealedError",
    "SchemaConflictError",
    "SchemaOutOfDateError",
    "SecretUnavailableError",
    "StoreError",
    "TransactionEndedError",
    "WitnessError",
    "WitnessForkedError",
    "WitnessStaleError",
    "WitnessUnavailableError",
]


def _run(run: RunId | str) -> RunId:
    """The run as a :class:`RunId`; text (``run_<ULID>``) is parsed, for callers that had it."""
    return RunId.parse(run)


@dataclass(frozen=True)
class Database:
    """The database an error's advice is about, as the command line names it.

    ``url`` is the URL the application used, its password replaced by ``***`` (``masked``
    says so) and a SQLite file's path made absolute, so the advice works from any directory;
    ``schema`` and ``tenant`` (``None``: the defaults) become ``--schema`` and ``--tenant``.
    """

    url: str
    masked: bool = False
    schema: str | None = None
    tenant: str | None = None

    def command(self, words: str, *, tenant: bool = True) -> str:
        """```agentplane-journal WORDS --url '...'``` and the options, ready to paste."""
        line = f"agentplane-journal {words} --url {shlex.quote(self.url)}"
        if self.schema is not None:
            line += f" --schema {shlex.quote(self.schema)}"
        if tenant and self.tenant not in (None, "default"):
            line += f" --tenant {shlex.quote(str(self.tenant))}"
        note = " (with the password in place of ***)" if self.masked else ""
        return f"`{line}`{note}"


def command(words: str, database: Database | None, *, tenant: bool = True) -> str:
    """Advice naming a command: for ``database`` when known, else with a placeholder."""
    if database is None:
        return f"`agentplane-journal {words} --url URL` (URL: the database's)"
    return database.command(words, tenant=tenant)


def database_of(store: object) -> Database | None:
    """A store's :class:`Database` for advice (a SQL store's ``database``), else ``None``."""
    found = getattr(store, "database", None)
    return found if isinstance(found, Database) else None


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


class CorruptLogError(CorruptionError):
    """The stored Merkle tree disagrees with the sealed runs it is derived from.

    ``position`` is the first leaf position (0-based) whose part of the tree is wrong;
    ``agentplane-journal verify --all`` finds it, ``agentplane-journal reindex-log`` rebuilds
    the stored tree from the seals.
    """

    def __init__(self, position: int, detail: str, database: Database | None = None) -> None:
        self.position = position
        self.detail = detail
        self.database = database
        super().__init__(
            f"corrupt log at position {position}: {detail}; run "
            f"{command('verify --all', database)} to see the damage and "
            f"{command('reindex-log', database)} to rebuild the tree"
        )

    def naming(self, database: Database) -> CorruptLogError:
        """This error, its advice naming ``database`` (the store that met it knows it)."""
        if self.database is not None:
            return self
        return CorruptLogError(self.position, self.detail, database)


#: The errors that mean "this run's stored data does not verify": a walk over many runs
#: reports such a run (named, with its error) and goes on with the rest, where an
#: operational error (the database unreachable, a statement refused) stops the walk.
DAMAGE: tuple[type[StoreError], ...] = (CorruptRecordError, CorruptLogError)


class DamagedRunsError(CorruptionError):
    """A call over many runs did its work on every run that verified; these did not.

    ``damaged`` pairs each run with the error its records gave (a ``CorruptRecordError`` or
    ``CorruptLogError``). Raised *after* the rest was done, so one damaged run never blocks
    the others; ``agentplane-journal verify RUN`` shows each one's damage.
    """

    def __init__(self, what: str, damaged: list[tuple[RunId, StoreError]]) -> None:
        self.damaged = tuple(damaged)
        named = "; ".join(f"{run}: {error}" for run, error in self.damaged[:5])
        more = f" (and {len(self.damaged) - 5} more)" if len(self.damaged) > 5 else ""
        super().__init__(
            f"{what} was done for every run that verified, but {len(self.damaged)} run(s) "
            f"did not and were left as they are: {named}{more}. Run `agentplane-journal "
            "verify RUN` (with the tenant's `--tenant`) on each to see the damage"
        )


class CommitUnknownError(UnavailableError):
    """The connection was lost during COMMIT: the transaction may or may not have landed."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            "the transaction's outcome is unknown: COMMIT may or may not have been applied "
            f"({detail}); read the journal back before retrying"
        )


class SchemaOutOfDateError(RefusedError):
    """The database is not at the schema revision this package version expects.

    ``newer`` is true when the database's revision is one this package does not ship: a
    newer version of the package migrated it, and the fix is upgrading the package.
    """

    def __init__(
        self,
        current: str | None,
        expected: str,
        *,
        newer: bool = False,
        elsewhere: list[str] | None = None,
        database: Database | None = None,
    ) -> None:
        self.current = current
        self.expected = expected
        self.newer = newer
        #: Other PostgreSQL schemas that hold a journal (a forgotten ``schema=``).
        self.elsewhere = list(elsewhere or [])
        #: The database the store was opened on, for the advice (``None``: not known).
        self.database = database
        if self.elsewhere:
            names = ", ".join(self.elsewhere)
            message = (
                f"no journal in this schema, but there is one in schema {names}: pass "
                f"`--schema {self.elsewhere[0]}` (schema={self.elsewhere[0]!r} to the stores and "
                "migrations); running `upgrade` here would create a second, empty journal"
            )
        elif newer:
            message = (
                f"the database is at revision {current}, newer than this version of "
                f"agentplane_journal knows (it needs revision {expected}): a newer version "
                "migrated it; upgrade the package (pip install -U agentplane-journal), "
                "not the database"
            )
        else:
            where = "has never been migrated" if current is None else f"is at revision {current}"
            message = (
                f"the database {where}, but this version of agentplane_journal needs "
                f"revision {expected}; migrate it first: {command('upgrade', database)}, or "
                "`await upgrade(url)` at start-up (a host that runs our migrations in its own "
                "Alembic environment: `alembic upgrade head`)"
            )
        super().__init__(message)

    def naming(self, database: Database) -> SchemaOutOfDateError:
        """This error, its advice naming ``database`` (the store that met it knows it)."""
        if self.database is not None:
            return self
        return SchemaOutOfDateError(
            self.current,
            self.expected,
            newer=self.newer,
            elsewhere=self.elsewhere,
            database=database,
        )


class SchemaConflictError(RefusedError):
    """A table the journal would create already exists and is not the journal's.

    Raised by the upgrade before it creates anything, so a host's own ``journal`` table
    is never half-adopted (and no version row claims a schema that is not there).
    """

    def __init__(
        self, table: str, schema: str, columns: list[str], schemas: bool, *, model: bool = False
    ) -> None:
        self.table = table
        self.schema = schema
        self.columns = list(columns)
        way_out = (  # ``schemas``: whether the database has them (the dialect's ``schemas``)
            "put the journal in a schema of its own (schema=..., --schema NAME) or rename "
            "your table"
            if schemas
            else "give the journal a database file of its own or rename your table"
        )
        if model:  # the host's Alembic metadata, before anything ran
            said = (
                f"your model's table {table!r} in schema {schema!r} is where the journal's "
                f"table of that name lives: your autogenerate could not tell them apart"
            )
        else:
            said = (
                f"table {table!r} already exists in schema {schema!r} and is not the "
                f"journal's (its columns: {', '.join(columns)}); nothing was created"
            )
        super().__init__(f"{said}: {way_out}")


class BackendError(UnavailableError):
    """The database refused or failed a statement for a reason the contract does not name."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"backend: {detail}")


class SecretUnavailableError(UnavailableError):
    """An encrypted push secret cannot be decrypted: no key, wrong key, or a tampered/moved value.

    The message names the key id and the column, never the secret.
    """

    def __init__(self, key_id: str | None, column: str, detail: str) -> None:
        self.key_id = key_id
        self.column = column
        self.detail = detail
        key = "no key id" if key_id is None else f"key id {key_id!r}"
        super().__init__(f"cannot decrypt the stored {column} ({key}): {detail}")


class CorruptRegistrationError(CorruptionError):
    """A stored push registration is not one this store can act on (a bad id or type).

    Rows are read as they are stored, so this means someone wrote the row by hand (or
    tampered with it). The message names the row, never a secret.
    """

    def __init__(self, task_id: str, config_id: str, detail: str) -> None:
        self.task_id = task_id
        self.config_id = config_id
        self.detail = detail
        super().__init__(
            f"push registration {config_id!r} of task {task_id!r} is unreadable: {detail}"
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


class ConversationBusyError(ConflictError):
    """Another writer kept a conversation claimed for longer than this change would wait.

    The framework adapters (:mod:`agentplane_journal.adapters`) change a conversation under a
    claim taken for that one change, so writers take turns instead of interleaving or forking
    its history. Nothing of this change was written. ``owner`` and ``epoch`` name the claim
    that was in the way; ``remaining_secs`` is how long it has left if its writer died.
    """

    def __init__(self, key: str, run: RunId, owner: str, epoch: int, remaining_secs: int) -> None:
        self.key = key
        self.run = _run(run)
        self.owner = owner
        self.epoch = epoch
        self.remaining_secs = remaining_secs
        super().__init__(
            f"conversation {key!r} (run {self.run}) is being changed by {owner!r} (claim "
            f"epoch {epoch}); nothing of this change was written. Retry it: a live writer "
            f"finishes in moments, a dead one's claim lapses in {remaining_secs}s"
        )


class ThreadBusyError(ConflictError):
    """A LangGraph thread is being written by another saver: refused, nothing written.

    The thread's run is leased by another writer (another process, or another
    :class:`~agentplane_journal.langgraph.JournalSaver`), or its lease was taken over while
    this saver was writing. LangGraph's own savers would have let both write and forked the
    thread's history (langchain-ai/langgraph#8796); the journal keeps one writer.
    """

    def __init__(
        self, thread_id: str, owner: str, epoch: int, remaining_secs: int, *, waited: float = 0
    ) -> None:
        self.thread_id = thread_id
        self.owner = owner
        self.epoch = epoch
        self.remaining_secs = remaining_secs
        #: How long this write waited for the thread (the saver's ``wait``).
        self.waited = waited
        after = f" after waiting {waited:g}s" if waited else ""
        super().__init__(
            f"LangGraph thread {thread_id!r} is being written by another saver ({owner!r}, "
            f"lease epoch {epoch}, {remaining_secs}s left): refused{after}, nothing written, "
            "so its history stays one line. Retry when that saver releases the thread "
            "(saver.arelease(thread_id) at the end of each request, or closing it) or its "
            "lease lapses; JournalSaver(..., wait=SECONDS) waits for it"
        )


class ThreadMovedError(ConflictError):
    """A LangGraph thread was written by someone else since this saver last read it.

    The saver read the thread at ``seen`` records, and it now has ``found``: writing on
    would fork its history from a stale state. Nothing was written; read the thread again
    (invoke the graph again) and the next write goes on from the new state.
    """

    def __init__(self, thread_id: str, seen: int, found: int) -> None:
        self.thread_id = thread_id
        self.seen = seen
        self.found = found
        super().__init__(
            f"LangGraph thread {thread_id!r} was written by another saver since this one read "
            f"it (it read {seen} records, the thread now has {found}): refused, nothing "
            "written, since writing on would fork its history. Invoke the graph again: it "
            "reads the thread's current state first"
        )


class PayloadsErasedError(UnavailableError):
    """A thread's or a conversation's live state is in payloads this reader cannot open.

    ``what`` names it (``thread 't1'``, ``conversation 'openai-agents:s1'``), ``seq`` the
    first record whose sealed fields (``fields``) stayed sealed: their erasure scope was
    erased (an erasure is final and journaled; ``agentplane-journal erasures`` lists it), or
    this reader has no key for them (open the store with its keyring). The journal itself
    is intact; this is never tampering (a damaged envelope is ``EnvelopeRefusedError``).
    """

    def __init__(self, what: str, seq: int, fields: list[str]) -> None:
        self.what = what
        self.seq = seq
        self.fields = fields
        super().__init__(
            f"{what} cannot be read: record {seq}'s sealed {', '.join(fields)} could not be "
            "opened, because its scope was erased (see `agentplane-journal erasures`) or this "
            "reader has no key (open the store through a SealingStore with its keyring). The "
            "journal is intact; erase through the adapter (delete_thread(..., erase=True), "
            "erase()) to leave a tombstone, so the thread or conversation reads as empty"
        )


class WireProfileError(RefusedError):
    """A store was opened in a wire profile other than the one its tenant's journal is in.

    ``recorded`` is the journal's profile (``agentplane-0.4`` when none was ever recorded and
    the tenant holds records), ``requested`` the one the store was opened with. Refused before
    anything was written: a journal never mixes the two byte formats by accident. Open it with
    its own profile (or ``profile=None``: the journal's own), or migrate it explicitly with
    ``SqlJournalStore.migrate_profile`` (``agentplane-journal migrate-profile``).
    """

    def __init__(
        self,
        tenant: str,
        recorded: str,
        requested: str,
        detail: str = "",
        database: Database | None = None,
    ) -> None:
        self.tenant = tenant
        self.recorded = recorded
        self.requested = requested
        self.detail = detail
        self.database = database
        super().__init__(
            f"tenant {tenant!r}'s journal is in wire profile {recorded}, but the store was "
            f"opened with profile {requested}{detail}; nothing was written. Open it with "
            f"profile={recorded!r} (or profile=None, the journal's own), or migrate it "
            f"explicitly: `await store.migrate_profile({requested!r})` "
            f"({command(f'migrate-profile {requested}', database)})"
        )

    def naming(self, database: Database) -> WireProfileError:
        """This error, its advice naming ``database`` (the store that met it knows it)."""
        if self.database is not None:
            return self
        return WireProfileError(self.tenant, self.recorded, self.requested, self.detail, database)


class PoolerError(BackendError):
    """A connection pooler ran a statement on a server connection that does not hold it.

    PgBouncer in transaction-pooling mode, reached without ``?pgbouncer=true`` on the URL:
    asyncpg's prepared statements live on one server connection, and the pooler hands the
    next transaction to another. The store names its statements uniquely per client
    connection, so such a statement is only ever *missing* there: the server refused it and
    nothing of the call was written (it is never another client's statement). Add
    ``?pgbouncer=true`` to the URL (a host's own engine:
    ``connect_args=pgbouncer_connect_args()``). ``detail`` is the driver's error.
    """

    def __init__(self, detail: str) -> None:
        self.detail = detail
        StoreError.__init__(
            self,
            "backend: a transaction-pooling connection pooler (PgBouncer, pool_mode = "
            "transaction) ran this client's statement on a server connection that does not "
            "hold it: add ?pgbouncer=true to the database URL (a host's own engine: "
            "connect_args=agentplane_journal.pgbouncer_connect_args()). The server refused "
            f"the statement, so nothing of this call was written ({detail})",
        )


class StepError(StoreError):
    """Base of the errors the durable-steps layer (:mod:`agentplane_journal.steps`) raises."""


class EffectInDoubtError(StepError, UnavailableError):
    """An effect started and recorded no result, and nothing could decide whether it landed.

    Raised instead of calling the effect again: a crash (or a failure that may have reached
    the outside world) left the journal unable to tell "never applied" from "applied, answer
    lost". The run is left open and unleased, listed as in doubt by ``agentplane-journal
    steps``; nothing more of it runs until someone decides.
    """

    def __init__(self, run: RunId, effect: str, effect_key: EffectKey, detail: str) -> None:
        self.run = _run(run)
        self.effect = effect
        self.effect_key = effect_key
        self.detail = detail
        super().__init__(
            f"effect {effect!r} (ek:{effect_key.hex()}) of run {self.run} is in doubt: {detail}. "
            "It was not called again, since it may have landed. Give the effect a reconcile= "
            "function that asks the provider (landed / did not happen / still unknown), or find "
            "out by hand and record the decision: `agentplane-journal steps settle "
            f"{self.run} {effect_key.hex()} --landed JSON | --did-not-happen --actor NAME` "
            "(or `await steps.settle(run, effect_key, Landed(result) | DidNotHappen(), "
            "actor)`), then resume the run (`agentplane-journal steps resume RUN --app "
            "MODULE:FUNCTION`, Steps.resume or a sweeper)"
        )


class EffectFailedError(StepError, OutcomeError):
    """An effect failed for good: permanently, or out of attempts; raised into the workflow.

    ``disposition`` says what the failure says about the outside world (``did_not_happen``,
    ``in_doubt``, ``landed``), as recorded in the run's ``EffectFailed`` record. A replay
    raises the same error from the record without calling the effect.
    """

    def __init__(
        self, run: RunId, effect: str, effect_key: EffectKey, error: str, disposition: str
    ) -> None:
        self.run = _run(run)
        self.effect = effect
        self.effect_key = effect_key
        self.error = error
        self.disposition = disposition
        super().__init__(
            f"effect {effect!r} (ek:{effect_key.hex()}) of run {self.run} failed for good "
            f"({disposition}): {error}; catch EffectFailedError in the workflow to take "
            "another path, or let the run conclude as failed"
        )


class RunLostError(StepError, ConflictError):
    """This worker no longer owns the run (fenced, lease not renewed, or lapsed): it stopped.

    Nothing more was done for the run after the loss was noticed; the new owner (or a
    sweeper, once the lease lapses) resumes it from its journal.
    """

    def __init__(self, run: RunId, detail: str) -> None:
        self.run = _run(run)
        self.detail = detail
        super().__init__(
            f"this worker lost run {self.run} ({detail}) and stopped working on it; do not "
            "retry here: the run's new owner, or a sweeper once the lease lapses, resumes it"
        )


class JournalUnavailableError(StepError, UnavailableError):
    """The journal could not record a step of a run: a database hiccup, not the workflow's
    failure.

    A statement that journals the run (an effect's start or result, the cancellation check,
    the conclusion, the seal) was refused or its commit was lost (``__cause__`` is the
    store's :class:`BackendError` or :class:`CommitUnknownError`). The worker stopped there
    and concluded nothing: the run stays open, its admission key answers ``InFlight``, and
    once this worker's lease lapses a sweeper resumes it from its journal (an effect that may
    have been called is reconciled, never called blindly again), or ``Steps.resume`` does.
    ``stage`` names what could not be recorded.
    """

    def __init__(self, run: RunId, stage: str, cause: BaseException) -> None:
        self.run = _run(run)
        self.stage = stage
        super().__init__(
            f"the journal could not record {stage} of run {self.run} ({cause}); the worker "
            "stopped and concluded nothing, since a database error is not the workflow's "
            "failure. The run stays open: a sweeper resumes it once this worker's lease "
            "lapses (`await steps.sweeper().drain()`), or `await steps.resume(run)` now that "
            "the database answers; an effect that may have run is reconciled, not re-run"
        )


class RunCancelledError(StepError, OutcomeError):
    """The run was stopped at a step boundary on request; it is concluded ``cancelled``."""

    def __init__(self, run: RunId, actor: str, reason: str) -> None:
        self.run = _run(run)
        self.actor = actor
        self.reason = reason
        super().__init__(
            f"run {self.run} was cancelled by {actor!r} ({reason or 'no reason given'}); it "
            "stopped between steps and is concluded and sealed as cancelled"
        )


class WorkflowNotRegisteredError(StepError, RefusedError):
    """A run's ``RunAdmitted`` names a workflow this :class:`Steps` has not registered."""

    def __init__(self, run: RunId, name: str) -> None:
        self.run = _run(run)
        self.name = name
        super().__init__(
            f"run {self.run} was admitted for workflow {name!r}, which this Steps has not "
            "registered; register it (@steps.workflow(name)) on the instance that resumes it"
        )


class WorkflowDivergedError(StepError, ConflictError):
    """A resumed workflow called a different effect at a position the journal has filled.

    Its code (or its inputs) changed between the original run and its resumption, so the
    journal's effects no longer line up with the calls: running on would perform effects the
    original run never asked for, beside ones it did. Nothing was called.
    """

    def __init__(self, run: RunId, ordinal: int, called: str, recorded: str) -> None:
        self.run = _run(run)
        self.ordinal = ordinal
        self.called = called
        self.recorded = recorded
        super().__init__(
            f"run {self.run}'s effect #{ordinal} is {recorded} in the journal, but the workflow "
            f"now calls {called} there; its code or inputs changed since the run started. "
            "Resume it with the code it started with (keep workflows deterministic between "
            "effects), or conclude it by hand"
        )
