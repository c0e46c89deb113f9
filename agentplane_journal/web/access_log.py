"""Each request ``serve`` answers, one line in the Common Log Format, as it completes.

``127.0.0.1 - - [04/Dec/2026:15:40:00 +0000] "GET /default/checkpoint HTTP/1.1" 200 312``:
the form every log tool reads (Apache's ``%h %l %u %t "%r" %>s %b``). An ASGI middleware
rather than uvicorn's access log, whose lines carry neither the time nor the size. The
request line is the client's raw bytes, so a hostile path can put neither a quote nor a line
break into the log (they are written ``\\xNN``); a request the app failed on is logged
``500``, as uvicorn answers it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AccessLog", "clf_line"]


def _escape(raw: bytes) -> str:
    return "".join(
        chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\x{b:02x}" for b in raw
    )


def clf_line(scope: Scope, status: int, size: int, when: float) -> str:
    """The Common Log Format line for one request (``size`` 0 is written ``-``)."""
    client = scope.get("client")
    host = client[0] if client else "-"
    raw_path = scope.get("raw_path") or str(scope.get("path", "")).encode("utf-8")
    query = scope.get("query_string") or b""
    target = raw_path + (b"?" + query if query else b"")
    method = str(scope.get("method", "-"))
    request = (
        f"{_escape(method.encode())} {_escape(target)} HTTP/{scope.get('http_version', '1.1')}"
    )
    stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(when))
    return f'{host} - - [{stamp}] "{request}" {status} {size or "-"}'


class AccessLog:
    """Wraps an ASGI app; writes one :func:`clf_line` per HTTP request to ``stream``."""

    def __init__(
        self,
        app: ASGIApp,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app, self._stream, self._clock = app, stream, clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status, size = 500, 0

        async def counting(message: Message) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            stream = self._stream if self._stream is not None else sys.stderr
            stream.write(clf_line(scope, status, size, self._clock()) + "\n")
            stream.flush()
