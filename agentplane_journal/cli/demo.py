"""`agentplane-journal demo`: the whole package working on a fresh database, in seconds.

By default the database is a new SQLite file in the current directory; given a URL
(``--url`` or ``$AGENTPLANE_JOURNAL_URL``, PostgreSQL or SQLite) it migrates that database
and writes there, but only if none of the package's tables holds a row: the demo's runs,
signed with a published key, must never mix into a real journal.

A scripted workload, not a test: it tells a new user what each guarantee looks like from
the outside (a refused duplicate effect, a fenced stale writer, a resumed run, a
cancellation, two isolated tenants, signed records), then verifies and proves what it wrote
with the same store API an operator's tooling would use. Leases lapse on an injected clock,
so nothing sleeps.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from pathlib import Path
from typing import Any

from agentplane_journal.core.append import EFFECT_STARTED, Append
from agentplane_journal.core.canon import canonical_bytes
from agentplane_journal.core.ids import CaseId, EffectKey, RunId
from agentplane_journal.core.signing import Ed25519Signer, Ed25519Verifier
from agentplane_journal.db.revision import HEAD_REVISION
from agentplane_journal.errors import (
    CorruptRecordError,
    DuplicateEffectError,
    FencedError,
    LeaseHeldError,
    LeaseNotHeldError,
)
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.migrations.commands import tables_with_rows, upgrade
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.merkle import verify_consistency

__all__ = ["DEMO_FILE", "DEMO_KEY_ID", "DemoRefused", "run_demo"]

PROG = "agentplane-journal"
URL_ENV = "AGENTPLANE_JOURNAL_URL"
DEMO_FILE = "agentplane-journal-demo.db"
#: The demo signs with a key from a fixed, published seed: anyone can forge its signatures.
DEMO_KEY_ID = "demo-key"
DEMO_SEED = hashlib.sha256(b"agentplane-journal demo key: public, never use for real").digest()


class DemoRefused(Exception):
    """The target database already holds journal rows; nothing was written to it."""


class _DemoClock:
    """Seconds since the epoch that the demo moves by hand, so a lease lapses without a sleep."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


_TRUSTED = {"provenance": [], "sensitivity": "public", "trust": "trusted"}


def _admitted(run: RunId, capability: str, case: CaseId | None = None) -> Append:
    payload = {"capability": capability, "input": {"ticket": "T-1"}, "input_label": _TRUSTED}
    return Append(run, "RunAdmitted", payload, case=case)


def _effect(
    run: RunId,
    step: int,
    kind: str,
    args: dict[str, Any],
    *,
    attempt: int = 1,
    phase: str = "forward",
) -> tuple[Append, EffectKey]:
    key = EffectKey.derive(step, phase, 0, attempt, kind, canonical_bytes(args))
    payload = {
        "descriptor": {"kind": kind, "args": args},
        "recovery": {"mode": "reconcile"},
        "mutates": True,
        "attempt": attempt,
        "backoff_ms": 0,
    }
    return Append(run, EFFECT_STARTED, payload, step=step, phase=phase, effect_key=key), key


def _done(run: RunId, step: int, key: EffectKey, output: Any, phase: str = "forward") -> Append:
    return Append(run, "EffectDone", {"output": output}, step=step, phase=phase, effect_key=key)


def _ek(key: EffectKey) -> str:
    return f"ek:{key.hex()[:8]}"


async def _conclude(store: SqlJournalStore, run: RunId, epoch: int, outcome: str) -> None:
    head = await store.head(run)
    record = Append(run, "RunSealed", {"outcome": outcome, "chain_head": head.hash.hex()})
    await store.append(epoch, [record])


async def _seal(store: SqlJournalStore, run: RunId, epoch: int, outcome: str) -> str:
    await _conclude(store, run, epoch, outcome)
    await store.seal(run, epoch, outcome)
    inc = await store.inclusion_proof(run)
    assert inc is not None
    return f"concluded {outcome!r} and sealed: leaf {inc.index} of {store.origin!r}"


def _say(text: str = "") -> None:
    print(f"  {text}" if text else "")


def _heading(text: str) -> None:
    print(f"\n{text}\n{'-' * len(text)}")


