"""The journal schema: agentplane 0.4.0's seven tables, plus journal_counter.

Every statement is ``IF NOT EXISTS``, on purpose: upgrading a database that agentplane's own
store already created (its DDL is 0.4.0's, which this revision reproduces exactly) adopts it
into this history without touching a row. On a fresh database it simply creates everything.

Every object goes in the schema our ``env.py`` names in the ``agentplane_journal_schema``
option (the default schema when it names none).

Revision ID: 0001_journal_schema
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_journal_schema"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("agentplane_journal",)
depends_on: str | Sequence[str] | None = None

_EFFECT_STARTED = "kind = 'EffectStarted' AND effect_key IS NOT NULL"
_HAS_CASE = "case_id IS NOT NULL"


def _schema() -> str | None:
    return op.get_context().opts.get("agentplane_journal_schema")


def _postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    schema = _schema()
    if _postgresql():
        for name in ("run_log_position", "run_conclusion_ordinal"):
            op.execute(
                sa.schema.CreateSequence(sa.Sequence(name, schema=schema), if_not_exists=True)
            )

    op.create_table(
        "journal",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("effect_key", sa.Text(), nullable=True),
        sa.Column("prev_hash", sa.LargeBinary(), nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.Column("raw", sa.LargeBinary(), nullable=False),
        sa.Column("key_id", sa.Text(), nullable=True),
        sa.Column("signature", sa.LargeBinary(), nullable=True),
        sa.Column("case_id", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "run_id", "seq", name="journal_pkey"),
        if_not_exists=True,
        schema=schema,
    )
    op.create_index(
        "journal_by_case",
        "journal",
        ["tenant", "case_id", "run_id", "seq"],
        postgresql_where=sa.text(_HAS_CASE),
        sqlite_where=sa.text(_HAS_CASE),
        if_not_exists=True,
        schema=schema,
    )
    op.create_index(
        "journal_effect_started",
        "journal",
        ["tenant", "run_id", "effect_key"],
        unique=True,
        postgresql_where=sa.text(_EFFECT_STARTED),
        sqlite_where=sa.text(_EFFECT_STARTED),
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "run_activity",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_activity_pkey"),
        if_not_exists=True,
        schema=schema,
    )
    op.create_index(
        "run_activity_recent",
        "run_activity",
        ["tenant", sa.text("updated_at DESC"), sa.text("run_id DESC")],
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "run_lease",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_lease_pkey"),
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "run_seal",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("chain_head", sa.LargeBinary(), nullable=False),
        sa.Column("log_index", sa.BigInteger(), nullable=False),
        sa.Column("sealed_at", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_seal_pkey"),
        sa.UniqueConstraint("tenant", "log_index", name="run_seal_tenant_log_index_key"),
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "run_outcome",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("ordinal", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_outcome_pkey"),
        if_not_exists=True,
        schema=schema,
    )
    op.create_index(
        "run_outcome_by_outcome",
        "run_outcome",
        ["tenant", "outcome", "ordinal"],
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "run_cancel",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requested_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "run_id", name="run_cancel_pkey"),
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "push_delivery",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("task_id", sa.Text(), nullable=False),
        sa.Column("config_id", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("token", sa.Text(), nullable=True),
        sa.Column("auth_scheme", sa.Text(), nullable=True),
        sa.Column("auth_credentials", sa.Text(), nullable=True),
        sa.Column("next_seq", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "task_id", "config_id", name="push_delivery_pkey"),
        if_not_exists=True,
        schema=schema,
    )
    op.create_index(
        "push_delivery_due",
        "push_delivery",
        ["tenant", "next_attempt_at", "task_id", "config_id"],
        if_not_exists=True,
        schema=schema,
    )

    op.create_table(
        "journal_counter",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="journal_counter_pkey"),
        if_not_exists=True,
        schema=schema,
    )


def downgrade() -> None:
    from agentplane_journal.migrations.commands import refuse_dropping_records

    refuse_dropping_records(op.get_context())  # a journal with records: only when told
    schema = _schema()
    op.drop_table("journal_counter", schema=schema)
    op.drop_index("push_delivery_due", table_name="push_delivery", schema=schema)
    op.drop_table("push_delivery", schema=schema)
    op.drop_table("run_cancel", schema=schema)
    op.drop_index("run_outcome_by_outcome", table_name="run_outcome", schema=schema)
    op.drop_table("run_outcome", schema=schema)
    op.drop_table("run_seal", schema=schema)
    op.drop_table("run_lease", schema=schema)
    op.drop_index("run_activity_recent", table_name="run_activity", schema=schema)
    op.drop_table("run_activity", schema=schema)
    op.drop_index("journal_effect_started", table_name="journal", schema=schema)
    op.drop_index("journal_by_case", table_name="journal", schema=schema)
    op.drop_table("journal", schema=schema)
    if _postgresql():
        for name in ("run_conclusion_ordinal", "run_log_position"):
            op.execute(sa.schema.DropSequence(sa.Sequence(name, schema=schema), if_exists=True))
