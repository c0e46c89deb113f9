"""The audit page's HTML: plain, read-only, every value escaped.

Functions from what the server read to a page, no I/O, no JavaScript, no external assets,
so the page works offline, under a strict Content-Security-Policy, and in a headless
browser. Everything that came from the database goes through :func:`esc` (a hostile run id,
outcome or record body is shown, never interpreted), and every value in a link through
:func:`seg` (percent-encoded: a tenant named ``\\evil.example`` links to
``/%5Cevil.example/``, never off the site); a check that fails is shown as ``FAILING`` with
the reason, and a check that passed as ``verified``: the words a test (or an auditor's grep)
looks for. The layout fits a 1280-pixel window: long hashes and bodies wrap instead of
widening the page.
"""

from __future__ import annotations

import datetime
import html
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "LogRow",
    "RunRow",
    "RunView",
    "TenantView",
    "esc",
    "failure_page",
    "index_page",
    "public_index",
    "run_page",
    "seg",
    "tenant_page",
    "when",
]

_STYLE = (
    "*{box-sizing:border-box}"
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:78em;overflow-wrap:anywhere}"
    "pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere}"
    "code{overflow-wrap:anywhere}"
    "table{border-collapse:collapse;width:100%;table-layout:fixed}"
    "td,th{border:1px solid #ccc;padding:.2em .5em;font-family:monospace;text-align:left;"
    "vertical-align:top;overflow-wrap:anywhere}"
    ".ok{color:#075e07;font-weight:bold}.bad{color:#a00;font-weight:bold}"
    ".alert{border:2px solid #a00;padding:.5em 1em;background:#fff4f4}"
)


def esc(value: object) -> str:
    """Any value as HTML text: ``str()`` of it, escaped (quotes too), lone surrogates replaced."""
    text = (
        value
        if isinstance(value, str)
        else repr(value)
        if not isinstance(value, int)
        else str(value)
    )
    text = text.encode("utf-8", "replace").decode("utf-8")
    return html.escape(text, quote=True)


def seg(value: object) -> str:
    """A value as one URL path segment inside an ``href``: percent-encoded (``/``, ``\\``,
    ``?``, ``#``, ``%`` and all), then escaped, so no name can make a link leave the site."""
    text = value if isinstance(value, str) else repr(value)
    return esc(urllib.parse.quote(text.encode("utf-8", "replace"), safe=""))


