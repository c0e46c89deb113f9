"""The schema, as declarative SQLAlchemy 2.x models: the single description of every table.

The seven tables ``journal``, ``run_activity``, ``run_lease``, ``run_seal``, ``run_outcome``,
``run_cancel`` and ``push_delivery`` are agentplane 0.4.0's PostgreSQL schema column for
column (types, nullability, defaults, keys, index names and predicates), so a database is
shareable with agentplane's own tooling and an existing 0.4.0 database can be adopted. What
the stricter contract needs lives in additional tables (``journal_counter``, ``log_tree``); no
0.4.0 column is ever changed.

The schema is created by the Alembic migrations in ``alembic/versions`` and nowhere else:
nothing in this package calls ``create_all``. ``alembic check`` keeps models and migrations
in step; the partial-index predicates, which Alembic does not compare, are pinned by a test.
"""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agentplane_journal.core.append import EFFECT_STARTED

#: The exactly-once index's name: the one unique violation that means "this effect has
#: already started" (:mod:`agentplane_journal.db.violations` classifies by it). Defined once, here.
EFFECT_STARTED_INDEX = "journal_effect_started"
#: The exactly-once predicate: the partial unique index ``journal_effect_started`` holds the
#: rows it admits, and ``ON CONFLICT`` names it to infer that index. Defined once, here.
EFFECT_STARTED_PREDICATE = text(f"kind = '{EFFECT_STARTED}' AND effect_key IS NOT NULL")

__all__ = [
    "COLUMN_FLOORS",
    "EFFECT_STARTED_INDEX",
    "LATER_COLUMNS",
    "LEASE_HELD_PREDICATE",
    "PUSH_DUE_PREDICATE",
    "TABLE_NAMES",
    "VERSION_TABLE",
    "Base",
    "Journal",
    "JournalCounter",
    "JournalProfile",
    "LogTree",
    "PushDelivery",
    "RunActivity",
    "RunAdmission",
    "RunCancel",
    "RunLease",
    "RunOutcome",
    "RunSeal",
    "metadata",
    "run_conclusion_ordinal",
    "run_log_position",
]

#: The package's own Alembic version table, so it never collides with a host's ``alembic_version``.
VERSION_TABLE = "agentplane_journal_alembic_version"

# PostgreSQL's own default names, so that tables created by agentplane's DDL and by our
# migrations carry identical constraint names (adoption and `alembic check` both rely on it).
metadata = MetaData(
    naming_convention={
        "pk": "%(table_name)s_pkey",
        "uq": "%(table_name)s_%(column_0_N_name)s_key",
        "ix": "%(table_name)s_%(column_0_N_name)s_idx",
        "ck": "%(table_name)s_%(constraint_name)s_check",
        "fk": "%(table_name)s_%(column_0_name)s_fkey",
    }
)

#: The least value each counter and instant may hold: a ``CHECK (column >= floor)`` named
#: ``{table}_{column}_check`` (revision ``0004_checks``), which is PostgreSQL's own name for
#: agentplane 0.22.0's inline CHECKs, so a database its DDL made already has them. Two floors
#: are lower than 0.22.0's, because the store writes those values: ``journal.epoch`` 0 (an
#: append to a run that never had a lease) and ``run_seal.log_index`` 0 (each tenant's log is
#: dense from 0). ``verify --all`` reports a stored row below its floor (``audit_bounds``).
COLUMN_FLOORS: dict[str, dict[str, int]] = {
    "journal": {"seq": 1, "epoch": 0},
    "run_activity": {"updated_at": 0},
    "run_lease": {"epoch": 1, "expires_at": 0},
    "run_seal": {"log_index": 0, "sealed_at": 0},
    "run_outcome": {"ordinal": 1},
    "run_admission": {"admitted_at": 0},
    "run_cancel": {"requested_at": 0},
    "push_delivery": {"next_seq": 0, "attempts": 0, "next_attempt_at": 0},
}


