"""CHECK constraints on every counter and instant, named as agentplane 0.22.0 names them.

agentplane 0.22.0 declares a ``CHECK (column >= floor)`` on each of its thirteen counters and
instants (its types are unsigned; PostgreSQL has none), inline, so PostgreSQL names them
``{table}_{column}_check``. This revision adds the same constraints under the same names,
so a row edited around the application (a negative instant, a zero sequence position)
fails the edit instead of being read back:

* ``journal``: ``seq >= 1``, ``epoch >= 0``;
* ``run_activity.updated_at``, ``run_lease.expires_at``, ``run_seal.sealed_at``,
  ``run_admission.admitted_at``, ``run_cancel.requested_at`` ``>= 0``;
* ``run_lease.epoch >= 1``, ``run_outcome.ordinal >= 1``, ``run_seal.log_index >= 0``;
* ``push_delivery``: ``next_seq``, ``attempts``, ``next_attempt_at`` ``>= 0``.

Two floors are lower than 0.22.0's, because this store writes those values and 0.22.0's
floors would refuse them: ``journal.epoch`` is 0 for an append to a run that never had a
lease (agentplane 0.4.0's contract, and ours), and ``run_seal.log_index`` starts at 0
(each tenant's log is dense from 0, see ``0002_log_tree``). On a database 0.22.0's DDL
created, those two constraints (``epoch >= 1``, ``log_index >= 1``) are replaced by ours
under the same names; every other constraint it made is already ours and is kept as it is.
Everything else gains them: our databases at ``0003_contract_0_22`` and 0.4.0's.

Before any DDL the rows are counted: a table holding a value below its floor is refused
(``ValueError`` naming table, column and how many rows), nothing changed. On PostgreSQL the
constraints are added with one ``ALTER TABLE`` per table (one validating scan). SQLite
cannot add a constraint to a table, so each table is rebuilt (Alembic's batch "move and
copy") to the shape ``0003_contract_0_22`` gave it plus its constraints: every row,
default, key and index (partial predicates and descending keys included) as before. The
rebuild runs in one transaction, begun here if the driver has not begun one, so a failure
leaves no table half done.

Revision ID: 0004_checks
Revises: 0003_contract_0_22
Create Date: 2026-12-03
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import context, op

revision: str = "0004_checks"
down_revision: str | None = "0003_contract_0_22"
PREVIOUS_HEAD = "0003_contract_0_22"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: table -> column -> the least value a row may hold. Frozen here, as this revision creates
#: them; ``agentplane_journal.db.models.COLUMN_FLOORS`` is pinned to it by a test.
FLOORS: dict[str, dict[str, int]] = {
    "journal": {"seq": 1, "epoch": 0},
    "run_activity": {"updated_at": 0},
    "run_lease": {"epoch": 1, "expires_at": 0},
    "run_seal": {"log_index": 0, "sealed_at": 0},
    "run_outcome": {"ordinal": 1},
    "run_admission": {"admitted_at": 0},
    "run_cancel": {"requested_at": 0},
    "push_delivery": {"next_seq": 0, "attempts": 0, "next_attempt_at": 0},
}


def _schema() -> str | None:
    # The schema our env.py names (see 0001); None: the default schema.
    return op.get_context().opts.get("agentplane_journal_schema")


def _name(table: str, column: str) -> str:
    return f"{table}_{column}_check"  # PostgreSQL's own name for an inline column CHECK


def _condition(column: str, floor: int) -> str:
    return f"{column} >= {floor}"


def _same(a: str, b: str) -> bool:
    """Whether two CHECK expressions are the same text, ignoring parentheses and spacing
    (PostgreSQL hands ``(epoch >= 1)`` back for ``epoch >= 1``)."""
    return re.sub(r"[()\s]", "", a).lower() == re.sub(r"[()\s]", "", b).lower()


def upgrade() -> None:
    schema = _schema()
    offline = context.is_offline_mode()  # `--sql`: the previous head's shape is assumed
    existing = {} if offline else _existing_checks(schema)
    # Per table, the constraints that are missing or not ours (0.22.0's stricter two).
    todo = {
        table: [
            column
            for column, floor in columns.items()
            if not _same(
                existing.get(table, {}).get(_name(table, column), ""), _condition(column, floor)
            )
        ]
        for table, columns in FLOORS.items()
    }
    todo = {table: columns for table, columns in todo.items() if columns}
    if offline:
        op.get_context().impl.static_output(
            "-- agentplane_journal: the next statements fail if a row holds a counter or an "
            "instant below its floor (see revision 0004_checks)\n"
        )
    else:
        _refuse_violations(schema, todo)
    if op.get_context().dialect.name == "postgresql":
        for table, columns in todo.items():
            clauses = []
            for column in columns:
                name = _name(table, column)
                if name in existing.get(table, {}):
                    clauses.append(f"DROP CONSTRAINT {name}")
                clauses.append(
                    f"ADD CONSTRAINT {name} CHECK ({_condition(column, FLOORS[table][column])})"
                )
            op.execute(f"ALTER TABLE {_qualified(table, schema)} {', '.join(clauses)}")
        return
    _begin_sqlite(offline)
    with _renaming_leaves_views_alone(offline):
        for table in todo:
            _rebuild(table, checks=True, offline=offline)


def downgrade() -> None:
    from agentplane_journal.migrations.commands import refuse_dropping_records

    # What a lower revision's downgrade refuses is refused before this step too: on SQLite
    # the alembic command commits each revision by itself, so a refusal there alone would
    # leave this one done.
    refuse_dropping_records(op.get_context(), only_to_base=True)
    schema = _schema()
    offline = context.is_offline_mode()
    if not offline and _below(PREVIOUS_HEAD):
        previous = op.get_context().environment_context.script.get_revision(PREVIOUS_HEAD)
        previous.module._refuse_dropping_parked(schema)  # parked pushes would be due again
    if op.get_context().dialect.name == "postgresql":
        for table, columns in FLOORS.items():
            clauses = [f"DROP CONSTRAINT IF EXISTS {_name(table, c)}" for c in columns]
            op.execute(f"ALTER TABLE {_qualified(table, schema)} {', '.join(clauses)}")
        return
    existing = {} if offline else _existing_checks(schema)
    _begin_sqlite(offline)
    with _renaming_leaves_views_alone(offline):
        for table in FLOORS:
            if offline or existing.get(table):
                _rebuild(table, checks=False, offline=offline)


def _below(revision: str) -> bool:
    """Whether this downgrade goes below ``revision`` (to base, or to a revision before it,
    named by id; a relative target is not resolved here)."""
    env = op.get_context().environment_context
    destination = env.context_opts.get("destination_rev")
    if destination == "base":
        return True
    try:
        target = env.script.get_revision(destination)
    except Exception:  # relative (-2), or not ours: the lower revision refuses on its own
        return False
    below, step = set(), env.script.get_revision(revision)
    while step is not None and isinstance(step.down_revision, str):
        below.add(step.down_revision)
        step = env.script.get_revision(step.down_revision)
    return target is not None and target.revision in below


def _qualified(table: str, schema: str | None) -> str:
    return f"{schema}.{table}" if schema else table


def _existing_checks(schema: str | None) -> dict[str, dict[str, str]]:
    """The named CHECK constraints each table has now: name -> expression."""
    inspector = sa.inspect(op.get_bind())
    return {
        table: {
            c["name"]: c["sqltext"]
            for c in inspector.get_check_constraints(table, schema=schema)
            if c.get("name")
        }
        for table in FLOORS
    }


def _refuse_violations(schema: str | None, todo: dict[str, list[str]]) -> None:
    """Count, one statement per table, the rows below each floor to be created; refuse
    (before any DDL, so nothing is changed) if there are any, naming them."""
    found = []
    for table, columns in todo.items():
        t = sa.table(table, *(sa.column(c, sa.BigInteger()) for c in columns), schema=schema)
        counts = [
            sa.func.coalesce(sa.func.sum(sa.case((t.c[c] < FLOORS[table][c], 1), else_=0)), 0)
            for c in columns
        ]
        row = op.get_bind().execute(sa.select(*counts).select_from(t)).one()
        found += [
            f"{table}.{c}: {n} row(s) below {FLOORS[table][c]} "
            f"(SELECT * FROM {_qualified(table, schema)} WHERE {c} < {FLOORS[table][c]})"
            for c, n in zip(columns, row, strict=True)
            if n
        ]
    if found:
        raise ValueError(
            "revision 0004_checks adds a CHECK constraint on every counter and instant, but "
            f"stored rows break them: {'; '.join(found)}. Nothing was changed. No version "
            "of the store writes such values (the rows were edited around it): correct or "
            "delete them, then upgrade again."
        )


def _begin_sqlite(offline: bool) -> None:
    """Make the rebuilds one transaction: pysqlite/aiosqlite (in their default mode) only
    begin one before a data change, so the first CREATE TABLE would be on its own."""
    if offline:
        return
    driver = op.get_bind().connection.driver_connection
    if not getattr(driver, "in_transaction", True):
        op.execute("BEGIN")


@contextmanager
def _renaming_leaves_views_alone(offline: bool) -> Iterator[None]:
    """While tables are rebuilt, a rename does not re-check every view: a view over a table
    being rebuilt names a table that is missing for a moment (SQLite's own procedure for
    such changes, https://sqlite.org/lang_altertable.html#otheralter)."""
    if offline:
        yield
        return
    bind = op.get_bind()
    before = bind.exec_driver_sql("PRAGMA legacy_alter_table").scalar()
    bind.exec_driver_sql("PRAGMA legacy_alter_table = ON")
    try:
        yield
    finally:
        bind.exec_driver_sql(f"PRAGMA legacy_alter_table = {'ON' if before else 'OFF'}")


def _rebuild(table: str, *, checks: bool, offline: bool) -> None:
    """Rebuild ``table`` to its ``0003_contract_0_22`` shape, with or without its CHECKs.

    Triggers someone else put on it (a host's) go with the old table, so they are created
    again afterwards from their stored SQL.
    """
    shape = _shapes()[table]
    triggers: list[str] = []
    if not offline:
        bind = op.get_bind()
        found = [c["name"] for c in sa.inspect(bind).get_columns(table)]
        if found != [c.name for c in shape.columns]:
            raise ValueError(
                f"the SQLite table {table!r} has the columns {found}, not the "
                f"{[c.name for c in shape.columns]} revision 0004_checks rebuilds; nothing "
                "was changed. Was it altered by hand?"
            )
        triggers = list(
            bind.execute(
                sa.text(
                    "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = :t "
                    "AND sql IS NOT NULL ORDER BY name"
                ),
                {"t": table},
            ).scalars()
        )
    # The CHECKs as table_args, made here in FLOORS' order: the new table lists its
    # constraints in the order they were made (a copied table's come in set order).
    floors = FLOORS[table].items() if checks else ()
    constraints = tuple(
        sa.CheckConstraint(_condition(c, f), name=_name(table, c)) for c, f in floors
    )
    with op.batch_alter_table(table, copy_from=shape, recreate="always", table_args=constraints):
        pass
    for sql in triggers:
        op.execute(sql)


def _shapes() -> dict[str, sa.Table]:
    """The eight tables as ``0003_contract_0_22`` left them on SQLite (frozen here: later
    revisions must not change what this one rebuilds)."""
    m = sa.MetaData()

    def table(name: str, *items: sa.SchemaItem) -> sa.Table:
        return sa.Table(name, m, *items)

    def text(name: str, nullable: bool = False) -> sa.Column[str]:
        return sa.Column(name, sa.Text(), nullable=nullable)

    def big(name: str, default: str | None = None) -> sa.Column[int]:
        server_default = None if default is None else sa.text(default)
        return sa.Column(name, sa.BigInteger(), nullable=False, server_default=server_default)

    def blob(name: str, nullable: bool = False) -> sa.Column[bytes]:
        return sa.Column(name, sa.LargeBinary(), nullable=nullable)

    journal = table(
        "journal",
        text("tenant"),
        text("run_id"),
        big("seq"),
        big("epoch"),
        text("kind"),
        text("effect_key", True),
        blob("prev_hash"),
        blob("hash"),
        blob("raw"),
        text("key_id", True),
        blob("signature", True),
        text("case_id", True),
        sa.PrimaryKeyConstraint("tenant", "run_id", "seq", name="journal_pkey"),
    )
    has_case = sa.text("case_id IS NOT NULL")
    sa.Index(
        "journal_by_case",
        journal.c.tenant,
        journal.c.case_id,
        journal.c.run_id,
        journal.c.seq,
        sqlite_where=has_case,
    )
    effect_started = sa.text("kind = 'EffectStarted' AND effect_key IS NOT NULL")
    sa.Index(
        "journal_effect_started",
        journal.c.tenant,
        journal.c.run_id,
        journal.c.effect_key,
        unique=True,
        sqlite_where=effect_started,
    )
    activity = table(
        "run_activity",
        text("tenant"),
        text("run_id"),
        big("updated_at"),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_activity_pkey"),
    )
    sa.Index(
        "run_activity_recent",
        activity.c.tenant,
        activity.c.updated_at.desc(),
        activity.c.run_id.desc(),
    )
    lease = table(
        "run_lease",
        text("tenant"),
        text("run_id"),
        text("owner"),
        big("epoch"),
        big("expires_at"),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_lease_pkey"),
    )
    sa.Index(
        "run_lease_abandoned",
        lease.c.tenant,
        lease.c.expires_at,
        sqlite_where=sa.text("owner <> ''"),
    )
    table(
        "run_seal",
        text("tenant"),
        text("run_id"),
        blob("chain_head"),
        big("log_index"),
        big("sealed_at"),
        text("outcome"),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_seal_pkey"),
        sa.UniqueConstraint("tenant", "log_index", name="run_seal_tenant_log_index_key"),
    )
    outcome = table(
        "run_outcome",
        text("tenant"),
        text("run_id"),
        text("outcome"),
        big("ordinal"),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_outcome_pkey"),
    )
    sa.Index("run_outcome_by_outcome", outcome.c.tenant, outcome.c.outcome, outcome.c.ordinal)
    table(
        "run_admission",
        text("tenant"),
        text("key"),
        text("run_id"),
        big("admitted_at"),
        sa.PrimaryKeyConstraint("tenant", "key", name="run_admission_pkey"),
    )
    table(
        "run_cancel",
        text("tenant"),
        text("run_id"),
        text("actor"),
        text("reason"),
        big("requested_at"),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_cancel_pkey"),
    )
    push = table(
        "push_delivery",
        text("tenant"),
        text("task_id"),
        text("config_id"),
        text("url"),
        text("token", True),
        text("auth_scheme", True),
        text("auth_credentials", True),
        big("next_seq"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        big("next_attempt_at", "0"),
        text("last_error", True),
        sa.Column("parked", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.PrimaryKeyConstraint("tenant", "task_id", "config_id", name="push_delivery_pkey"),
    )
    sa.Index(
        "push_delivery_due",
        push.c.tenant,
        push.c.next_attempt_at,
        push.c.task_id,
        push.c.config_id,
        sqlite_where=sa.text("NOT parked"),
    )
    return dict(m.tables)
