"""The transparency log, pure: Merkle tree and proofs, checkpoints, signed notes, tiles,
cosignatures, witness policies and protocol, receipts. No SQLAlchemy, Alembic or driver, no I/O."""
