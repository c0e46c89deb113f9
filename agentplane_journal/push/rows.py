"""What the push store says about rows it cannot serve: the report types and the row checks.

A registration row is read as the database holds it, and the database may have been written
by hand, by agentplane, or by an attacker. One such row must neither stop a whole tenant's
deliveries nor disappear without a word, so the reads that return many rows (``due``,
``list``) hand back the good ones in a :class:`PushListing` whose ``unavailable`` names each
row left out and why; ``re-encrypt`` says the same in its :class:`ReencryptReport`. Every reason is
a :class:`StoreError` whose message names the row, the column and the key id, never a secret.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentplane_journal.errors import CorruptRegistrationError, StoreError
from agentplane_journal.push.values import url_problem

__all__ = [
    "PushListing",
    "ReencryptReport",
    "UnreadableRegistration",
    "check_row",
    "parked_flag",
    "row_names",
]

T = TypeVar("T")

_SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class UnreadableRegistration:
    """A stored registration the store did not serve, and why.

    ``task_id`` and ``config_id`` are the row's key as stored (text; a hostile row's task id
    need not be a run id). ``error`` is a :class:`SecretUnavailableError` (a secret that does
    not open: wrong or missing key, tampered, moved, its url or auth_scheme rewritten, or
    plaintext where an encrypted value belongs) or a :class:`CorruptRegistrationError`.
    """

    task_id: str
    config_id: str
    error: StoreError

    @property
    def reason(self) -> str:
        """The error's message: what is wrong and what to do (never the secret)."""
        return str(self.error)


class PushListing(builtins.list[T], Generic[T]):
    """A list of what could be read, with ``unavailable`` naming every row left out.

    It *is* the list ``due``/``list`` always returned, so existing callers keep working; a
    worker that wants to act on bad rows (alert, ``retry`` them later, ``delete`` them)
    reads ``.unavailable``. The store also logs each one as a warning on
    ``agentplane_journal.push.store``, so none is ever dropped silently.
    """

    __slots__ = ("unavailable",)

    def __init__(
        self, items: Iterable[T] = (), unavailable: Iterable[UnreadableRegistration] = ()
    ) -> None:
        super().__init__(items)
        #: The rows that were due (or listed) but could not be read, in the store's order.
        self.unavailable: tuple[UnreadableRegistration, ...] = tuple(unavailable)

    def __repr__(self) -> str:
        return f"PushListing({builtins.list.__repr__(self)}, unavailable={self.unavailable!r})"


@dataclass(frozen=True, slots=True)
class ReencryptReport:
    """What ``reencrypt()`` did to one tenant's rows.

    ``reencrypted`` rows were rewritten under the current key and format; ``current`` rows
    already were (or hold no secret); ``changed`` rows were modified by someone else between
    the read and the rewrite and were left alone (a concurrent ``put`` wins: run it again);
    ``unavailable`` names each row whose secrets could not be opened, and why.
    """

    reencrypted: int
    current: int
    changed: int
    unavailable: tuple[UnreadableRegistration, ...]

    @property
    def complete(self) -> bool:
        """Whether every row of the tenant is now under the current key and format."""
        return not self.unavailable and not self.changed


def _shown(value: object) -> str:
    if isinstance(value, str):
        return value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."
    return f"<{type(value).__name__}>"


def row_names(row: Any) -> tuple[str, str]:
    """The row's (task_id, config_id) as text fit for a report, whatever was stored."""
    return _shown(row.task_id), _shown(row.config_id)


def _fail(row: Any, detail: str) -> CorruptRegistrationError:
    return CorruptRegistrationError(*row_names(row), detail)


def check_row(row: Any, *, cursor: bool) -> None:
    """Refuse a row whose columns are not of the types the store acts on.

    PostgreSQL enforces the column types; SQLite does not (a TEXT value in an INTEGER
    column, a BLOB in a TEXT one), and a worker must not be handed one. ``cursor`` checks
    the delivery-state columns too (``due``). The url is held to registration's rules
    (:func:`~.push_values.url_problem`); otherwise values are not re-validated against this
    version's input limits: rows agentplane wrote may exceed them and must still read.
    """
    for name in ("task_id", "config_id", "url"):
        if not isinstance(getattr(row, name), str):
            raise _fail(row, f"its {name} is not text")
    for name in ("token", "auth_scheme", "auth_credentials"):
        value = getattr(row, name)
        if value is not None and not isinstance(value, str):
            raise _fail(row, f"its {name} is not text")
    # Checked on every read as on registration: a row pointed at file:// (or at a header
    # injection) by someone who can write the table must never reach a worker.
    problem = url_problem(row.url)
    if problem is not None:
        raise _fail(row, f"its url {problem}; put() would refuse it, so the row was edited")
    if not cursor:
        return
    for name in ("next_seq", "attempts", "next_attempt_at"):
        value = getattr(row, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(row, f"its {name} is not an integer")
        # Below the column's CHECK (revision 0004_checks): the constraint was dropped and
        # the row edited; `verify --all` reports it too (audit_bounds).
        if value < 0:
            raise _fail(row, f"its {name} is negative ({value})")
    if row.last_error is not None and not isinstance(row.last_error, str):
        raise _fail(row, "its last_error is not text")
    parked_flag(row)


def parked_flag(row: Any) -> bool:
    """The row's ``parked`` flag as stored, or :class:`CorruptRegistrationError`.

    The store selects the column without SQLAlchemy's Boolean conversion, because on SQLite
    that conversion is ``bool(value)``: a flag edited to 2, 'yes' or a BLOB would read as
    some answer instead of being reported. PostgreSQL hands back True or False (NULL only
    if someone dropped the column's NOT NULL); SQLite hands back whatever was stored, and
    only the integers 0 and 1 are flags.
    """
    value = row.parked
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    if value is None:
        shown = "NULL"
    elif isinstance(value, int | float):
        shown = repr(value)
    else:
        shown = f"a {type(value).__name__}"
    raise _fail(row, f"its parked flag is {shown}, not true or false (the row was edited)")
