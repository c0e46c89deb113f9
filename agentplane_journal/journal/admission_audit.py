"""Auditing and rebuilding ``run_admission`` from the ``RunAdmitted`` records.

The table is derived: a row ``(tenant, key, run_id)`` exists because that run's
``RunAdmitted`` record carries that key and its append claimed it. :func:`audit` compares
the two; with ``fix`` (``reindex_admissions``) it repairs what the records determine.

What is a **finding** (``AdmissionAudit.ok`` is false, ``verify --all`` exits 1):

* ``orphan-row``: a row no record backs: the run it names, read whole and verified, carries
  no admission under its key (or has no records). It would answer a genuine message with an
  unrelated run, or hold a key forever, and no honest write leaves one. The rebuild deletes
  it (and claims the key for a run that does carry it, if any).
* ``bad-row``: a row whose run id is not a run id, or (SQLite) whose key is not text. Deleted.
* ``unchecked-row``: a row whose run's records do not verify, so whether they carry the key
  cannot be said. **Kept**: deleting it could reopen a door a genuine admission closed; the
  run itself is ``verify``'s finding.
* ``bad-record``: a ``RunAdmitted`` record that fails verification (hash, columns, envelope,
  a key member that is not a string): reported, never indexed.
* ``bad-key``: a verified admission whose key no admission could claim (blank, over 512
  bytes, NUL): written by no honest writer; reported, not indexed.

What is only **reported** (counted, with a few examples; not a failure):

* ``unclaimed``: a keyed admission whose key no row holds. ``forget_admissions`` leaves
  exactly this on purpose, and the records cannot tell a retired key from a lost row. The
  rebuild claims it again, retired or not: a rebuild closes doors, never opens one. To
  retire such keys again, run ``forget-admissions`` afterwards (the rebuilt rows carry the
  rebuild's instant: when a key was first claimed is store-observed, not journaled, and the
  later instant is the one that cannot retire a key too early).
* ``shared``: a key carried by several runs: a retired key used again (the later run holds
  it), records written before the store claimed keys, or edited records. The rebuild keeps a
  row that names one of them; with none, **the earliest run id holds** (run ids are ULIDs,
  which sort by the millisecond they were minted), so every rebuild makes the same choice.

How it reads: the tenant's rows first (one statement), then every ``RunAdmitted`` record of
the tenant in pages (keys and sizes first, then the records, at most
:data:`~agentplane_journal.journal.reads.PAGE_BYTES` of them per statement), each
hash-checked and compared with its columns; then the run named by a row no admission backs
is read whole. Rows first, so an admission committing meanwhile is at worst reported as
unclaimed, never as a row without a record. Memory: one entry per key. Chain links and
signatures are ``verify``'s (per run), not this audit's: ``verify --all`` runs both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy import delete, func, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from agentplane_journal.core.admission import RUN_ADMITTED, check_admission_key
from agentplane_journal.db.dialect import Dialect
from agentplane_journal.db.models import Journal, RunAdmission
from agentplane_journal.db.statements import (
    RECORD_COLUMNS,
    page_statement,
    record_from_row,
    records_from_rows,
    stored_run,
)
from agentplane_journal.db.unit import Rollback
from agentplane_journal.errors import CorruptRecordError
from agentplane_journal.journal import reads as reads

__all__ = ["EXAMPLES", "KINDS", "SCAN_PAGE", "AdmissionAudit", "AdmissionFinding", "Unit", "audit"]

T = TypeVar("T")

#: ``RunAdmitted`` rows whose keys and sizes one statement of the scan reads.
SCAN_PAGE = 1000
#: Keys claimed per statement by the rebuild.
_CLAIM_CHUNK = 500
#: How many unclaimed or shared keys a report describes in words (all are counted).
EXAMPLES = 20

#: The findings that make an audit fail (see the module docstring).
KINDS = ("orphan-row", "bad-row", "unchecked-row", "bad-record", "bad-key")


class Unit(Protocol):
    """A unit of work of the store: ``await unit(fn)`` runs ``fn(session)`` in one."""

    def __call__(self, fn: Callable[[AsyncSession], Awaitable[T]]) -> Awaitable[T]: ...


@dataclass(frozen=True, slots=True)
class AdmissionFinding:
    """One disagreement: ``what`` is one of :data:`KINDS`; ``key`` and ``run`` as stored
    (text, or the ``repr`` of a value that is not text); ``seq`` names a record."""

    what: str
    key: str | None
    run: str
    detail: str
    seq: int | None = None
    #: The rebuild repaired it (deleted the row).
    repaired: bool = False


@dataclass(slots=True)
class AdmissionAudit:
    """What :func:`audit` found (and, for a rebuild, did)."""

    #: ``run_admission`` rows of the tenant, and keyed admission records that verified.
    rows: int = 0
    admissions: int = 0
    findings: list[AdmissionFinding] = field(default_factory=list)
    #: Keys the records carry that no row holds (retired, or lost), and keys several runs carry.
    unclaimed: int = 0
    shared: int = 0
    #: The first :data:`EXAMPLES` of each, in words.
    notes: list[str] = field(default_factory=list)
    #: A rebuild's rows written and deleted.
    claimed: int = 0
    removed: int = 0

    @property
    def ok(self) -> bool:
        """Nothing found that the table or records contradict (or the rebuild left)."""
        return all(f.repaired for f in self.findings)


def _show(value: object) -> str:
    return value if type(value) is str else repr(value)


def _row_problem(key: object, run_id: object) -> str | None:
    if type(key) is not str:
        return f"the key column holds {_show(key)[:80]}, not text"
    try:
        stored_run(run_id, "run_admission.run_id")
    except CorruptRecordError as error:
        return error.detail
    return None


async def audit(
    tenant: str,
    dialect: Dialect,
    now: Callable[[], int],
    read: Unit,
    write: Unit,
    *,
    fix: bool,
) -> AdmissionAudit:
    """Compare ``tenant``'s ``run_admission`` rows with its records (``read`` units); with
    ``fix``, repair what the records determine (``write`` units, claiming at ``now()``)."""
    report = AdmissionAudit()
    rows_stmt = select(RunAdmission.key, RunAdmission.run_id).where(RunAdmission.tenant == tenant)

    async def rows_of(session: AsyncSession) -> list[tuple[Any, Any]]:
        return [(r[0], r[1]) for r in await session.execute(rows_stmt)]

    rows = await read(rows_of)
    report.rows = len(rows)
    claims = await _scan(tenant, read, report)

    held: set[str] = set()  # keys a row that stays holds
    for key, run_id in rows:
        problem = _row_problem(key, run_id)
        if problem is None:
            if run_id in claims.get(key, ()):
                held.add(key)
                continue
            verdict, detail = await read(_checker(tenant, key, run_id))
            if verdict == "backed":  # an admission that committed after the scan read past it
                held.add(key)
                continue
            if verdict == "unreadable":
                report.findings.append(
                    AdmissionFinding(
                        "unchecked-row", key, run_id, f"kept: its run cannot be read ({detail})"
                    )
                )
                held.add(key)
                continue
            what, problem = "orphan-row", detail
        else:
            what = "bad-row"
        repaired = fix and await write(_remover(tenant, key, run_id, check=what == "orphan-row"))
        report.removed += repaired
        report.findings.append(
            AdmissionFinding(what, _show(key), _show(run_id), problem, None, repaired)
        )
        if fix and not repaired and type(key) is str:
            held.add(key)  # retired, or backed, meanwhile: left as it is

    pending: list[tuple[str, str]] = []
    for key, runs in claims.items():
        if len(runs) > 1:
            report.shared += 1
            if report.shared <= EXAMPLES:
                names = ", ".join(sorted(runs)[:5]) + (", ..." if len(runs) > 5 else "")
                report.notes.append(f"key {key!r} is carried by {len(runs)} runs: {names}")
        if key in held:
            continue
        report.unclaimed += 1
        if report.unclaimed <= EXAMPLES:
            report.notes.append(f"key {key!r} of {min(runs)} is held by no row")
        pending.append((key, min(runs)))  # the earliest run id holds
    if fix:
        for start in range(0, len(pending), _CLAIM_CHUNK):
            chunk = pending[start : start + _CLAIM_CHUNK]
            report.claimed += await write(_claimer(tenant, dialect, now, chunk))
    return report


async def _scan(tenant: str, read: Unit, report: AdmissionAudit) -> dict[str, set[str]]:
    """Every keyed ``RunAdmitted`` record of the tenant: key -> the runs carrying it."""
    claims: dict[str, set[str]] = {}
    after: tuple[Any, Any] | None = None
    while True:
        after = await read(_scan_page(tenant, after, claims, report))
        if after is None:
            return claims


def _scan_page(
    tenant: str, after: tuple[Any, Any] | None, claims: dict[str, set[str]], report: AdmissionAudit
) -> Callable[[AsyncSession], Awaitable[tuple[Any, Any] | None]]:
    position = tuple_(Journal.run_id, Journal.seq)
    mine = (Journal.tenant == tenant, Journal.kind == RUN_ADMITTED)

    async def page(session: AsyncSession) -> tuple[Any, Any] | None:
        where = [*mine]
        if after is not None:
            where.append(position > tuple_(literal(after[0]), literal(after[1])))
        sizes_stmt = (
            select(Journal.run_id, Journal.seq, func.coalesce(func.length(Journal.raw), 0))
            .where(*where)
            .order_by(Journal.run_id, Journal.seq)
            .limit(SCAN_PAGE)
        )
        sizes = (await session.execute(sizes_stmt)).all()
        start, budget = 0, reads.PAGE_BYTES
        while start < len(sizes):  # records of at most `budget` bytes (but one) per statement
            end, total = start + 1, sizes[start][2]
            while end < len(sizes) and total + sizes[end][2] <= budget:
                total, end = total + sizes[end][2], end + 1
            first, last = sizes[start], sizes[end - 1]
            stmt = (
                select(*RECORD_COLUMNS)
                .where(
                    *mine,
                    position >= tuple_(literal(first[0]), literal(first[1])),
                    position <= tuple_(literal(last[0]), literal(last[1])),
                )
                .order_by(Journal.run_id, Journal.seq)
            )
            for row in await session.execute(stmt):
                _take(row, claims, report)
            start = end
        if len(sizes) < SCAN_PAGE:
            return None
        return sizes[-1][0], sizes[-1][1]

    return page


def _take(row: Any, claims: dict[str, set[str]], report: AdmissionAudit) -> None:
    """One ``RunAdmitted`` row: verified, its key checked, then counted as a claim."""
    try:
        record = record_from_row(row)
        key = record.idempotency_key
    except CorruptRecordError as error:
        finding = AdmissionFinding("bad-record", None, _show(row[6]), error.detail, error.seq)
        report.findings.append(finding)
        return
    if key is None:
        return
    try:
        check_admission_key(key)
    except (TypeError, ValueError) as error:
        shown = key[:80]
        report.findings.append(AdmissionFinding("bad-key", shown, row[6], str(error), record.seq))
        return
    report.admissions += 1
    claims.setdefault(key, set()).add(row[6])  # the run_id column, checked against the body


def _checker(
    tenant: str, key: str, run_id: str
) -> Callable[[AsyncSession], Awaitable[tuple[str, str]]]:
    async def check(session: AsyncSession) -> tuple[str, str]:
        return await _carries(session, tenant, key, run_id)

    return check


async def _carries(session: AsyncSession, tenant: str, key: str, run_id: str) -> tuple[str, str]:
    """Whether ``run_id``'s records, read whole and verified, carry an admission under
    ``key``: ``("backed", "")``, ``("orphan", why)`` or ``("unreadable", why)``."""
    stmt, size, budget = page_statement(reads.STREAM_PAGE), reads.STREAM_PAGE, reads.PAGE_BYTES
    carry_none = "the run it names has records, and none is an admission under this key"
    at = 1
    while True:
        params = {"tenant": tenant, "run_id": run_id, "from_seq": at, "budget": budget}
        rows = (await session.execute(stmt, params)).all()
        try:
            records = records_from_rows(rows)
            if any(record.idempotency_key == key for record in records):
                return "backed", ""
        except CorruptRecordError as error:
            return "unreadable", f"seq {error.seq}: {error.detail}"
        if not records:
            return "orphan", "the run it names has no records" if at == 1 else carry_none
        if len(records) < size and sum(len(r.raw) for r in records) < budget:
            return "orphan", carry_none
        at = records[-1].seq + 1


def _remover(
    tenant: str, key: object, run_id: object, *, check: bool
) -> Callable[[AsyncSession], Awaitable[bool]]:
    """Delete one row as it was read; with ``check``, only if its run still carries no
    admission under its key, judged in the same transaction after the row is locked (a
    concurrent claim of the key waits for it; a record committed before is seen)."""
    stmt = (
        delete(RunAdmission)
        .where(
            RunAdmission.tenant == tenant,
            RunAdmission.key == key,
            RunAdmission.run_id == run_id,
        )
        .returning(RunAdmission.key)
    )

    async def remove(session: AsyncSession) -> bool:
        conn = await session.connection()
        if (await conn.execute(stmt)).first() is None:
            raise Rollback(False)  # already gone (retired meanwhile)
        if check and type(key) is str and type(run_id) is str:
            verdict, _ = await _carries(session, tenant, key, run_id)
            if verdict != "orphan":
                raise Rollback(False)
        return True

    return remove


def _claimer(
    tenant: str, dialect: Dialect, now: Callable[[], int], chunk: list[tuple[str, str]]
) -> Callable[[AsyncSession], Awaitable[int]]:
    """Claim ``(key, run_id)`` pairs no row holds; a key claimed meanwhile keeps its claim."""

    async def claim(session: AsyncSession) -> int:
        at = now()
        values = [
            {"tenant": tenant, "key": key, "run_id": run_id, "admitted_at": at}
            for key, run_id in chunk
        ]
        stmt = (
            dialect.insert(RunAdmission)
            .values(values)
            .on_conflict_do_nothing(index_elements=[RunAdmission.tenant, RunAdmission.key])
            .returning(RunAdmission.key)
        )
        conn = await session.connection()
        return len((await conn.execute(stmt)).all())

    return claim
