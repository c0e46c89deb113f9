"""``agentplane-journal serve``: every tenant's log over HTTP as C2SP tlog-tiles, and an audit page.

An ASGI app (Starlette; the ``serve`` extra), read-only, over one store.

Public (hashes and signatures only; anyone may audit the log):

* ``/<tenant>/checkpoint``: the tenant's signed checkpoint note, signed per request for a
  root the server re-derived from the seals itself (:mod:`agentplane_journal.journal.served`),
  then any witness cosignatures that verify
  (:func:`~agentplane_journal.journal.tiles.cosignature_lines`), ``Cache-Control:
  no-cache``; a 500 naming the damage when the stored tree disagrees with the seals;
* ``/<tenant>/tile/<L>/<N>[.p/<W>]`` and ``/<tenant>/tile/entries/<N>[.p/<W>]``: hash tiles
  and entry bundles, each checked against that verified root before it is sent. A full
  tile never changes once complete: ``public, max-age=31536000, immutable``; a partial one
  a short ``max-age``; one the verified log does not have yet is 404;
* ``/<tenant>/`` and ``/<tenant>/run/<RUN>``: the audit page's public part
  (:mod:`agentplane_journal.web.page`): the checkpoint and its witnesses (or FAILING), a
  run's chain verdict and its inclusion proof checked against the verified checkpoint.

Private (what tenants wrote: :mod:`agentplane_journal.web.readers`): the list of tenants at
``/``, a tenant's runs (ids, outcomes, times) and a run's record bodies, only to a reader
holding a token for that tenant (``serve --reader-token-file``), never cached by shared
caches; without a token file, to nobody.

A tenant name that is not a valid, plain path segment, or names a tenant with no runs, is
404; every link on the pages is percent-encoded. A stored row that does not verify makes a
page show ``FAILING`` and a tile or checkpoint request answer 500 with the reason; it never
takes the server down.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from agentplane_journal.core.ids import RunId, validate_tenant
from agentplane_journal.errors import CorruptLogError, CorruptRecordError, StoreError
from agentplane_journal.journal.served import ServedLog
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.journal.tiles import (
    cosignature_lines,
    log_exists,
    log_tenants,
    recent_seals,
)
from agentplane_journal.tlog.checkpoint import Checkpoint, Inclusion
from agentplane_journal.tlog.note import NoteSigner
from agentplane_journal.tlog.tiles import TILE_WIDTH, parse_tile_path
from agentplane_journal.web import page
from agentplane_journal.web.readers import ALL_TENANTS, Readers, request_token

__all__ = ["FULL_TILE_CACHE", "PARTIAL_TILE_CACHE", "make_app"]

FULL_TILE_CACHE = "public, max-age=31536000, immutable"
PARTIAL_TILE_CACHE = "public, max-age=10"
CHECKPOINT_CACHE = "no-cache"
PRIVATE_CACHE = "private, no-store"
RUNS_PER_PAGE = 50
RECORDS_SHOWN = 500
_RETRIES = 5
_MAX_TENANTS = 4096  # verified logs kept in memory (one per tenant asked about)
_REALM = 'Basic realm="agentplane journal readers", charset="UTF-8"'

SignerFor = Callable[[str], NoteSigner]
"""The log key for an origin (``serve --key-name`` or, by default, the origin itself);
``ValueError`` if there can be none (an origin with a space is no key name)."""


def plain_segment(name: str) -> bool:
    """Whether a tenant name can be one path segment of a URL as it is: not ``.`` or
    ``..`` (which clients resolve away) and no ``\\`` (which browsers read as ``/``)."""
    return name not in (".", "..") and "\\" not in name


def make_app(
    store: SqlJournalStore, signer_for: SignerFor, readers: Readers | None = None
) -> Starlette:
    """The ASGI app serving ``store``'s tenants; ``store`` stays open as long as the app runs.

    ``readers``: who may read tenants' content (none by default: only the public part).
    """
    readers = readers or Readers()
    served: dict[str, ServedLog] = {}

    def served_log(log: SqlJournalStore) -> ServedLog:
        """The tenant's verified view of its log, kept across requests (bounded)."""
        if log.tenant not in served:
            if len(served) >= _MAX_TENANTS:
                served.clear()
            served[log.tenant] = ServedLog(log)
        return served[log.tenant]

    async def tenant_store(request: Request) -> SqlJournalStore | None:
        raw = request.path_params["tenant"]
        try:
            name = validate_tenant(raw)
        except ValueError:
            return None
        if name != raw or not plain_segment(name):
            return None  # one spelling per log, and one that is a plain path segment
        log = store if name == store.tenant else store.for_tenant(name)
        if name not in served and not await log_exists(log):
            return None  # no such tenant: a made-up name renders no page
        try:
            signer_for(log.origin)
        except ValueError:
            return None  # an origin no key can be named for: this log cannot be signed
        return log

    def allowed(request: Request, tenant: str) -> bool:
        return readers.may_read(request_token(request.headers), tenant)

    def damaged(exc: CorruptLogError) -> Response:
        return PlainTextResponse(f"the stored log is damaged: {exc}\n", status_code=500)

    def not_found(what: str) -> Response:
        return PlainTextResponse(f"not found: {what}\n", status_code=404)

    def html(body: str, status: int = 200, private: bool = False) -> Response:
        headers = {"Cache-Control": PRIVATE_CACHE if private else "no-cache"}
        if private:
            headers["Vary"] = "Authorization"
        return HTMLResponse(body, status_code=status, headers=headers)

    async def signed(log: SqlJournalStore, cp: Checkpoint) -> str:
        note = cp.to_signed_note(signer_for(log.origin))
        return note + "".join(await cosignature_lines(log, cp.to_note()))

    async def checkpoint(request: Request) -> Response:
        log = await tenant_store(request)
        if log is None:
            return not_found("no such log")
        try:
            cp = await served_log(log).checkpoint()
        except CorruptLogError as exc:
            return damaged(exc)
        return PlainTextResponse(
            await signed(log, cp),
            media_type="text/plain; charset=utf-8",
            headers={"Cache-Control": CHECKPOINT_CACHE},
        )

    async def tile(request: Request) -> Response:
        parsed = parse_tile_path("tile/" + request.path_params["path"])
        if parsed is None:
            return not_found("tile path")
        log = await tenant_store(request)
        if log is None:
            return not_found("no such log")
        t = parsed.tile
        try:
            data = await served_log(log).tile(t, parsed.entries)
        except CorruptLogError as exc:
            return damaged(exc)
        if data is None:
            return not_found("this tile is not in the log yet")
        return Response(
            data,
            media_type="application/octet-stream",
            headers={
                "Cache-Control": FULL_TILE_CACHE if t.width == TILE_WIDTH else PARTIAL_TILE_CACHE
            },
        )

    async def signin(request: Request) -> Response:
        if readers.tenants(request_token(request.headers)):
            return RedirectResponse(_local(request.query_params.get("next")), status_code=303)
        return HTMLResponse(
            page.public_index(bool(readers.entries)),
            status_code=401,
            headers={"WWW-Authenticate": _REALM, "Cache-Control": PRIVATE_CACHE},
        )

    async def index(request: Request) -> Response:
        mine = readers.tenants(request_token(request.headers))
        if not mine:
            return html(page.public_index(bool(readers.entries)))
        every = await log_tenants(store)
        names = every if ALL_TENANTS in mine else [t for t in every if t in mine]
        rows = []
        for name in names:
            if not plain_segment(name):
                rows.append(page.LogRow(name, None, "not a plain URL path segment: not served"))
                continue
            log = store if name == store.tenant else store.for_tenant(name)
            rows.append(await _log_row(log, served_log(log)))
        return html(page.index_page(rows), private=True)

    async def tenant_view(request: Request) -> Response:
        log = await tenant_store(request)
        if log is None:
            return not_found("no such log")
        signer = signer_for(log.origin)
        verified = served_log(log)
        try:
            cp = await verified.checkpoint()
        except CorruptLogError as exc:
            view = page.TenantView(log.tenant, log.origin, None, "", "", signer.verifier_key, [])
            view.log_detail = str(exc)
        else:
            view = page.TenantView(
                tenant=log.tenant,
                origin=log.origin,
                size=cp.size,
                root_hex=cp.root.hex(),
                note=await signed(log, cp),
                verifier_key=signer.verifier_key,
                cosignatures=await cosignature_lines(log, cp.to_note()),
            )
        private = allowed(request, log.tenant)
        view.private = not private
        if private:
            before = _bounded_int(request.query_params.get("before"))
            seals = await recent_seals(log, RUNS_PER_PAGE + 1, before=before)
            for run_id, head, position, outcome, sealed_at in seals[:RUNS_PER_PAGE]:
                head_hex = head.hex() if isinstance(head, bytes) else repr(head)
                ok, detail = await _verify_run(log, verified, run_id, head)
                view.runs.append(
                    page.RunRow(run_id, position, head_hex, outcome, ok, detail, sealed_at)
                )
            view.before = before
            last = seals[RUNS_PER_PAGE - 1][2] if len(seals) > RUNS_PER_PAGE else None
            if type(last) is int:
                view.older = last
        status = 200 if view.size is not None else 500
        return html(page.tenant_page(view), status, private=private)

    async def run_view(request: Request) -> Response:
        log = await tenant_store(request)
        if log is None:
            return not_found("no such log")
        try:
            run = RunId.parse(request.path_params["run"])
        except (TypeError, ValueError):
            return not_found("run id")
        private = allowed(request, log.tenant)
        view = page.RunView(
            tenant=log.tenant,
            run=str(run),
            records=[],
            more=False,
            chain_ok=False,
            chain_detail="",
            proof_ok=None,
            proof_detail="not sealed: not in the log yet",
            private=not private,
        )
        unreadable = None
        try:
            read = (await log.read_runs([run]))[run]
            records = read.records
            if not records and read.error is None and read.sealed is None and read.whole:
                return not_found("no such run in this log")
            if private:
                view.more = len(records) > RECORDS_SHOWN or not read.whole
                view.records = [
                    (r.seq, r.kind, r.hash.hex(), json.dumps(r.body, sort_keys=True, default=repr))
                    for r in records[:RECORDS_SHOWN]
                ]
        except (StoreError, ValueError, TypeError) as exc:
            unreadable = f"unreadable: {exc}"
        verified = served_log(log)
        view.chain_ok, view.chain_detail = await _verify_run(log, verified, str(run), None)
        if unreadable is not None:
            view.chain_ok, view.chain_detail = False, unreadable
        try:
            cp, inc = await _inclusion(log, verified, run)
        except (StoreError, ValueError, TypeError) as exc:
            view.proof_ok, view.proof_detail = False, f"no proof: {exc}"
        else:
            if inc is not None:
                view.index, view.size = inc.index, inc.size
                view.seal_hex, view.root_hex = inc.seal.hex(), cp.root.hex()
                view.proof = [p.hex() for p in inc.proof]
                view.proof_ok = inc.verify(cp.root)
                view.proof_detail = (
                    f"the sealed head is leaf {inc.index} of the checkpoint of {cp.size}"
                    if view.proof_ok
                    else "the proof does not lead to the checkpoint's root"
                )
        return html(page.run_page(view), private=private)

    async def store_error(request: Request, exc: Exception) -> Response:
        # A row the log cannot vouch for (CorruptLogError, CorruptRecordError...): the
        # page says FAILING and why; a tile or checkpoint request gets the reason as text.
        if request.url.path.endswith("/checkpoint") or "/tile/" in request.url.path:
            return PlainTextResponse(f"the stored log is damaged: {exc}\n", status_code=500)
        return HTMLResponse(page.failure_page("The log cannot be read", str(exc)), 500)

    routes = [
        Route("/", index),
        Route("/signin", signin),
        Route("/{tenant}/", tenant_view),
        Route("/{tenant}/checkpoint", checkpoint),
        Route("/{tenant}/tile/{path:path}", tile),
        Route("/{tenant}/run/{run}", run_view),
    ]
    return Starlette(routes=routes, exception_handlers={StoreError: store_error})


