"""A whole-database backup: a directory of export-format-1 files, one per tenant, and a manifest.

Format 1 (:mod:`.lines`) is one tenant's journal: one Merkle log, one checkpoint in
its header. A database holds many tenants, so a backup of it is a **directory**:

* one member file per tenant, ``NNNN-<name>.jsonl`` (``NNNN`` its place in the manifest,
  ``<name>`` the tenant with anything but ``[A-Za-z0-9._-]`` as ``_``, for a human's eye
  only), each byte for byte the file ``export --tenant NAME`` writes, so agentplane 0.22's
  ``verify --checkpoint``/``restore`` and every reader of format 1 read it unchanged;
* ``manifest.json``, written **last**: which tenant each file holds, its wire profile, the
  checkpoint it was exported at, and its length and SHA-256. A directory without one was cut
  short (as a file without its trailer); a member whose bytes differ from the manifest's
  was damaged or replaced, and one the manifest names but the directory lacks was lost.

The manifest is to be read as hostile input: a member's ``file`` must be a plain name inside
the directory (no separator, no ``..``), each tenant appears once and is a name the store
accepts (so a restore never stops half-way on a name). Pure code: reading and
writing the files is :mod:`agentplane_journal.journal.backup`'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentplane_journal.core.ids import validate_tenant

__all__ = [
    "MANIFEST",
    "MANIFEST_KIND",
    "MANIFEST_VERSION",
    "Manifest",
    "ManifestError",
    "Member",
    "member_file",
    "parse_manifest",
]

MANIFEST = "manifest.json"
MANIFEST_KIND = "agentplane-journal.backup"
MANIFEST_VERSION = 1

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """The manifest cannot be read as a backup's: what is wrong, in words."""


@dataclass(frozen=True, slots=True)
class Member:
    """One tenant's file in the backup, as exported."""

    tenant: str
    file: str
    profile: str
    origin: str
    size: int  # the log's size in the file's header checkpoint
    root: str  # its root, hex
    runs: int  # runs written (the trailer's runs_requested)
    records: int
    unreadable: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "file": self.file,
            "profile": self.profile,
            "origin": self.origin,
            "size": self.size,
            "root": self.root,
            "runs": self.runs,
            "records": self.records,
            "unreadable": self.unreadable,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }


@dataclass(slots=True)
class Manifest:
    """The backup's table of contents (``manifest.json``)."""

    members: list[Member] = field(default_factory=list)

    def to_text(self) -> str:
        value = {
            "kind": MANIFEST_KIND,
            "version": MANIFEST_VERSION,
            "tenants": [m.to_json() for m in self.members],
        }
        return json.dumps(value, ensure_ascii=False, indent=2) + "\n"

    def member(self, tenant: str) -> Member | None:
        return next((m for m in self.members if m.tenant == tenant), None)


def member_file(index: int, tenant: str) -> str:
    """The file name of the ``index``-th tenant (from 1): unique by its number, readable by
    its name (truncated, so a long tenant name stays a legal file name)."""
    return f"{index:04d}-{_UNSAFE.sub('_', tenant)[:64]}.jsonl"


def _field(item: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = item.get(name)
    if type(value) is not kind or (isinstance(value, int) and value < 0):
        expected = "a whole number >= 0" if kind is int else "text"
        raise ManifestError(f"{where}: {name!r} is {value!r}, not {expected}")
    return value


def parse_manifest(text: str) -> Manifest:
    """The manifest in ``text``; :class:`ManifestError` naming the first thing wrong."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{MANIFEST} is not JSON ({exc})") from None
    if not isinstance(value, dict) or value.get("kind") != MANIFEST_KIND:
        raise ManifestError(f"{MANIFEST} is not an agentplane-journal backup manifest")
    if value.get("version") != MANIFEST_VERSION:
        raise ManifestError(
            f"{MANIFEST} claims version {value.get('version')!r}; this build reads "
            f"{MANIFEST_VERSION} (a newer build wrote it?)"
        )
    items = value.get("tenants")
    if not isinstance(items, list):
        raise ManifestError(f"{MANIFEST} lists no tenants")
    manifest = Manifest()
    seen_tenants: set[str] = set()
    seen_files: set[str] = set()
    for n, item in enumerate(items, 1):
        where = f"{MANIFEST} entry {n}"
        if not isinstance(item, dict):
            raise ManifestError(f"{where} is not an object")
        tenant = _field(item, "tenant", str, where)
        try:
            valid = validate_tenant(tenant) == tenant
        except ValueError:
            valid = False
        if not valid:
            raise ManifestError(f"{where}: {tenant!r} is not a tenant name this store accepts")
        file = _field(item, "file", str, where)
        if not file or "/" in file or "\\" in file or file in (".", "..") or file == MANIFEST:
            raise ManifestError(f"{where}: file {file!r} is not a plain name in the backup")
        sha = _field(item, "sha256", str, where)
        if not _HEX64.fullmatch(sha):
            raise ManifestError(f"{where}: sha256 {sha!r} is not 64 lowercase hex digits")
        if tenant in seen_tenants or file in seen_files:
            raise ManifestError(f"{where}: tenant {tenant!r} or file {file!r} is listed twice")
        seen_tenants.add(tenant)
        seen_files.add(file)
        manifest.members.append(
            Member(
                tenant=tenant,
                file=file,
                profile=_field(item, "profile", str, where),
                origin=_field(item, "origin", str, where),
                size=_field(item, "size", int, where),
                root=_field(item, "root", str, where),
                runs=_field(item, "runs", int, where),
                records=_field(item, "records", int, where),
                unreadable=_field(item, "unreadable", int, where),
                bytes=_field(item, "bytes", int, where),
                sha256=sha,
            )
        )
    return manifest