async def _effects(store: SqlJournalStore) -> RunId:
    _heading("1. A lease and exactly-once effects")
    run, case = RunId.generate(), CaseId.generate()
    lease = await store.acquire(run, "worker-a", 30)
    _say(f"{run}: worker-a holds the lease, epoch {lease.epoch}")
    charge, charge_key = _effect(run, 1, "payments.charge", {"order": "A-1001", "cents": 4200})
    await store.append(lease.epoch, [_admitted(run, "order-fulfilment", case), charge])
    await store.append(lease.epoch, [_done(run, 1, charge_key, {"charge": "ch_1"})])
    _say(f"RunAdmitted, EffectStarted payments.charge ({_ek(charge_key)}), EffectDone")
    try:
        await store.append(lease.epoch, [charge])
    except DuplicateEffectError:
        _say(f"the same effect started again ({_ek(charge_key)}): refused, DuplicateEffectError")
    else:
        raise RuntimeError("demo: a duplicate effect was accepted")
    label, label_key = _effect(run, 2, "shipping.label", {"order": "A-1001"})
    await store.append(lease.epoch, [label, _done(run, 2, label_key, {"label": "L-77"})])
    _say(f"EffectStarted shipping.label ({_ek(label_key)}), EffectDone")
    _say(await _seal(store, run, lease.epoch, "succeeded"))
    return run


async def _fencing(store: SqlJournalStore, clock: _DemoClock) -> None:
    _heading("2. A stale writer is fenced")
    run = RunId.generate()
    old = await store.acquire(run, "worker-a", 2)
    render, key = _effect(run, 1, "reports.render", {"report": "Q3"})
    await store.append(old.epoch, [_admitted(run, "reporting"), render])
    _say(f"{run}: worker-a, 2 s lease, epoch {old.epoch}: EffectStarted reports.render")
    try:
        await store.acquire(run, "worker-b", 30)
    except LeaseHeldError:
        _say("worker-b asks for the lease: LeaseHeldError (worker-a's lease is live)")
    clock.advance(1)
    await store.renew(run, "worker-a", old.epoch, 2)
    _say("1 s later worker-a's heartbeat renews it for 2 s more (renew: same epoch)")
    clock.advance(5)
    _say("5 s pass (an injected clock: no sleeping); worker-a stalls, its lease lapses")
    stranded = run in await store.abandoned_runs(10)
    _say(f"the recovery queue (abandoned_runs) lists the run: {stranded}")
    new = await store.acquire(run, "worker-b", 30)
    _say(f"worker-b takes over: epoch {new.epoch}")
    try:
        await store.renew(run, "worker-a", old.epoch, 2)
    except LeaseNotHeldError:
        _say("worker-a's next heartbeat: LeaseNotHeldError, so worker-a stops")
    else:
        raise RuntimeError("demo: a lost lease was renewed")
    try:
        await store.append(old.epoch, [_done(run, 1, key, {"pages": 12})])
    except FencedError:
        _say(f"worker-a wakes, appends under epoch {old.epoch}: FencedError, nothing written")
    else:
        raise RuntimeError("demo: a stale writer was not fenced")
    reconciled = {"disposition": "landed", "output": {"pages": 12}}
    await store.append(
        new.epoch, [Append(run, "EffectReconciled", reconciled, step=1, effect_key=key)]
    )
    _say("worker-b reconciles the in-doubt effect: EffectReconciled (landed)")
    _say(await _seal(store, run, new.epoch, "succeeded"))


async def _resume(store: SqlJournalStore) -> None:
    _heading("3. A failed run, resumed")
    run = RunId.generate()
    first = await store.acquire(run, "worker-c", 30)
    send, key = _effect(run, 1, "email.send", {"to": "ops@example.com"})
    failed = Append(
        run,
        "EffectFailed",
        {"error": "SMTP 421", "disposition": "did_not_happen"},
        step=1,
        effect_key=key,
    )
    await store.append(first.epoch, [_admitted(run, "notify"), send, failed])
    await _conclude(store, run, first.epoch, "failed")
    await store.release_lease(run, first.epoch)
    listed = run in await store.runs_by_outcome("failed", 10)
    _say(f"{run}: EffectFailed, concluded 'failed' (in `runs --outcome failed`: {listed})")
    second = await store.acquire(run, "worker-d", 30)
    retry, retry_key = _effect(run, 1, "email.send", {"to": "ops@example.com"}, attempt=2)
    note = Append(run, "Note", {"text": "resumed after the mail relay recovered"})
    await store.append(second.epoch, [note, retry, _done(run, 1, retry_key, {"id": "m-9"})])
    _say(f"worker-d resumes at epoch {second.epoch}: attempt 2 ({_ek(retry_key)}), EffectDone")
    _say(await _seal(store, run, second.epoch, "succeeded"))
    still = run in await store.runs_by_outcome("failed", 10)
    _say(
        f"now listed as failed: {still}; as succeeded: "
        f"{run in await store.runs_by_outcome('succeeded', 10)}"
    )