def when(value: object) -> str:
    """A stored ``sealed_at`` (Unix seconds) as UTC text; anything else as it is."""
    if type(value) is int and 0 <= value < 253402300800:  # before year 10000
        return datetime.datetime.fromtimestamp(value, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return repr(value)


def _status(ok: bool, detail: str) -> str:
    if ok:
        return f'<span class="ok" data-status="verified">verified</span> {esc(detail)}'
    return f'<span class="bad" data-status="failing">FAILING</span> {esc(detail)}'


def _document(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def public_index(readers: bool) -> str:
    """The front page for a visitor who is no reader: the logs are public, their list is not."""
    how = (
        '<p><a href="/signin">Sign in</a> with a reader token to see the logs you may read.</p>'
        if readers
        else "<p>This server shows no tenant's content (it has no reader tokens).</p>"
    )
    return _document(
        "agentplane journal: audit",
        "<h1>agentplane journal: audit</h1><p>Each tenant's log is public as C2SP tlog-tiles "
        "under <code>/&lt;tenant&gt;/</code> (its checkpoint, tiles and inclusion proofs); the "
        f"list of tenants and what they wrote is private.</p>{how}",
    )


@dataclass
class LogRow:
    """One log on the front page: its verified size, or (``size`` None) the damage."""

    tenant: str
    size: int | None
    detail: str
    failing_runs: Mapping[str, str] = field(default_factory=dict)


def index_page(rows: Sequence[LogRow]) -> str:
    """The readers' front page: every failing log and run named first, then every log."""
    failing = [r for r in rows if r.size is None or r.failing_runs]
    alerts = "".join(
        f'<li>log <a href="/{seg(r.tenant)}/">{esc(r.tenant)}</a>: '
        + (_status(False, r.detail) if r.size is None else "its checkpoint verifies")
        + "".join(
            f'<br>run <a href="/{seg(r.tenant)}/run/{seg(run)}">{esc(run)}</a>: '
            f"{_status(False, why)}"
            for run, why in sorted(r.failing_runs.items())
        )
        + "</li>"
        for r in failing
    )
    summary = (
        f'<div class="alert" id="failing"><h2>FAILING</h2><ul>{alerts}</ul></div>'
        if failing
        else f'<p id="failing">{_status(True, "every log listed here checks")}</p>'
    )
    items = "".join(
        f'<tr><td><a href="/{seg(r.tenant)}/">{esc(r.tenant)}</a></td>'
        f"<td>{'' if r.size is None else r.size}</td>"
        f"<td>{_status(r.size is not None, r.detail or 'checkpoint re-derived from the seals')}"
        "</td></tr>"
        for r in rows
    )
    return _document(
        "agentplane journal: audit",
        "<h1>agentplane journal: audit</h1>"
        f"{summary}<p>Logs (one per tenant, each served as C2SP tlog-tiles under "
        "<code>/&lt;tenant&gt;/</code>). A failing run is one a page showed failing since "
        "the server started; <code>agentplane-journal verify --all</code> checks every run.</p>"
        "<table><tr><th>log</th><th>size</th><th>status</th></tr>"
        f"{items or '<tr><td colspan=3>no sealed runs yet</td></tr>'}</table>",
    )


@dataclass
class RunRow:
    """One sealed run in the tenant page's list, and its verdict."""

    run: object
    position: object
    head: str
    outcome: object
    ok: bool
    detail: str
    sealed_at: object = None


@dataclass
class TenantView:
    tenant: str
    origin: str
    size: int | None  # None: the stored tree disagrees with the seals (``log_detail``)
    root_hex: str
    note: str
    verifier_key: str
    cosignatures: list[str]
    runs: list[RunRow] = field(default_factory=list)
    log_detail: str = ""
    private: bool = True  # the runs are not shown (the visitor is no reader of the tenant)
    before: int | None = None  # this page lists the seals below this log index
    older: int | None = None  # the log index the next (older) page starts below


def tenant_page(view: TenantView) -> str:
    u = seg(view.tenant)
    witnesses = (
        "<pre>" + esc("".join(view.cosignatures)) + "</pre>"
        if view.cosignatures
        else "<p>No witness cosignatures are stored for this checkpoint.</p>"
    )
    if view.size is None:
        checkpoint = (
            f'<p id="log">{_status(False, view.log_detail)}</p>'
            "<p>No checkpoint is signed and no tile is served while the stored tree "
            "disagrees with the sealed runs.</p>"
        )
    else:
        checkpoint = (
            f'<p id="log">{_status(True, "the root was re-derived from the sealed heads")}</p>'
            f'<p>size <b id="size">{view.size}</b>, root '
            f'<code id="root">{esc(view.root_hex)}</code></p>'
            f'<pre id="note">{esc(view.note)}</pre>'
        )
    if view.private:
        runs = (
            '<p id="runs">The runs are private: <a href="/signin">sign in</a> as a reader of '
            "this tenant to see them. The checkpoint and tiles above are public.</p>"
        )
    else:
        rows = "".join(
            "<tr>"
            f"<td>{esc(r.position)}</td>"
            f'<td><a href="/{u}/run/{seg(r.run)}">{esc(r.run)}</a></td>'
            f"<td>{esc(when(r.sealed_at))}</td>"
            f"<td>{esc(r.outcome)}</td><td>{esc(r.head)}</td>"
            f"<td>{_status(r.ok, r.detail)}</td></tr>"
            for r in view.runs
        )
        pages = []
        if view.before is not None:
            pages.append(f'<a href="/{u}/">newest runs</a>')
        if view.older is not None:
            pages.append(f'<a id="older" href="/{u}/?before={view.older}">older runs</a>')
        runs = (
            "<p>A run is verified when its records check (hashes, links, signatures) and end "
            "exactly at the head the log committed to.</p>"
            '<table id="runs"><colgroup><col style="width:6%"><col style="width:22%">'
            '<col style="width:14%"><col style="width:9%"><col style="width:22%">'
            '<col style="width:27%"></colgroup>'
            "<tr><th>leaf</th><th>run</th><th>sealed (UTC)</th><th>outcome</th>"
            f"<th>sealed head</th><th>status</th></tr>{rows}</table>"
            f"<p>{' · '.join(pages)}</p>"
        )
    body = (
        f"<h1>Log {esc(view.origin)}</h1>"
        f'<p><a href="/">all logs</a> · tiles: <a href="/{u}/checkpoint">checkpoint</a></p>'
        f"<h2>Latest checkpoint</h2>{checkpoint}"
        f"<p>Log key: <code>{esc(view.verifier_key)}</code></p>"
        f"<h2>Witnesses</h2>{witnesses}"
        f"<h2>Sealed runs, newest first</h2>{runs}"
    )
    return _document(f"log {view.origin}", body)


@dataclass
class RunView:
    tenant: str
    run: str
    records: list[tuple[int, str, str, str]]  # seq, kind, hash hex, body JSON
    more: bool
    chain_ok: bool
    chain_detail: str
    proof_ok: bool | None  # None: not sealed
    proof_detail: str
    index: int | None = None
    size: int | None = None
    seal_hex: str = ""
    root_hex: str = ""
    proof: list[str] = field(default_factory=list)
    private: bool = True  # the records are not shown (the visitor is no reader)


def _lines(items: Iterable[str]) -> str:
    return "".join(f"<li><code>{esc(i)}</code></li>" for i in items)


def run_page(view: RunView) -> str:
    t, u = esc(view.tenant), seg(view.tenant)
    if view.proof_ok is None:
        proof = f'<p id="proof">{_status(False, view.proof_detail)}</p>'
    else:
        proof = (
            f'<p id="proof">{_status(view.proof_ok, view.proof_detail)}</p>'
            f"<p>leaf {esc(view.index)} of {esc(view.size)}; sealed head "
            f"<code>{esc(view.seal_hex)}</code>; root <code>{esc(view.root_hex)}</code></p>"
            f"<ol>{_lines(view.proof)}</ol>"
        )
    if view.private:
        records = (
            '<p id="records">The records are private: <a href="/signin">sign in</a> as a '
            "reader of this tenant to see them.</p>"
        )
    else:
        rows = "".join(
            f"<tr><td>{seq}</td><td>{esc(kind)}</td><td>{esc(h)}</td><td>{esc(body)}</td></tr>"
            for seq, kind, h, body in view.records
        )
        records = (
            '<table id="records"><colgroup><col style="width:6%"><col style="width:14%">'
            '<col style="width:25%"><col style="width:55%"></colgroup>'
            "<tr><th>seq</th><th>kind</th><th>hash</th><th>body</th></tr>"
            f"{rows}</table>" + ("<p>(more records not shown)</p>" if view.more else "")
        )
    body = (
        f'<h1>Run {esc(view.run)}</h1><p><a href="/{u}/">log {t}</a></p>'
        f'<h2>Chain</h2><p id="chain">{_status(view.chain_ok, view.chain_detail)}</p>'
        f"<h2>Inclusion proof</h2>{proof}<h2>Records</h2>{records}"
    )
    return _document(f"run {view.run}", body)


def failure_page(what: str, detail: str) -> str:
    """What a page shows when the log itself cannot be read (a damaged stored tree, say)."""
    return _document(
        "audit: FAILING",
        f'<h1>{esc(what)}</h1><p id="failure">{_status(False, detail)}</p>'
        '<p><a href="/">all logs</a></p>',
    )
