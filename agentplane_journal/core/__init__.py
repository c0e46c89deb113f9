"""The wire format, pure: no SQLAlchemy, Alembic or driver import, no I/O."""
