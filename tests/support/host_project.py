"""A host application's own Alembic project with the journal's migrations added, for the host
Alembic tests and the README's host recipe."""

from __future__ import annotations

from pathlib import Path

from support.migration_tools import alembic_ok

HOST_MODELS = '''
"""The shop's own models: its own base, its own metadata."""

from sqlalchemy import BigInteger, Integer, MetaData, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention={"pk": "pk_%(table_name)s"})


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item: Mapped[str] = mapped_column(Text, nullable=False)
    amount_cents: Mapped[int] = mapped_column(BigInteger, nullable=False)
    run_id: Mapped[str | None] = mapped_column(Text)
'''


REV_1 = "s0001_orders"


REV_2 = "s0002_order_run"


HOST_REVISIONS = {
    REV_1: f'''
revision = "{REV_1}"
down_revision = None
branch_labels = None
depends_on = None

import sqlalchemy as sa
from alembic import op


def upgrade():
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item", sa.Text(), nullable=False),
        sa.Column("amount_cents", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_orders"),
    )


def downgrade():
    op.drop_table("orders")
''',
    REV_2: f'''
revision = "{REV_2}"
down_revision = "{REV_1}"
branch_labels = None
depends_on = None

import sqlalchemy as sa
from alembic import op


def upgrade():
    with op.batch_alter_table("orders") as batch:
        batch.add_column(sa.Column("run_id", sa.Text(), nullable=True))


def downgrade():
    with op.batch_alter_table("orders") as batch:
        batch.drop_column("run_id")
''',
}


# The host's own wiring of its models (not ours: every autogenerate user writes these).
HOST_OWN = [
    (
        "target_metadata = None\n",
        "from shop.models import Base\n\ntarget_metadata = Base.metadata\n",
    ),
]


#: The lines the host guide tells a host to add to its ``alembic init -t async`` env.py:
#: (the generated text they go after or replace, the text that results).
ADDITIONS = [
    (
        "from alembic import context\n",
        "from alembic import context\n"
        "from agentplane_journal.migrations.host import (\n"
        "    host_include_name,\n"
        "    host_include_object,\n"
        "    run_journal_migrations,\n"
        ")\n",
    ),
    (
        '        dialect_opts={"paramstyle": "named"},\n    )\n',
        '        dialect_opts={"paramstyle": "named"},\n    )\n'
        "    run_journal_migrations(context)\n",
    ),
    (
        "    context.configure(connection=connection, target_metadata=target_metadata)\n",
        "    context.configure(\n"
        "        connection=connection,\n"
        "        target_metadata=target_metadata,\n"
        "        include_name=host_include_name,\n"
        "        include_object=host_include_object,\n"
        "    )\n"
        "    run_journal_migrations(context)\n",
    ),
]


def edit(path: Path, edits: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for anchor, replacement in edits:
        assert text.count(anchor) == 1, f"`alembic init -t async` changed: {anchor!r}"
        text = text.replace(anchor, replacement)
    path.write_text(text)


def make_host(root: Path, url: str, *, schema: str | None = None) -> Path:
    """``alembic init -t async`` in ``root``, plus the shop's models, revisions and URL."""
    root.mkdir(parents=True)
    alembic_ok("init", "-t", "async", "migrations", cwd=root)
    (root / "shop").mkdir()
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "models.py").write_text(HOST_MODELS.lstrip())
    for name, body in HOST_REVISIONS.items():
        (root / "migrations" / "versions" / f"{name}.py").write_text(body.lstrip())
    edit(root / "migrations" / "env.py", HOST_OWN)
    ini = root / "alembic.ini"
    edit(ini, [("driver://user:pass@localhost/dbname", url.replace("%", "%%"))])
    return root


def add_journal(root: Path, *, schema: str | None = None) -> None:
    """Add exactly the host guide's lines (with ``schema=`` when the journal has its own)."""
    edits = ADDITIONS
    if schema is not None:
        edits = [(a, r.replace("(context)", f'(context, schema="{schema}")')) for a, r in edits]
    edit(root / "migrations" / "env.py", edits)
