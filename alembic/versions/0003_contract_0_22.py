"""agentplane 0.22.0's contract tables: admission keys, the recovery queue, parked pushes.

* ``run_admission``: the admission keys a tenant has issued (derived from ``RunAdmitted``
  records, claimed in the append that writes them).
* ``run_lease_abandoned``: a partial index over held leases by expiry, for
  ``abandoned_runs``.
* ``push_delivery.parked``, and ``push_delivery_due`` made partial (``WHERE NOT parked``),
  so ``due`` never serves a parked registration and a parked row costs no sweep.

Every object is agentplane 0.22.0's, by name, type and predicate, and created only when it
is missing: a database that 0.22.0's own DDL created already has them all and is adopted
without touching a row; ours at ``0002_log_tree`` and 0.4.0's gain them. The due index is
rebuilt only where it is not yet partial.

Revision ID: 0003_contract_0_22
Revises: 0002_log_tree
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0003_contract_0_22"
down_revision: str | None = "0002_log_tree"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HELD = "owner <> ''"
_DUE = "NOT parked"
_DUE_COLUMNS = ["tenant", "next_attempt_at", "task_id", "config_id"]


def _schema() -> str | None:
    # The schema our env.py names (see 0001); None: the default schema.
    return op.get_context().opts.get("agentplane_journal_schema")


def _partial(where: str) -> dict[str, sa.TextClause]:
    return {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}


def upgrade() -> None:
    schema = _schema()
    op.create_table(
        "run_admission",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("admitted_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "key", name="run_admission_pkey"),
        if_not_exists=True,
        schema=schema,
    )
    op.create_index(
        "run_lease_abandoned",
        "run_lease",
        ["tenant", "expires_at"],
        if_not_exists=True,
        schema=schema,
        **_partial(_HELD),
    )

    offline = context.is_offline_mode()  # `--sql`: the previous head's shape is assumed
    inspector = None if offline else sa.inspect(op.get_bind())
    columns = (
        set()
        if inspector is None
        else {c["name"] for c in inspector.get_columns("push_delivery", schema=schema)}
    )
    if "parked" not in columns:
        op.add_column(
            "push_delivery",
            sa.Column("parked", sa.Boolean(), server_default=sa.text("false"), nullable=False),
            schema=schema,
        )
    if inspector is None or not _due_is_partial(inspector, schema):
        op.drop_index("push_delivery_due", table_name="push_delivery", schema=schema)
        op.create_index(
            "push_delivery_due", "push_delivery", _DUE_COLUMNS, schema=schema, **_partial(_DUE)
        )


def _due_is_partial(inspector: sa.Inspector, schema: str | None) -> bool:
    """Whether ``push_delivery_due`` already has a predicate (0.22.0's DDL made it so)."""
    for index in inspector.get_indexes("push_delivery", schema=schema):
        if index["name"] == "push_delivery_due":
            options = index.get("dialect_options", {})
            return any(options.get(f"{d}_where") for d in ("postgresql", "sqlite"))
    return False


def downgrade() -> None:
    from agentplane_journal.migrations.commands import refuse_dropping_records

    # On the way to base, refuse before this step too: SQLite's DDL is not transactional,
    # so a refusal in 0001 alone would leave this one done.
    refuse_dropping_records(op.get_context(), only_to_base=True)
    schema = _schema()
    _refuse_dropping_parked(schema)
    op.drop_index("push_delivery_due", table_name="push_delivery", schema=schema)
    op.create_index("push_delivery_due", "push_delivery", _DUE_COLUMNS, schema=schema)
    op.drop_column("push_delivery", "parked", schema=schema)
    op.drop_index("run_lease_abandoned", table_name="run_lease", schema=schema)
    # Admission keys are derived from the RunAdmitted records, which stay: an upgrade
    # followed by `agentplane-journal reindex-admissions` claims them again.
    op.drop_table("run_admission", schema=schema)


def _refuse_dropping_parked(schema: str | None) -> None:
    """A parked registration would become due again without its column: refuse, say why."""
    if context.is_offline_mode():
        op.get_context().impl.static_output(
            "-- agentplane_journal: the next statements unpark every parked push registration\n"
        )
        return
    push = sa.table("push_delivery", sa.column("parked", sa.Boolean()), schema=schema)
    parked = op.get_bind().execute(
        sa.select(sa.func.count()).select_from(push).where(push.c.parked)
    )
    count = parked.scalar_one()
    if count:
        raise ValueError(
            f"{count} push registration(s) are parked: downgrading below 0003_contract_0_22 "
            "drops the column that keeps them from being delivered again; nothing was "
            "changed. Unpark them first (SqlPushStore.parked lists them, SqlPushStore.unpark "
            "re-arms one), or delete them (SqlPushStore.delete: their cursors go too)."
        )