def _floors(table: str) -> tuple[CheckConstraint, ...]:
    """The table's floor CHECKs (the naming convention turns ``column`` into
    ``{table}_{column}_check``)."""
    return tuple(
        CheckConstraint(f"{column} >= {floor}", name=column)
        for column, floor in COLUMN_FLOORS[table].items()
    )


#: 0.4.0's global sequences. PostgreSQL only: SQLite ignores ``Sequence``. ``run_log_position``
#: is kept for compatibility but this package does not use it (a sequence hands out values in
#: allocation order, not commit order; see ``journal_counter``).
run_log_position = Sequence("run_log_position", metadata=metadata)
run_conclusion_ordinal = Sequence("run_conclusion_ordinal", metadata=metadata)


class Base(DeclarativeBase):
    """Declarative base on the package's own ``MetaData``, separate from any host's."""

    metadata = metadata
    # Declarative types it as a FromClause (a class may be mapped to any selectable); every
    # model here is mapped to a Table of its own, by __tablename__.
    __table__: ClassVar[Table]


class Journal(Base):
    """One record of one run's hash chain. The tenant leads every key."""

    __tablename__ = "journal"
    __table_args__ = (
        PrimaryKeyConstraint("tenant", "run_id", "seq"),
        *_floors("journal"),
        # One matter's history, in order, without touching another tenant's.
        Index(
            "journal_by_case",
            "tenant",
            "case_id",
            "run_id",
            "seq",
            postgresql_where=text("case_id IS NOT NULL"),
            sqlite_where=text("case_id IS NOT NULL"),
        ),
        # Exactly-once as a constraint rather than a code path: a second EffectStarted for
        # one key in one run cannot be written, whoever writes and whatever they believe.
        Index(
            EFFECT_STARTED_INDEX,
            "tenant",
            "run_id",
            "effect_key",
            unique=True,
            postgresql_where=EFFECT_STARTED_PREDICATE,
            sqlite_where=EFFECT_STARTED_PREDICATE,
        ),
    )

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    seq: Mapped[int] = mapped_column(BigInteger, nullable=False, autoincrement=False)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    effect_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    prev_hash: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    raw: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    key_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    signature: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    case_id: Mapped[str | None] = mapped_column(Text, nullable=True)


class RunActivity(Base):
    """Last activity per run, for ``recent_runs``; its row is also the run's write mutex."""

    __tablename__ = "run_activity"
    __table_args__ = (PrimaryKeyConstraint("tenant", "run_id"), *_floors("run_activity"))

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    updated_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


# Newest activity first, ties by run id descending: the order `recent_runs` pages in.
Index(
    "run_activity_recent",
    RunActivity.tenant,
    RunActivity.updated_at.desc(),
    RunActivity.run_id.desc(),
)


#: A held lease: released rows blank the owner (``RELEASED_OWNER``). The recovery queue's
#: partial index ``run_lease_abandoned`` holds only these rows; defined once, here.
LEASE_HELD_PREDICATE = text("owner <> ''")


class RunLease(Base):
    """The fencing epoch of a run. Released leases keep their row: the epoch must survive."""

    __tablename__ = "run_lease"
    __table_args__ = (
        PrimaryKeyConstraint("tenant", "run_id"),
        *_floors("run_lease"),
        # The recovery queue (``abandoned_runs``): held leases by expiry. Partial, because
        # released rows dominate the table (every run ever leased keeps one) and the query
        # filters them all out (agentplane 0.22.0's index, same name and predicate).
        Index(
            "run_lease_abandoned",
            "tenant",
            "expires_at",
            postgresql_where=LEASE_HELD_PREDICATE,
            sqlite_where=LEASE_HELD_PREDICATE,
        ),
    )

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    owner: Mapped[str] = mapped_column(Text, nullable=False)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expires_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class RunSeal(Base):
    """The tenant's Merkle log: one row per sealed run, in ``log_index`` order."""

    __tablename__ = "run_seal"
    __table_args__ = (
        PrimaryKeyConstraint("tenant", "run_id"),
        UniqueConstraint("tenant", "log_index"),
        *_floors("run_seal"),
    )

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    chain_head: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    log_index: Mapped[int] = mapped_column(BigInteger, nullable=False)
    sealed_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    outcome: Mapped[str] = mapped_column(Text, nullable=False)


