"""The wire profile each tenant's journal is written in: ``journal_profile``.

One row per tenant that has chosen a profile (``agentplane-0.4`` or ``agentplane-0.22``, see
``agentplane_journal.core.profile``). No row means ``agentplane-0.4``: every database written
before this revision holds 0.4.0's bytes, so the upgrade writes nothing and adopts them as
they are. Per tenant rather than per database, because a tenant is the journal (its own runs,
its own Merkle log and origin, its own export): one tenant can move to agentplane 0.22's bytes
while another stays byte-compatible with a 0.4.0 reader.

``previous`` and ``changed_at`` say where an explicit migration came from and when, so that a
journal holding records of both profiles says so, and since when.

The downgrade refuses while any tenant is recorded as ``agentplane-0.22``: without the row
that tenant would read as ``agentplane-0.4`` and accept 0.4.0 records on top of its 0.22 ones,
the accident this table exists to prevent. Nothing is changed then.

Revision ID: 0005_wire_profile
Revises: 0004_checks
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0005_wire_profile"
down_revision: str | None = "0004_checks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The profile an absent row means; frozen here as this revision defines it.
DEFAULT = "agentplane-0.4"


def _schema() -> str | None:
    # The schema our env.py names (see 0001); None: the default schema.
    return op.get_context().opts.get("agentplane_journal_schema")


def upgrade() -> None:
    op.create_table(
        "journal_profile",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("profile", sa.Text(), nullable=False),
        sa.Column("previous", sa.Text(), nullable=True),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="journal_profile_pkey"),
        schema=_schema(),
    )


def downgrade() -> None:
    from agentplane_journal.migrations.commands import refuse_dropping_records

    # On the way to base, refuse before this step too (SQLite's DDL is not transactional).
    refuse_dropping_records(op.get_context(), only_to_base=True)
    schema = _schema()
    if context.is_offline_mode():
        op.get_context().impl.static_output(
            "-- agentplane_journal: the next statement forgets every tenant's wire profile; "
            f"a tenant recorded as anything but {DEFAULT} would then accept {DEFAULT} records\n"
        )
    else:
        _refuse_other_profiles(schema)
        # What a lower revision's downgrade refuses is refused before this step too: on
        # SQLite the alembic command commits each revision by itself.
        script = op.get_context().environment_context.script
        checks = script.get_revision("0004_checks").module
        if checks._below(checks.PREVIOUS_HEAD):  # to 0002 or lower: 0003's refusal, first
            previous = script.get_revision(checks.PREVIOUS_HEAD).module
            previous._refuse_dropping_parked(schema)  # parked pushes would be due again
    op.drop_table("journal_profile", schema=schema)


def _refuse_other_profiles(schema: str | None) -> None:
    """Refuse (``ValueError``, nothing changed) while a tenant is recorded in another profile
    than the default: forgetting it would let the tenant take the default's records on top
    of its own. Also called by later revisions' downgrades that go below this one."""
    table = sa.table("journal_profile", sa.column("profile", sa.Text()), schema=schema)
    count = (
        op.get_bind()
        .execute(sa.select(sa.func.count()).select_from(table).where(table.c.profile != DEFAULT))
        .scalar_one()
    )
    if count:
        raise ValueError(
            f"{count} tenant(s) are recorded in a wire profile other than {DEFAULT}: "
            "downgrading below 0005_wire_profile forgets it, and the tenant would then "
            f"accept {DEFAULT} records on top of its own; nothing was changed. Migrate "
            f"them back first (SqlJournalStore.migrate_profile('{DEFAULT}')), or keep "
            "this revision."
        )
