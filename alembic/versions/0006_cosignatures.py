"""Witness cosignatures of checkpoints (``log_cosignature``).

Additive: one new table, no earlier table touched, so agentplane 0.4.0's and 0.22.0's DDL
still replay over the schema as no-ops. Nothing to adopt: no cosignature exists before
this revision. The downgrade drops the table and with it every stored cosignature, which
no witness will give again for those sizes: `agentplane-journal receipt` files already
written keep theirs.

Revision ID: 0006_cosignatures
Revises: 0005_wire_profile
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0006_cosignatures"
down_revision: str | None = "0005_wire_profile"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    # The schema our env.py names (see 0001); None: the default schema.
    return op.get_context().opts.get("agentplane_journal_schema")


def upgrade() -> None:
    op.create_table(
        "log_cosignature",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("tree_size", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("cosigner", sa.Text(), nullable=False),
        sa.Column("key_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("root", sa.LargeBinary(), nullable=False),
        sa.Column("vkey", sa.Text(), nullable=False),
        sa.Column("cosigned_at", sa.BigInteger(), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant", "tree_size", "cosigner", "key_id", name="log_cosignature_pkey"
        ),
        schema=_schema(),
    )


def refuse_lower() -> None:
    """What a lower revision's downgrade refuses, refused before this step (and before any
    later revision's): on SQLite the alembic command commits each revision by itself, so a
    refusal there alone would leave this one done (the cosignatures dropped, and never to
    be had again)."""
    from agentplane_journal.migrations.commands import refuse_dropping_records

    refuse_dropping_records(op.get_context(), only_to_base=True)
    if not context.is_offline_mode():
        script = op.get_context().environment_context.script
        checks = script.get_revision("0004_checks").module
        if checks._below("0005_wire_profile"):  # 0005's refusal, first
            script.get_revision("0005_wire_profile").module._refuse_other_profiles(_schema())
        if checks._below(checks.PREVIOUS_HEAD):  # to 0002 or lower: 0003's refusal, first
            previous = script.get_revision(checks.PREVIOUS_HEAD).module
            previous._refuse_dropping_parked(_schema())  # parked pushes would be due again


def downgrade() -> None:
    refuse_lower()
    op.drop_table("log_cosignature", schema=_schema())