class RunOutcome(Base):
    """Derived outcome index, fed by ``RunSealed`` records inside append; last conclusion wins."""

    __tablename__ = "run_outcome"
    __table_args__ = (
        PrimaryKeyConstraint("tenant", "run_id"),
        *_floors("run_outcome"),
        Index("run_outcome_by_outcome", "tenant", "outcome", "ordinal"),
    )

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    outcome: Mapped[str] = mapped_column(Text, nullable=False)
    ordinal: Mapped[int] = mapped_column(BigInteger, nullable=False)


class RunAdmission(Base):
    """Admission keys this tenant has issued: derived from ``RunAdmitted`` records.

    Claimed inside the append that writes the run's admission record, in the same
    transaction, so the key is taken at the instant the run becomes real; the primary key is
    the arbiter between two instances admitting one message at once. Derived, not an
    authority: it can be rebuilt from the records, and ``admitted_at`` (store-observed) only
    orders retirement (agentplane 0.22.0's table, column for column).
    """

    __tablename__ = "run_admission"
    __table_args__ = (PrimaryKeyConstraint("tenant", "key"), *_floors("run_admission"))

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    key: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    admitted_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class RunCancel(Base):
    """An operator's stop request; the primary key keeps the first asker on the record."""

    __tablename__ = "run_cancel"
    __table_args__ = (PrimaryKeyConstraint("tenant", "run_id"), *_floors("run_cancel"))

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    run_id: Mapped[str] = mapped_column(Text, nullable=False)
    actor: Mapped[str] = mapped_column(Text, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    requested_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


class JournalProfile(Base):
    """The wire profile a tenant's journal is written in (revision ``0005_wire_profile``).

    No row means ``agentplane-0.4`` (every journal written before profiles were recorded);
    a row is written when a tenant is first opened in another profile, or migrated
    explicitly (``previous`` is then the profile it left, ``changed_at`` when). Per tenant,
    because a tenant is the journal: its own runs, log, origin and export.
    """

    __tablename__ = "journal_profile"
    __table_args__ = (PrimaryKeyConstraint("tenant"),)

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    profile: Mapped[str] = mapped_column(Text, nullable=False)
    previous: Mapped[str | None] = mapped_column(Text, nullable=True)
    changed_at: Mapped[int] = mapped_column(BigInteger, nullable=False)


#: A registration ``due`` may serve; parked ones are left out of ``push_delivery_due``.
PUSH_DUE_PREDICATE = text("NOT parked")


class PushDelivery(Base):
    """A webhook registration and the first journal seq its receiver has not acknowledged."""

    __tablename__ = "push_delivery"
    __table_args__ = (
        PrimaryKeyConstraint("tenant", "task_id", "config_id"),
        *_floors("push_delivery"),
        # What ``due`` scans: parked rows are left out, so they cost nothing per sweep.
        Index(
            "push_delivery_due",
            "tenant",
            "next_attempt_at",
            "task_id",
            "config_id",
            postgresql_where=PUSH_DUE_PREDICATE,
            sqlite_where=PUSH_DUE_PREDICATE,
        ),
    )

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    task_id: Mapped[str] = mapped_column(Text, nullable=False)
    config_id: Mapped[str] = mapped_column(Text, nullable=False)
    url: Mapped[str] = mapped_column(Text, nullable=False)
    token: Mapped[str | None] = mapped_column(Text, nullable=True)
    auth_scheme: Mapped[str | None] = mapped_column(Text, nullable=True)
    auth_credentials: Mapped[str | None] = mapped_column(Text, nullable=True)
    next_seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    next_attempt_at: Mapped[int] = mapped_column(
        BigInteger, nullable=False, server_default=text("0")
    )
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: Stopped with the cursor kept (a receiver that answered permanently or outlasted the
    #: retry ceiling): never served by ``due``, still naming how far its receiver got.
    parked: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))


