"""Admission keys: what a ``RunAdmitted`` record claims, and the checks of a key and a cutoff.

agentplane 0.22.0 lets a run be admitted *idempotently*: its ``RunAdmitted`` record carries
an ``idempotency_key`` member (the message's own identity, e.g. a webhook id), and the store
claims ``(tenant, key)`` in ``run_admission`` inside the transaction that appends the
record, so a redelivered message is refused naming the run it already started. The record
is the key's home: the table is derived from it and can be rebuilt from it.

The member is an ordinary field of the record's payload, written only when the caller gives
one: an admission without a key has no ``idempotency_key`` member at all (agentplane omits
it; it never writes ``null``), so every record written before this existed keeps its bytes.
Pure code, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from agentplane_journal.core.checks import check_int, check_text

__all__ = [
    "IDEMPOTENCY_KEY",
    "MAX_ADMISSION_KEY_BYTES",
    "RUN_ADMITTED",
    "Claiming",
    "check_admission_key",
    "check_cutoff",
    "claimed_keys",
]

#: The record kind that admits a run, and its member naming the key it claims
#: (agentplane 0.22.0's ``RecordKind::RunAdmitted { idempotency_key, .. }``).
RUN_ADMITTED = "RunAdmitted"
IDEMPOTENCY_KEY = "idempotency_key"

MAX_ADMISSION_KEY_BYTES = 512
"""Longest admission key, in UTF-8 bytes (agentplane 0.22.0's limit). The key is chosen by
whoever emitted the message and becomes part of ``run_admission``'s primary key, so its size
is bounded here, with a reason, rather than by the index (PostgreSQL refuses a btree row
over about 2700 bytes, inside the transaction)."""


def check_admission_key(value: object, name: str = "idempotency_key") -> str:
    """An admission key: a non-blank string of at most :data:`MAX_ADMISSION_KEY_BYTES`.

    A blank key is refused rather than claimed, as agentplane 0.22.0 refuses it: an unset
    header or variable arrives as ``""``, and ``""`` is a perfectly good key, so the first
    message would claim it and every later, *different* message would be answered with the
    first one's run. ``None`` is refused too: an admission without a key omits the member
    (a ``null`` would be bytes agentplane never writes). NUL and lone surrogates are refused
    because PostgreSQL's ``text`` refuses them.
    """
    if value is None:
        raise TypeError(
            f"{name} is None: for an admission without a key, leave the member out of the "
            "payload (agentplane omits it; a null would be bytes it never writes)"
        )
    key = check_text(value, name)
    size = len(key.encode("utf-8"))
    if size > MAX_ADMISSION_KEY_BYTES:
        raise ValueError(
            f"{name} is {size} bytes in UTF-8; the limit is {MAX_ADMISSION_KEY_BYTES}: the "
            "key is chosen by the message's emitter and becomes part of a storage key, so "
            "its size is not theirs to decide (use the message's identity, or a digest of it)"
        )
    return key


def check_cutoff(value: object, name: str = "older_than") -> int:
    """A retirement cutoff as the store compares it: whole seconds since the Unix epoch.

    An ``int`` (seconds, as every instant the store keeps and returns: ``admitted_at``,
    ``updated_at``, a lease's expiry) or a timezone-aware ``datetime``, truncated to its
    second: stored instants are whole seconds, and truncating never moves a cutoff later
    than the caller asked, so it never retires a key claimed after the instant named. A
    naive ``datetime`` is refused: it names no instant until a timezone is chosen, and the
    store will not guess one (the machine's local zone would move the cutoff by hours).
    """
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ValueError(
                f"{name} is a naive datetime (no timezone), which names no instant: pass "
                "an aware one, e.g. datetime.now(UTC) - timedelta(days=30), or whole "
                "seconds since the Unix epoch as an int"
            )
        value = int(value.timestamp() // 1)
    elif isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be whole seconds since the Unix epoch (an int) or a "
            f"timezone-aware datetime, not {type(value).__name__}"
        )
    return check_int(value, name)


class Claiming(Protocol):
    """What :func:`claimed_keys` reads of an item: an :class:`~.append.Append` is one.

    Typed by what it reads rather than by ``Append``, because ``append.py`` imports this
    module (its constructor checks the key), and this one stays below it.
    """

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> Mapping[str, Any]: ...


def claimed_keys(items: Iterable[Claiming]) -> list[str]:
    """The admission keys a batch claims, each once, sorted.

    Sorted so that two batches claiming overlapping keys take them in one order (on
    PostgreSQL each claim holds its row until COMMIT, and opposite orders would deadlock).
    A key named twice in one batch is one claim by its run. Each key is checked again here:
    an :class:`Append`'s payload is a dict a caller could still edit after construction.
    """
    keys: set[str] = set()
    for item in items:  # a plain loop: this runs for every append, keyed or not
        if item.kind == RUN_ADMITTED and IDEMPOTENCY_KEY in item.payload:
            what = f"{RUN_ADMITTED}'s {IDEMPOTENCY_KEY}"
            keys.add(check_admission_key(item.payload[IDEMPOTENCY_KEY], what))
    return sorted(keys) if keys else []
