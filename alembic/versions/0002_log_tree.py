"""The stored Merkle tree (``log_tree``), built for every log sealed before it.

Additive: one new table, no 0.4.0 table or column touched, so agentplane 0.4.0's DDL still
replays over the schema as a no-op. The data migration adopts existing logs, ours (dense
``log_index`` from 0) and agentplane 0.4.0's (sparse positions from a global sequence: leaf
order is ``log_index`` ascending), tenant by tenant, reading ``run_seal`` in pages and
keeping only the tree's frontier in memory. It runs in the upgrade's transaction, so a log
is either fully adopted or not at all.

Revision ID: 0002_log_tree
Revises: 0001_journal_schema
Create Date: 2026-12-01
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from agentplane_journal.tlog.tree import TreeBuilder

revision: str = "0002_log_tree"
down_revision: str | None = "0001_journal_schema"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PAGE = 5000


def _tables(schema: str | None) -> tuple[sa.TableClause, sa.TableClause]:
    """``run_seal`` and ``log_tree`` as the data migration reads and writes them."""
    run_seal = sa.table(
        "run_seal",
        sa.column("tenant", sa.Text()),
        sa.column("run_id", sa.Text()),
        sa.column("chain_head", sa.LargeBinary()),
        sa.column("log_index", sa.BigInteger()),
        schema=schema,
    )
    log_tree = sa.table(
        "log_tree",
        sa.column("tenant", sa.Text()),
        sa.column("level", sa.Integer()),
        sa.column("idx", sa.BigInteger()),
        sa.column("hash", sa.LargeBinary()),
        sa.column("run_id", sa.Text()),
        schema=schema,
    )
    return run_seal, log_tree


def _schema() -> str | None:
    # The schema our env.py names (see 0001); None: the default schema.
    return op.get_context().opts.get("agentplane_journal_schema")


def upgrade() -> None:
    schema = _schema()
    op.create_table(
        "log_tree",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("level", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("tenant", "level", "idx", name="log_tree_pkey"),
        sa.UniqueConstraint("tenant", "run_id", name="log_tree_tenant_run_id_key"),
        schema=schema,
    )
    if context.is_offline_mode():
        return  # `--sql`: no rows to read; run `agentplane-journal reindex-log` afterwards
    conn = op.get_bind()
    run_seal, log_tree = _tables(schema)
    tenants = conn.execute(sa.select(run_seal.c.tenant).distinct()).scalars().all()
    for tenant in tenants:
        _adopt(conn, tenant, run_seal, log_tree)
    if tenants and conn.dialect.name == "postgresql":
        # Fresh statistics for the planner: every checkpoint and proof probes this table by
        # its primary key, which a plan made while it looked empty would not do.
        op.execute(f"ANALYZE {schema}.log_tree" if schema else "ANALYZE log_tree")


def _adopt(
    conn: sa.Connection, tenant: str, run_seal: sa.TableClause, log_tree: sa.TableClause
) -> None:
    """Store the tree of ``tenant``'s log, leaf ``i`` being its ``i``-th smallest log_index."""
    builder = TreeBuilder()
    after = None
    while True:
        query = (
            sa.select(run_seal.c.run_id, run_seal.c.chain_head, run_seal.c.log_index)
            .where(run_seal.c.tenant == tenant)
            .order_by(run_seal.c.log_index)
            .limit(_PAGE)
        )
        if after is not None:
            query = query.where(run_seal.c.log_index > after)
        page = conn.execute(query).all()
        if not page:
            return
        rows = []
        for run_id, head, _ in page:
            leaf = hashlib.sha256(b"\x00" + bytes(head)).digest()
            for (level, idx), value in builder.add(leaf):
                rows.append(
                    {
                        "tenant": tenant,
                        "level": level,
                        "idx": idx,
                        "hash": value,
                        "run_id": run_id if level == 0 else None,
                    }
                )
        conn.execute(log_tree.insert(), rows)
        after = page[-1][2]


def downgrade() -> None:
    from agentplane_journal.migrations.commands import refuse_dropping_records

    # On the way to base, refuse before this step too: SQLite's DDL is not transactional,
    # so a refusal in 0001 alone would leave this one done.
    refuse_dropping_records(op.get_context(), only_to_base=True)
    op.drop_table("log_tree", schema=_schema())
