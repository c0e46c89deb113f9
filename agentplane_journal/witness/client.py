"""A tlog-witness client and a witnessing round: sign a checkpoint, ask each witness of a
policy, store the cosignatures that verify, say whether the quorum is met.

The round's rules:

* **One checkpoint per round.** The log's checkpoint is read once and every witness is
  asked about that one, with a consistency proof read from the stored tree at that very
  size (:meth:`~agentplane_journal.journal.cosignatures.Cosignatures.checkpoint_at`), so
  seals landing meanwhile change nothing and the cosignatures count towards one quorum.
* **The old size is the witness's.** It is the largest size that witness cosigned for this
  tenant, as stored. A 409 (*stale*: someone else moved the witness on, or a cosignature was
  lost) is answered once by re-sending from the size the witness names; a size larger than
  this log is not stale but a fork (the log shrank below what the witness saw).
* **A fork is never retried or hidden.** 422 and a shrunken log are reported as
  ``forked``, per witness, and the command exits 1; an unreachable or misconfigured witness
  is ``unavailable``. Only cosignatures that verify against the policy's key for that
  witness are stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentplane_journal.core.ids import Digest
from agentplane_journal.errors import (
    StoreError,
    WitnessError,
    WitnessForkedError,
    WitnessStaleError,
    WitnessUnavailableError,
)
from agentplane_journal.journal.log_audit import MAX_LOG_INDEX
from agentplane_journal.tlog.checkpoint import Checkpoint
from agentplane_journal.tlog.cosignature import Cosignature
from agentplane_journal.tlog.policy import Policy, PolicyWitness
from agentplane_journal.tlog.witness_protocol import (
    MAX_ANSWER_BYTES,
    add_checkpoint_body,
    read_answer,
)

if TYPE_CHECKING:
    from agentplane_journal.journal.store import SqlJournalStore
    from agentplane_journal.tlog.note import NoteSigner

__all__ = ["HttpWitness", "WitnessOutcome", "WitnessRound", "witness_round"]

_MISSING_HTTPX = "asking witnesses needs httpx: pip install 'agentplane_journal[witness]'"


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(_MISSING_HTTPX) from None
    return httpx


class HttpWitness:
    """One witness reached over HTTP at its submission prefix ``url``."""

    def __init__(self, witness: PolicyWitness, url: str, client: Any, timeout: float) -> None:
        self.witness = witness
        self.url = url.rstrip("/") + "/add-checkpoint"
        self._client = client
        self._timeout = timeout

    async def add_checkpoint(
        self, checkpoint: Checkpoint, signed_note: str, old_size: int, proof: Sequence[Digest]
    ) -> Cosignature:
        """POST add-checkpoint; the verified cosignature, or the :class:`WitnessError` the
        answer amounts to (:func:`~agentplane_journal.tlog.witness_protocol.read_answer`).

        The whole exchange (connecting, sending, every byte of the answer) has one deadline,
        ``timeout`` seconds: a witness trickling a byte every half second is cut off there,
        not kept for ever by a per-read timeout. The answer is read raw (no content coding)
        up to :data:`~agentplane_journal.tlog.witness_protocol.MAX_ANSWER_BYTES`; a longer
        one is not read on.
        """
        httpx = _httpx()
        body = add_checkpoint_body(old_size, proof, signed_note)
        try:
            status, content_type, content = await asyncio.wait_for(
                self._exchange(body), self._timeout
            )
        except TimeoutError:
            raise WitnessUnavailableError(
                self.witness.name,
                f"no complete answer from {self.url} within {self._timeout:g} s "
                "(the deadline of the whole request; --timeout)",
            ) from None
        except httpx.HTTPError as exc:
            raise WitnessUnavailableError(
                self.witness.name, f"cannot reach {self.url}: {exc!s} ({type(exc).__name__})"
            ) from None
        return read_answer(
            self.witness.name,
            self.witness.key,
            checkpoint,
            old_size,
            status,
            content_type,
            content,
        )

    async def _exchange(self, body: bytes) -> tuple[int, str | None, bytes]:
        """The answer's status, content type and body (raw, bounded)."""
        headers = {"Content-Type": "text/plain; charset=utf-8", "Accept-Encoding": "identity"}
        async with self._client.stream(
            "POST", self.url, content=body, headers=headers, timeout=self._timeout
        ) as response:
            coding = response.headers.get("content-encoding", "identity").strip().lower()
            if coding not in ("", "identity"):
                raise WitnessUnavailableError(
                    self.witness.name, f"it answered in content coding {coding!r}, not asked for"
                )
            content = bytearray()
            async for chunk in response.aiter_bytes():  # identity: the raw bytes
                content += chunk
                if len(content) > MAX_ANSWER_BYTES:
                    raise WitnessUnavailableError(
                        self.witness.name,
                        f"its answer is larger than {MAX_ANSWER_BYTES} bytes, which no "
                        "add-checkpoint answer is; it was not read on",
                    )
            return response.status_code, response.headers.get("content-type"), bytes(content)


@dataclass(frozen=True, slots=True)
class WitnessOutcome:
    """What one witness said: ``cosigned``, ``forked``, ``stale``, ``unavailable``,
    ``no-url`` (the policy gives no submission URL, so it was not asked) or ``error`` (the
    database failed while asking it: nothing is known about the witness)."""

    witness: str
    status: str
    detail: str = ""
    cosignature: Cosignature | None = None