def _local(path: str | None) -> str:
    """Where ``/signin?next=`` may send a reader: a path on this site, else ``/`` (never
    ``//host`` or ``/\\host``, which a browser reads as another site)."""
    if (
        not path
        or not path.startswith("/")
        or path.startswith(("//", "/\\"))
        or any(ord(c) < 0x21 or c == "\\" for c in path)
        or len(path) > 2048
    ):
        return "/"
    return path


def _bounded_int(text: str | None) -> int | None:
    """A query parameter as a non-negative integer, bounded before ``int()``; else ``None``."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if value < 1 << 63 else None


async def _log_row(log: SqlJournalStore, verified: ServedLog) -> page.LogRow:
    """A tenant's line on the front page: its verified size, or the damage; failing runs."""
    try:
        cp = await verified.checkpoint()
    except CorruptLogError as exc:
        return page.LogRow(log.tenant, None, str(exc), dict(verified.failing_runs))
    return page.LogRow(log.tenant, cp.size, "", dict(verified.failing_runs))


async def _verify_run(
    log: SqlJournalStore, verified: ServedLog, run_id: object, head: object
) -> tuple[bool, str]:
    """Verify a sealed run's records against its seal; any failure is a verdict, not a crash.
    The verdict is remembered (the front page names the runs seen failing)."""
    try:
        run = RunId.parse(run_id) if isinstance(run_id, str) else None
    except (TypeError, ValueError):
        run = None
    if run is None:
        return verified.saw_run(
            repr(run_id), False, f"the seal's run id {run_id!r} is not a run id"
        )
    try:
        checked = await log.verify(run)
    except CorruptRecordError as exc:
        return verified.saw_run(str(run), False, f"seq {exc.seq}: {exc.detail}")
    except (StoreError, ValueError, TypeError) as exc:
        return verified.saw_run(str(run), False, str(exc))
    if head is not None and (not isinstance(head, bytes) or bytes(checked) != head):
        return verified.saw_run(str(run), False, "the records do not end at the sealed head")
    return verified.saw_run(str(run), True, f"head {checked.hex()}")


async def _inclusion(
    log: SqlJournalStore, served: ServedLog, run: RunId
) -> tuple[Checkpoint, Inclusion | None]:
    """A run's inclusion proof in the verified checkpoint (never in an unchecked root)."""
    for _ in range(_RETRIES):
        cp = await served.checkpoint()
        inc = await log.inclusion_proof(run)
        if inc is None or inc.size == cp.size:
            return cp, inc
    raise ValueError("the log kept growing while reading a proof; reload")
