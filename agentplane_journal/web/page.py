"""The audit page's HTML: plain, read-only, every value escaped.

Functions from what the server read to a page, no I/O, no JavaScript, no external assets,
so the page works offline, under a strict Content-Security-Policy, and in a headless
browser. Everything that came from the database goes through :func:`esc` (a hostile run id,
outcome or record body is shown, never interpreted); a check that fails is shown as
``FAILING`` with the reason, and a check that passed as ``verified``: the words a test (or
an auditor's grep) looks for.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "RunRow",
    "RunView",
    "TenantView",
    "esc",
    "failure_page",
    "index_page",
    "run_page",
    "tenant_page",
]

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:72em}"
    "pre{background:#f4f4f4;padding:.6em;overflow-x:auto}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;"
    "font-family:monospace;text-align:left}"
    ".ok{color:#075e07;font-weight:bold}.bad{color:#a00;font-weight:bold}"
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


def _status(ok: bool, detail: str) -> str:
    if ok:
        return f'<span class="ok" data-status="verified">verified</span> {esc(detail)}'
    return f'<span class="bad" data-status="failing">FAILING</span> {esc(detail)}'


def _document(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def index_page(tenants: Sequence[str]) -> str:
    items = "".join(f'<li><a href="/{esc(t)}/">{esc(t)}</a></li>' for t in tenants)
    return _document(
        "agentplane journal: audit",
        "<h1>agentplane journal: audit</h1><p>Logs (one per tenant, each served as C2SP "
        "tlog-tiles under <code>/&lt;tenant&gt;/</code>):</p>"
        f"<ul>{items or '<li>no sealed runs yet</li>'}</ul>",
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


def tenant_page(view: TenantView) -> str:
    t = esc(view.tenant)
    witnesses = (
        "<pre>" + esc("".join(view.cosignatures)) + "</pre>"
        if view.cosignatures
        else "<p>No witness cosignatures are stored for this checkpoint.</p>"
    )
    rows = "".join(
        "<tr>"
        f"<td>{esc(r.position)}</td>"
        f'<td><a href="/{t}/run/{esc(r.run)}">{esc(r.run)}</a></td>'
        f"<td>{esc(r.outcome)}</td><td>{esc(r.head)}</td>"
        f"<td>{_status(r.ok, r.detail)}</td></tr>"
        for r in view.runs
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
    body = (
        f"<h1>Log {esc(view.origin)}</h1>"
        f'<p><a href="/">all logs</a> · tiles: <a href="/{t}/checkpoint">checkpoint</a></p>'
        f"<h2>Latest checkpoint</h2>{checkpoint}"
        f"<p>Log key: <code>{esc(view.verifier_key)}</code></p>"
        f"<h2>Witnesses</h2>{witnesses}"
        f"<h2>Recent sealed runs</h2>"
        "<p>A run is verified when its records check (hashes, links, signatures) and end "
        "exactly at the head the log committed to.</p>"
        "<table><tr><th>leaf</th><th>run</th><th>outcome</th><th>sealed head</th>"
        f"<th>status</th></tr>{rows}</table>"
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


def _lines(items: Iterable[str]) -> str:
    return "".join(f"<li><code>{esc(i)}</code></li>" for i in items)


def run_page(view: RunView) -> str:
    t = esc(view.tenant)
    records = "".join(
        f"<tr><td>{seq}</td><td>{esc(kind)}</td><td>{esc(h)}</td><td>{esc(body)}</td></tr>"
        for seq, kind, h, body in view.records
    )
    if view.proof_ok is None:
        proof = f'<p id="proof">{_status(False, view.proof_detail)}</p>'
    else:
        proof = (
            f'<p id="proof">{_status(view.proof_ok, view.proof_detail)}</p>'
            f"<p>leaf {esc(view.index)} of {esc(view.size)}; sealed head "
            f"<code>{esc(view.seal_hex)}</code>; root <code>{esc(view.root_hex)}</code></p>"
            f"<ol>{_lines(view.proof)}</ol>"
        )
    body = (
        f'<h1>Run {esc(view.run)}</h1><p><a href="/{t}/">log {t}</a></p>'
        f'<h2>Chain</h2><p id="chain">{_status(view.chain_ok, view.chain_detail)}</p>'
        f"<h2>Inclusion proof</h2>{proof}"
        "<h2>Records</h2><table><tr><th>seq</th><th>kind</th><th>hash</th><th>body</th></tr>"
        f"{records}</table>" + ("<p>(more records not shown)</p>" if view.more else "")
    )
    return _document(f"run {view.run}", body)


def failure_page(what: str, detail: str) -> str:
    """What a page shows when the log itself cannot be read (a damaged stored tree, say)."""
    return _document(
        "audit: FAILING",
        f'<h1>{esc(what)}</h1><p id="failure">{_status(False, detail)}</p>'
        '<p><a href="/">all logs</a></p>',
    )