async def _cancel(store: SqlJournalStore) -> None:
    _heading("4. A cancellation request")
    run = RunId.generate()
    lease = await store.acquire(run, "worker-e", 30)
    book, key = _effect(run, 1, "travel.book_hotel", {"city": "Lisbon", "nights": 2})
    await store.append(
        lease.epoch, [_admitted(run, "travel"), book, _done(run, 1, key, {"ref": "H-5"})]
    )
    first = await store.request_cancel(run, "alice@example.com", "trip called off")
    second = await store.request_cancel(run, "bob@example.com", "duplicate request")
    _say(f"{run}: alice asks to stop it (recorded: {first}), bob too (recorded: {second})")
    cancel = await store.cancellation(run)
    assert cancel is not None
    undo, undo_key = _effect(run, 1, "travel.cancel_hotel", {"ref": "H-5"}, phase="compensating")
    stop = Append(run, "RunCancelled", {"actor": cancel.actor, "reason": cancel.reason})
    done = _done(run, 1, undo_key, {"refund": True}, phase="compensating")
    await store.append(lease.epoch, [undo, done, stop])
    _say(f"the worker compensates (phase compensating) and records RunCancelled by {cancel.actor}")
    _say(await _seal(store, run, lease.epoch, "cancelled"))


async def _second_tenant(acme: SqlJournalStore, other: RunId) -> None:
    _heading("5. A second tenant: acme")
    done_run, open_run = RunId.generate(), RunId.generate()
    lease = await acme.acquire(done_run, "acme-worker", 30)
    lookup, key = _effect(done_run, 1, "crm.lookup", {"customer": "C-42"})
    await acme.append(lease.epoch, [_admitted(done_run, "support"), lookup])
    await acme.append(lease.epoch, [_done(done_run, 1, key, {"tier": "gold"})])
    _say(f"{done_run}: {await _seal(acme, done_run, lease.epoch, 'succeeded')}")
    lease = await acme.acquire(open_run, "acme-worker", 30)
    reply, _ = _effect(open_run, 1, "chat.reply", {"thread": 7})
    await acme.append(lease.epoch, [_admitted(open_run, "support"), reply])
    _say(f"{open_run}: in flight, left open (not in the log)")
    seen = (await acme.head(other)).seq
    _say(f"acme sees {seen} records of default's run {other}: tenants are isolated")


async def _verify_all(handles: list[SqlJournalStore], verifier: Ed25519Verifier) -> bool:
    _heading("Verification: every run, every signature (demo key trusted)")
    ok = True
    for handle in handles:
        runs = [run for run, _ in await handle.recent_runs(None, 100)]
        records, failures = 0, []
        for run in runs:
            try:
                head = await handle.verify(run, verifier, require_signature=True)
            except CorruptRecordError as exc:
                failures.append(f"FAILED {run} seq {exc.seq}: {exc.detail}")
                continue
            records += (await handle.head(run)).seq
            inc = await handle.inclusion_proof(run)
            if inc is not None and inc.seal != head:
                failures.append(f"FAILED {run}: its records do not end at its sealed head")
        verdict = "intact, every record signed" if not failures else f"{len(failures)} FAILED"
        _say(f"tenant {handle.tenant}: {len(runs)} runs, {records} records: {verdict}")
        for line in failures:
            _say(line)
        ok = ok and not failures
    return ok


