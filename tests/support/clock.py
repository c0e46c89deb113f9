"""A settable clock, so leases lapse without sleeping."""

from __future__ import annotations

import time


class FakeClock:
    """Seconds since the epoch, moved by the test instead of by time."""

    def __init__(self, now: float | None = None) -> None:
        self.now = float(int(time.time()) if now is None else now)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
