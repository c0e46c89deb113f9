"""Reading an export's lines and run blocks: one reading for every reader of the file.

``verify-export`` (:mod:`~agentplane_journal.exportfmt.verify`) and both passes of a
restore (:mod:`agentplane_journal.journal.restore`) read each line and each run block through
these two functions, so they cannot disagree about what a line or a block says, which is
how a file came to be SOUND to one and restored as another history by the other:

* a line is a UTF-8 JSON object or it is **unreadable**, never skipped: a record line cut
  in half, skipped, restores its run short (and an open run's root check cannot notice);
* a run block is **open** (neither ``index`` nor ``seal``, or ``null``), **sealed** (a
  ``u64`` log position and a 64-hex leaf), or **malformed**: anything else, such as an
  ``index`` beside a ``seal`` that is not a digest, which one reader took for open and
  another sealed at that position.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from agentplane_journal.core import jsonload
from agentplane_journal.core.ids import Digest, RunId
from agentplane_journal.exportfmt.lines import parse_digest, parse_ulid_run

__all__ = ["RunBlock", "attestation", "read_line", "run_block"]

_U64_MAX = (1 << 64) - 1

_LINE = json.JSONDecoder()
"""``json.loads``'s own reading of a line (its default decoder)."""

_LOWER_HEX64 = re.compile(r"[0-9a-f]{64}")
"""A digest as every writer spells it: what ``parse_digest`` reads as these bytes."""

_CANONICAL_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
"""A bare ULID as every writer spells it (upper case): what ``RunId.parse`` keeps as it is
(it would strip no prefix, the first digit being one, and upper-case nothing)."""


def read_line(line: str | bytes) -> dict[str, Any] | str | None:
    """The line's JSON object; ``None`` for a blank line; otherwise a sentence saying why it
    is unreadable (every reader stops there: nothing after it can be trusted to be read
    as written)."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            return "a line is not UTF-8, so the export is unreadable from there on"
    if line[:1] != "{" and not line.strip():  # a line opening an object is not blank
        return None
    try:
        value = jsonload.decode(_LINE, line)
    except jsonload.JsonTooDeep as exc:
        return f"a line is {exc}, so the export is unreadable from there on"
    except ValueError:
        return "a line is not valid JSON, so the export is unreadable from there on"
    if not isinstance(value, dict):
        return "a line is not a JSON object, so the export is unreadable from there on"
    return value


@dataclass(frozen=True, slots=True)
class RunBlock:
    """A run block as every reader takes it: ``index``/``seal`` both set (the run is in the
    header's log) or both ``None``; ``problem`` says why the block is malformed (then both
    are ``None``, and no reader may act on the block)."""

    run: RunId
    index: int | None
    seal: Digest | None
    problem: str | None = None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def run_block(value: dict[str, Any]) -> RunBlock | str:
    """``value`` (a line whose ``kind`` is the run block's) read as a :class:`RunBlock`, or a
    sentence when it names no run id (its records then belong to no run)."""
    text = value.get("run")
    if type(text) is str and len(text) == 26 and _CANONICAL_ULID.fullmatch(text):
        run: RunId | None = RunId._trusted(text)  # what parsing it would give
    else:
        run = parse_ulid_run(text)
    if run is None:
        return (
            f"a run block names {_shown(value.get('run'))}, which is not a run id; its records "
            "belong to no run"
        )
    index, seal = value.get("index"), value.get("seal")
    if index is None and seal is None:
        return RunBlock(run, None, None)
    position = index if type(index) is int and 0 <= index <= _U64_MAX else None
    if type(seal) is str and _LOWER_HEX64.fullmatch(seal):  # as every writer spells it
        leaf: Digest | None = Digest._trusted(bytes.fromhex(seal))
    else:
        leaf = parse_digest(seal)
    if position is None or leaf is None:
        return RunBlock(
            run,
            None,
            None,
            f"run {run}: its block carries log position {_shown(index)} and leaf "
            f"{_shown(seal)} — a sealed run's block carries both (a position and 64 hex "
            "digits) and an open run's neither, so one reader could take it for open and "
            "another seal the run at that position",
        )
    return RunBlock(run, position, leaf)


def attestation(value: object) -> tuple[str, bytes] | None:
    """A line's ``attestation``: the signature as hex (agentplane's ``hex_bytes``, what both
    write now), or as an array of byte values (this package's files from before)."""
    if not isinstance(value, dict):
        return None
    key_id, sig = value.get("key_id"), value.get("signature")
    if not isinstance(key_id, str):
        return None
    if isinstance(sig, str):
        # hex::decode: an even number of hex digits, either case; nothing else.
        if len(sig) % 2 or not all(c in "0123456789abcdefABCDEF" for c in sig):
            return None
        return key_id, bytes.fromhex(sig)
    if not isinstance(sig, list) or not all(type(x) is int and 0 <= x <= 255 for x in sig):
        return None
    return key_id, bytes(sig)