async def _proofs(store: SqlJournalStore, run: RunId, early: Checkpoint) -> bool:
    _heading("Proofs")
    cp, inc = await store.checkpoint(), await store.inclusion_proof(run)
    assert inc is not None and inc.size == cp.size  # nothing else writes to the demo file
    included = inc.verify(cp.root) and inc.seal == await store.verify(run)
    _say(f"inclusion: {run} is leaf {inc.index} of {inc.size};")
    _say(
        f"  {len(inc.proof)} proof hashes: {'verified against the root' if included else 'FAILED'}"
    )
    proof = await store.consistency_proof(early.size)
    consistent = verify_consistency(early.size, early.root, cp.size, cp.root, proof)
    _say(f"consistency: the checkpoint saved at size {early.size} is a prefix of size {cp.size};")
    _say(f"  {len(proof)} proof hashes: {'verified' if consistent else 'FAILED'}")
    return included and consistent


def _next_steps(where: str, url_option: str | None, run: RunId, public: str) -> None:
    """What to try next; ``url_option`` is the ``--url`` to show (None: it is in the env)."""
    _heading("Next")
    _say(f"The journal is in {where}. Try:")
    if url_option is None:
        _say(f"  ({URL_ENV} names it for every command)")
    else:
        _say(f"  {PROG} runs --url {shlex.quote(url_option)}")
        _say("or name the database once for every command:")
        _say(f"  export {URL_ENV}={shlex.quote(url_option)}")
    for command in (
        f"verify --all --trust {DEMO_KEY_ID}={public} --require-signature",
        "checkpoint --tenant acme",
        f"show {run}",
        f"prove {run}",
        "export --all",
    ):
        _say(f"  {PROG} {command}")


def _fresh_file(directory: Path) -> Path:
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / DEMO_FILE
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        (directory / name).unlink(missing_ok=True)
    return path


async def run_demo(
    directory: Path,
    url: str | None = None,
    *,
    shown: str | None = None,
    from_env: bool = False,
) -> int:
    """Run the workload on a fresh database and prove it.

    With no ``url``: build ``directory/agentplane-journal-demo.db`` afresh. With one: refuse
    (:class:`DemoRefused`, before writing anything, the schema included) if any of the
    package's tables already holds a row, else migrate it and write there. ``shown`` is the
    URL without its password, for every line printed; ``from_env`` says it came from
    ``$AGENTPLANE_JOURNAL_URL`` (so the suggested commands need no ``--url``).
    """
    started = time.monotonic()
    url_option: str | None
    if url is None:
        path = _fresh_file(directory)
        url = f"sqlite+aiosqlite:///{path}"
        where, url_option = str(path), url
        fresh = "new SQLite file"
    else:
        where = shown or url
        url_option = None if from_env else where
        occupied = await tables_with_rows(url)
        if occupied:
            raise DemoRefused(
                f"{where} already holds journal rows (in {', '.join(occupied)}); the demo "
                "writes only into a database with none, so that its runs never mix into a "
                f"real journal: give --url a fresh database, or run `{PROG} demo` without "
                "--url for a new SQLite file here"
            )
        fresh = "no journal rows before the demo"
    await upgrade(url)
    signer = Ed25519Signer(DEMO_KEY_ID, DEMO_SEED)
    public = signer.public_key.hex()
    print(f"{PROG} demo")
    print(f"database: {where} ({fresh}, schema {HEAD_REVISION})")
    print(f"signing key: {DEMO_KEY_ID} (Ed25519), public key {public}")
    print("  THIS IS A DEMO KEY from a fixed, published seed: anyone can sign with it.")
    print("  Never sign real records with it.")
    clock = _DemoClock()
    store = await SqlJournalStore.connect(url, signer=signer, clock=clock)
    try:
        acme = store.for_tenant("acme")
        first = await _effects(store)
        early = await store.checkpoint()
        _say(f"checkpoint saved for later: size {early.size}")
        await _fencing(store, clock)
        await _resume(store)
        await _cancel(store)
        await _second_tenant(acme, first)
        _heading("Checkpoint notes")
        for handle in (store, acme):
            _say(f"tenant {handle.tenant}:")
            for line in (await handle.checkpoint()).to_note().splitlines():
                _say(f"  {line}")
        verifier = Ed25519Verifier().trust(DEMO_KEY_ID, signer.public_key)
        ok = await _verify_all([store, acme], verifier)
        ok = await _proofs(store, first, early) and ok
    finally:
        await store.close()
    _next_steps(where, url_option, first, public)
    print(f"\n{'done' if ok else 'FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1
