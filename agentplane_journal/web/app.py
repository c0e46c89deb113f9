"""``agentplane-journal serve``: every tenant's log over HTTP as C2SP tlog-tiles, and an audit page.

An ASGI app (Starlette; the ``serve`` extra), read-only, over one store:

* ``/<tenant>/checkpoint``: the tenant's signed checkpoint note (signed per request with the
  log's key, then any witness cosignatures:
  :func:`~agentplane_journal.journal.tiles.cosignature_lines`),
  ``Cache-Control: no-cache`` (the one mutable resource; the spec asks for no caching
  beyond a few seconds);
* ``/<tenant>/tile/<L>/<N>[.p/<W>]`` and ``/<tenant>/tile/entries/<N>[.p/<W>]``: hash tiles
  and entry bundles read from the stored tree. A full tile never changes once complete:
  ``public, max-age=31536000, immutable``; a partial one belongs to one size and is
  replaced by wider ones: a short ``max-age``. A tile the current log does not have yet is
  404 (a client falls back to the full tile, as the spec says);
* ``/``, ``/<tenant>/`` and ``/<tenant>/run/<RUN>``: the audit page
  (:mod:`agentplane_journal.web.page`): the latest checkpoint and its witnesses, recent
  sealed runs each verified, a run's records and its inclusion proof checked against the
  checkpoint.

A stored row that does not verify makes a page show ``FAILING`` and a tile request answer
500 with the reason; it never takes the server down.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from agentplane_journal.core.checkpoint import Checkpoint, Inclusion
from agentplane_journal.core.ids import RunId, validate_tenant
from agentplane_journal.core.note import NoteSigner
from agentplane_journal.core.tiles import TILE_WIDTH, parse_tile_path
from agentplane_journal.errors import CorruptLogError, CorruptRecordError, StoreError
from agentplane_journal.journal.served import ServedLog
from agentplane_journal.journal.store import SqlJournalStore
from agentplane_journal.journal.tiles import cosignature_lines, log_tenants, recent_seals
from agentplane_journal.web import page

__all__ = ["FULL_TILE_CACHE", "PARTIAL_TILE_CACHE", "make_app"]

FULL_TILE_CACHE = "public, max-age=31536000, immutable"
PARTIAL_TILE_CACHE = "public, max-age=10"
CHECKPOINT_CACHE = "no-cache"
RECENT_RUNS = 50
RECORDS_SHOWN = 500
_RETRIES = 5

SignerFor = Callable[[str], NoteSigner]
"""The log key for an origin (``serve --key-name`` or, by default, the origin itself)."""


def make_app(store: SqlJournalStore, signer_for: SignerFor) -> Starlette:
    """The ASGI app serving ``store``'s tenants; ``store`` stays open as long as the app runs."""

    def tenant_store(request: Request) -> SqlJournalStore | None:
        try:
            name = validate_tenant(request.path_params["tenant"])
        except ValueError:
            return None
        if name != request.path_params["tenant"]:
            return None  # one spelling per log
        return store if name == store.tenant else store.for_tenant(name)

    served: dict[str, ServedLog] = {}

    def served_log(log: SqlJournalStore) -> ServedLog:
        """The tenant's verified view of its log, kept across requests (bounded)."""
        if log.tenant not in served:
            if len(served) >= 4096:
                served.clear()
            served[log.tenant] = ServedLog(log)
        return served[log.tenant]

    def damaged(exc: CorruptLogError) -> Response:
        return PlainTextResponse(f"the stored log is damaged: {exc}\n", status_code=500)

    def not_found(what: str) -> Response:
        return PlainTextResponse(f"not found: {what}\n", status_code=404)

    async def signed(log: SqlJournalStore, cp: Checkpoint) -> str:
        note = cp.to_signed_note(signer_for(log.origin))
        return note + "".join(await cosignature_lines(log, cp.to_note()))

    async def checkpoint(request: Request) -> Response:
        log = tenant_store(request)
        if log is None:
            return not_found("tenant")
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
        log = tenant_store(request)
        parsed = parse_tile_path("tile/" + request.path_params["path"])
        if log is None or parsed is None:
            return not_found("tile path")
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

    async def index(request: Request) -> Response:
        tenants = await log_tenants(store)
        return HTMLResponse(page.index_page(tenants), headers={"Cache-Control": "no-cache"})

    async def tenant_view(request: Request) -> Response:
        log = tenant_store(request)
        if log is None:
            return not_found("tenant")
        signer = signer_for(log.origin)
        try:
            cp = await served_log(log).checkpoint()
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
        for run_id, head, position, outcome in await recent_seals(log, RECENT_RUNS):
            head_hex = head.hex() if isinstance(head, bytes) else repr(head)
            ok, detail = await _verify_run(log, run_id, head)
            view.runs.append(page.RunRow(run_id, position, head_hex, outcome, ok, detail))
        return HTMLResponse(
            page.tenant_page(view),
            status_code=200 if view.size is not None else 500,
            headers={"Cache-Control": "no-cache"},
        )

    async def run_view(request: Request) -> Response:
        log = tenant_store(request)
        if log is None:
            return not_found("tenant")
        try:
            run = RunId.parse(request.path_params["run"])
        except (TypeError, ValueError):
            return not_found("run id")
        view = page.RunView(
            tenant=log.tenant,
            run=str(run),
            records=[],
            more=False,
            chain_ok=False,
            chain_detail="",
            proof_ok=None,
            proof_detail="not sealed: not in the log yet",
        )
        unreadable = None
        try:
            read = (await log.read_runs([run]))[run]
            records = read.records
            view.more = len(records) > RECORDS_SHOWN or not read.whole
            view.records = [
                (r.seq, r.kind, r.hash.hex(), json.dumps(r.body, sort_keys=True, default=repr))
                for r in records[:RECORDS_SHOWN]
            ]
            if not records and read.error is None and read.sealed is None and read.whole:
                return not_found("no such run in this log")
        except (StoreError, ValueError, TypeError) as exc:
            unreadable = f"unreadable: {exc}"
        view.chain_ok, view.chain_detail = await _verify_run(log, str(run), None)
        if unreadable is not None:
            view.chain_ok, view.chain_detail = False, unreadable
        try:
            cp, inc = await _inclusion(log, served_log(log), run)
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
        return HTMLResponse(page.run_page(view), headers={"Cache-Control": "no-cache"})

    async def store_error(request: Request, exc: Exception) -> Response:
        # A row the log cannot vouch for (CorruptLogError, CorruptRecordError...): the
        # page says FAILING and why; a tile or checkpoint request gets the reason as text.
        if request.url.path.endswith("/checkpoint") or "/tile/" in request.url.path:
            return PlainTextResponse(f"the stored log is damaged: {exc}\n", status_code=500)
        return HTMLResponse(page.failure_page("The log cannot be read", str(exc)), 500)

    routes = [
        Route("/", index),
        Route("/{tenant}/", tenant_view),
        Route("/{tenant}/checkpoint", checkpoint),
        Route("/{tenant}/tile/{path:path}", tile),
        Route("/{tenant}/run/{run}", run_view),
    ]
    return Starlette(routes=routes, exception_handlers={StoreError: store_error})


async def _verify_run(log: SqlJournalStore, run_id: object, head: object) -> tuple[bool, str]:
    """Verify a sealed run's records against its seal; any failure is a verdict, not a crash."""
    try:
        run = RunId.parse(run_id) if isinstance(run_id, str) else None
    except (TypeError, ValueError):
        run = None
    if run is None:
        return False, f"the seal's run id {run_id!r} is not a run id"
    try:
        verified = await log.verify(run)
    except CorruptRecordError as exc:
        return False, f"seq {exc.seq}: {exc.detail}"
    except (StoreError, ValueError, TypeError) as exc:
        return False, str(exc)
    if head is not None and (not isinstance(head, bytes) or bytes(verified) != head):
        return False, "the records do not end at the sealed head"
    return True, f"head {verified.hex()}"


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
