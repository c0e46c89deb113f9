"""Encrypted data that cannot be read: a push secret without its key, payloads erased."""

from __future__ import annotations

from agentplane_journal.core.error_groups import (
    UnavailableError,
)


class SecretUnavailableError(UnavailableError):
    """An encrypted push secret cannot be decrypted: no key, wrong key, or a tampered/moved value.

    The message names the key id and the column, never the secret.
    """

    def __init__(self, key_id: str | None, column: str, detail: str) -> None:
        self.key_id = key_id
        self.column = column
        self.detail = detail
        key = "no key id" if key_id is None else f"key id {key_id!r}"
        super().__init__(f"cannot decrypt the stored {column} ({key}): {detail}")


class PayloadsErasedError(UnavailableError):
    """A thread's or a conversation's live state is in payloads this reader cannot open.

    ``what`` names it (``thread 't1'``, ``conversation 'openai-agents:s1'``), ``seq`` the
    first record whose sealed fields (``fields``) stayed sealed: their erasure scope was
    erased (an erasure is final and journaled; ``agentplane-journal erasures`` lists it), or
    this reader has no key for them (open the store with its keyring). The journal itself
    is intact; this is never tampering (a damaged envelope is ``EnvelopeRefusedError``).
    """

    def __init__(self, what: str, seq: int, fields: list[str]) -> None:
        self.what = what
        self.seq = seq
        self.fields = fields
        super().__init__(
            f"{what} cannot be read: record {seq}'s sealed {', '.join(fields)} could not be "
            "opened, because its scope was erased (see `agentplane-journal erasures`) or this "
            "reader has no key (open the store through a SealingStore with its keyring). The "
            "journal is intact; erase through the adapter (delete_thread(..., erase=True), "
            "erase()) to leave a tombstone, so the thread or conversation reads as empty"
        )
