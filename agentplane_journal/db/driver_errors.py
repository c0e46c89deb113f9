"""Driver errors as a caller reads them: :func:`describe` (one line naming the driver's
exception and its SQLSTATE) and :func:`quiet_rollback` (undo after a failure, ignoring a
connection already gone).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["describe", "quiet_rollback"]

# The unit of work's logger, as before these helpers moved out of db/unit.py.
log = logging.getLogger("agentplane_journal.db.unit")


def describe(exc: BaseException) -> str:
    """One line naming the driver error and its SQLSTATE, for error messages: of a
    SQLAlchemy ``DBAPIError`` (its driver's exception) or of a driver's own exception."""
    driver = getattr(exc, "orig", None) or exc
    # SQLAlchemy 2.1 hands the driver's exception over as ``driver_exception``; 2.0 keeps
    # the SQLSTATE on its adapted ``orig`` (or on the driver's exception as its cause).
    code = None
    for source in (getattr(exc, "driver_exception", None), driver, driver.__cause__, exc):
        code = getattr(source, "sqlstate", None)
        if code:
            break
    text = str(driver).strip().splitlines()[0] if str(driver).strip() else type(driver).__name__
    return f"{type(driver).__name__}{f' [{code}]' if code else ''}: {text}"


async def quiet_rollback(session: Any) -> None:
    """Roll back a session or a savepoint (if any), ignoring a connection already gone."""
    if session is None:
        return
    try:
        await session.rollback()
    except Exception:  # the connection may already be gone; the pool discards it
        log.debug("rollback after a failed unit of work failed", exc_info=True)