class JournalCounter(Base):
    """Named counters handed out under a row lock, in commit order (this package's addition).

    ``log_position/{tenant}`` gives each tenant's Merkle log dense positions: the row stays
    locked until the sealing transaction commits, so the next sealer of that tenant waits and
    positions are assigned in commit order. A sequence cannot do that (its values are handed
    out in allocation order, so a late commit reorders the log and breaks every checkpoint
    taken in between). On SQLite, ``run_conclusion_ordinal`` stands in for the sequence of
    that name. Tenant names cannot contain ``/``, so counter names never collide.
    """

    __tablename__ = "journal_counter"
    __table_args__ = (PrimaryKeyConstraint("name"),)

    name: Mapped[str] = mapped_column(Text, nullable=False)
    value: Mapped[int] = mapped_column(BigInteger, nullable=False)


class LogTree(Base):
    """The tenant's Merkle tree, stored: every complete perfect subtree's hash (an addition).

    Row ``(level, idx)`` is the RFC 6962 root of leaves ``[idx * 2**level, (idx + 1) *
    2**level)``; level 0 rows are the leaf hashes, in dense log order, and name their run.
    A seal writes the rows its leaf completes in its own transaction (amortised two rows, at
    most log2 n + 1), so checkpoints and proofs read O(log n) rows instead of every leaf; see
    :mod:`agentplane_journal.tlog.tree`. The size of the log is the number of level-0 rows.
    Derived from ``run_seal`` (leaf ``i`` is the run with the ``i``-th smallest
    ``log_index``), so ``verify --all`` re-derives it and names the first position where the
    two disagree.
    """

    __tablename__ = "log_tree"
    __table_args__ = (
        PrimaryKeyConstraint("tenant", "level", "idx"),
        UniqueConstraint("tenant", "run_id"),
    )

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    level: Mapped[int] = mapped_column(Integer, nullable=False, autoincrement=False)
    idx: Mapped[int] = mapped_column(BigInteger, nullable=False, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    #: The sealed run, on level-0 rows only (NULLs never collide in the unique constraint).
    run_id: Mapped[str | None] = mapped_column(Text, nullable=True)


class LogCosignature(Base):
    """Witness cosignatures of the tenant's checkpoints (c2sp.org/tlog-cosignature; an addition).

    One row per (checkpoint size, cosigner key): the checkpoint's root, the cosigner's vkey
    (type 0x04, so a row verifies on its own), the cosignature's timestamp and its signature
    line as the witness returned it. Evidence, not derived data: a witness never cosigns an
    older size again, so a lost row cannot be re-obtained. Rows are re-verified against
    their own vkey and the checkpoint whenever they are read back
    (:mod:`agentplane_journal.journal.cosignatures`); one that does not verify is reported,
    never served.
    """

    __tablename__ = "log_cosignature"
    __table_args__ = (PrimaryKeyConstraint("tenant", "tree_size", "cosigner", "key_id"),)

    tenant: Mapped[str] = mapped_column(Text, nullable=False)
    tree_size: Mapped[int] = mapped_column(BigInteger, nullable=False, autoincrement=False)
    cosigner: Mapped[str] = mapped_column(Text, nullable=False)
    key_id: Mapped[int] = mapped_column(BigInteger, nullable=False, autoincrement=False)
    root: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    vkey: Mapped[str] = mapped_column(Text, nullable=False)
    cosigned_at: Mapped[int] = mapped_column(BigInteger, nullable=False)
    line: Mapped[str] = mapped_column(Text, nullable=False)


#: Every table this package owns (for host applications' autogenerate filters).
TABLE_NAMES: frozenset[str] = frozenset(metadata.tables) | {VERSION_TABLE}

#: Columns a later revision added to agentplane 0.4.0's tables: a table that lacks them is
#: still ours (0.4.0's shape, which that revision completes), not a host's table of our name.
LATER_COLUMNS: dict[str, frozenset[str]] = {"push_delivery": frozenset({"parked"})}