@dataclass(frozen=True, slots=True)
class WitnessRound:
    """A round's checkpoint, each witness's outcome and the quorum over the stored ones."""

    checkpoint: Checkpoint
    signed_note: str
    outcomes: tuple[WitnessOutcome, ...]
    cosigned_by: tuple[str, ...]  # policy names whose stored cosignature verifies
    quorum_met: bool
    findings: tuple[str, ...] = field(default=())  # stored rows that did not verify
    lines: tuple[str, ...] = field(default=())  # every verified stored cosignature line

    @property
    def forked(self) -> bool:
        return any(o.status == "forked" for o in self.outcomes)

    @property
    def cosigned_note(self) -> str:
        """The signed note with every verified stored cosignature of this checkpoint."""
        return self.signed_note + "".join(self.lines)


async def _has_leaves(store: SqlJournalStore, size: int) -> bool:
    """Does the log (on the primary) hold at least ``size`` leaves?"""
    try:
        await store.checkpoint_at(size)
    except ValueError:
        return False
    return True


async def _ahead(store: SqlJournalStore, name: str, size: int, checkpoint: Checkpoint) -> None:
    """The witness holds ``size`` > this round's checkpoint: a race with a newer round
    (stale) if the log has that many leaves now, else the log shrank (forked)."""
    if await _has_leaves(store, size):
        raise WitnessStaleError(name, size)
    raise WitnessForkedError(
        name,
        f"it holds size {size} of this log, larger than this log's {checkpoint.size} leaves: "
        "the log shrank below what the witness saw",
    )


async def _ask(
    store: SqlJournalStore, http: HttpWitness, checkpoint: Checkpoint, note: str
) -> WitnessOutcome:
    """One witness's outcome; whatever goes wrong asking it is its outcome alone, reported
    beside the others' answers (a database error is ``error``, never ``forked``)."""
    try:
        return await _ask_once(store, http, checkpoint, note)
    except StoreError as exc:
        return WitnessOutcome(http.witness.name, "error", f"the database: {exc}")


async def _ask_once(
    store: SqlJournalStore, http: HttpWitness, checkpoint: Checkpoint, note: str
) -> WitnessOutcome:
    name = http.witness.name
    old = await store.witness_size(http.witness.key)
    for attempt in range(2):
        try:
            if old > checkpoint.size:
                await _ahead(store, name, old, checkpoint)
            _, proof = await store.checkpoint_at(checkpoint.size, old)
            cosig = await http.add_checkpoint(checkpoint, note, old, proof)
        except WitnessStaleError as stale:
            size = stale.witness_size
            if size > MAX_LOG_INDEX + 1:
                return WitnessOutcome(
                    name,
                    "unavailable",
                    f"it answered 409 with size {size}, more leaves than any log this journal "
                    "can hold: a protocol error, not a view of this log",
                )
            if attempt == 0 and size != old and size <= checkpoint.size:
                old = size  # routine: someone moved it on; send from there
                continue
            try:
                if size > checkpoint.size:
                    await _ahead(store, name, size, checkpoint)
            except WitnessForkedError as exc:
                return WitnessOutcome(name, "forked", str(exc))
            except WitnessStaleError:
                pass
            detail = (
                f"it holds size {size}, newer than this round's checkpoint ({checkpoint.size}); "
                "the log grew meanwhile: run `witness` again"
                if size > checkpoint.size
                else str(stale)
            )
            return WitnessOutcome(name, "stale", detail)
        except WitnessForkedError as exc:
            return WitnessOutcome(name, "forked", str(exc))
        except WitnessError as exc:
            return WitnessOutcome(name, "unavailable", str(exc))
        await store.store_cosignatures(checkpoint, [(http.witness.key, cosig)])
        return WitnessOutcome(name, "cosigned", f"old size {old}", cosig)
    raise AssertionError("unreachable")  # pragma: no cover


async def witness_round(
    store: SqlJournalStore,
    signer: NoteSigner,
    policy: Policy,
    *,
    request_timeout: float = 10.0,
    client: Any = None,
) -> WitnessRound:
    """Sign the tenant's current checkpoint and ask every policy witness with a URL.

    ``client``: an ``httpx.AsyncClient`` to use (one is made and closed otherwise).
    """
    checkpoint, _ = await store.checkpoint_at((await store.checkpoint()).size)
    note = checkpoint.to_signed_note(signer)
    own = client is None
    if own:
        client = _httpx().AsyncClient()
    try:
        asks = []
        skipped = []
        for witness in policy.witnesses:
            if witness.url is None:
                skipped.append(WitnessOutcome(witness.name, "no-url", "the policy gives no URL"))
                continue
            http = HttpWitness(witness, witness.url, client, request_timeout)
            asks.append(_ask(store, http, checkpoint, note))
        outcomes = list(await asyncio.gather(*asks)) + skipped
    finally:
        if own:
            await client.aclose()
    stored = await store.read_cosignatures(checkpoint)
    names = tuple(w.name for w in policy.witnesses if any(key == w.key for key, _ in stored.valid))
    return WitnessRound(
        checkpoint,
        note,
        tuple(outcomes),
        names,
        policy.quorum_met(names),
        stored.findings,
        tuple(stored.lines),
    )
