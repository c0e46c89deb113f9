"""A whole-database backup's manifest (exportfmt/backup_manifest.py), read as hostile input: each
rule held by a test that fails without it.

Written against the mutants that survived tests/test_backup_database.py (tools/mutation.py
backup_manifest). Pure: manifests are literal JSON; the backups themselves, on both
dialects, are in tests/test_backup_database.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentplane_journal.exportfmt.backup_manifest import (
    MANIFEST,
    Manifest,
    ManifestError,
    Member,
    member_file,
    parse_manifest,
)

GOOD: dict[str, Any] = {
    "tenant": "acme",
    "file": "0001-acme.jsonl",
    "profile": "agentplane-0.4",
    "origin": "agentplane/acme",
    "size": 3,
    "root": "00" * 32,
    "runs": 2,
    "records": 5,
    "unreadable": 1,
    "bytes": 10,
    "sha256": "ab" * 32,
}
FIELDS = tuple(GOOD)


def _text(*members: object, **top: Any) -> str:
    value = {"kind": "agentplane-journal.backup", "version": 1, "tenants": list(members)}
    return json.dumps({**value, **top})


def _refused(text: str, reason: str) -> ManifestError:
    with pytest.raises(ManifestError, match=reason) as caught:
        parse_manifest(text)
    return caught.value


# -- writing ---------------------------------------------------------------------------------


def test_a_member_file_is_its_number_and_a_safe_truncated_name() -> None:
    assert member_file(1, "acme") == "0001-acme.jsonl"
    assert member_file(12345, "a.b_c-D9") == "12345-a.b_c-D9.jsonl"
    assert member_file(7, "café bar/é") == "0007-caf__bar__.jsonl"
    assert member_file(2, "x" * 70) == "0002-" + "x" * 64 + ".jsonl"


def test_a_manifest_is_written_as_json_with_every_field_and_a_newline() -> None:
    member = Member(**{**GOOD, "origin": "agentplane/café"})
    text = Manifest([member]).to_text()
    assert text.endswith("}\n") and "café" in text  # not \u00e9
    assert text.startswith('{\n  "kind": "agentplane-journal.backup",\n  "version": 1,')
    value = json.loads(text)
    assert value == {
        "kind": "agentplane-journal.backup",
        "version": 1,
        "tenants": [{**GOOD, "origin": "agentplane/café"}],
    }
    assert list(value["tenants"][0]) == list(FIELDS)
    assert parse_manifest(text).members == [member]


def test_a_manifest_finds_a_member_by_tenant() -> None:
    one, two = Member(**GOOD), Member(**{**GOOD, "tenant": "beta", "file": "2.jsonl"})
    manifest = Manifest([one, two])
    assert manifest.member("beta") is two and manifest.member("acme") is one
    assert manifest.member("gamma") is None
    assert Manifest().member("acme") is None and Manifest().members == []


# -- reading ---------------------------------------------------------------------------------


def test_every_field_is_read_into_its_place_in_order() -> None:
    second = {**GOOD, "tenant": "beta", "file": "0002-beta.jsonl", "sha256": "cd" * 32}
    second.update(size=0, runs=0, records=0, unreadable=0, bytes=0, profile="p", origin="o")
    second["root"] = "11" * 32
    members = parse_manifest(_text(GOOD, second)).members
    assert members == [Member(**GOOD), Member(**second)]
    assert parse_manifest(_text()).members == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{", "is not JSON"),
        ("[]", "not an agentplane-journal backup manifest"),
        ('"x"', "not an agentplane-journal backup manifest"),
        (json.dumps({"version": 1, "tenants": []}), "not an agentplane-journal backup"),
        (_text(kind="agentplane.backup"), "not an agentplane-journal backup manifest"),
        (_text(version=2), "claims version 2; this build reads 1"),
        (_text(version="1"), "claims version '1'"),
        (json.dumps({"kind": "agentplane-journal.backup", "tenants": []}), "version None"),
        (_text(tenants={"acme": GOOD}), "lists no tenants"),
        (_text(tenants=None), "lists no tenants"),
    ],
)
def test_a_manifest_that_is_not_ours_is_refused(text: str, reason: str) -> None:
    _refused(text, reason)


def test_an_entry_that_is_not_an_object_is_refused_by_its_number() -> None:
    _refused(_text(GOOD, ["acme"]), f"{MANIFEST} entry 2 is not an object")
    _refused(_text("acme"), "entry 1 is not an object")


@pytest.mark.parametrize("name", ["a/b", " acme", "acme ", "", "a:b", "x\x01"])
def test_a_tenant_the_store_would_refuse_or_trim_is_refused(name: str) -> None:
    _refused(_text({**GOOD, "tenant": name}), "not a tenant name this store accepts")


def test_a_tenant_must_be_text() -> None:
    _refused(_text(GOOD, {**GOOD, "tenant": 5}), "entry 2: 'tenant' is 5, not text")


@pytest.mark.parametrize(
    "file", ["", "../x", "a/b", "a\\b", ".", "..", MANIFEST, "/abs.jsonl", "dir\\x"]
)
def test_a_file_must_be_a_plain_name_in_the_backup(file: str) -> None:
    _refused(_text({**GOOD, "file": file}), "is not a plain name in the backup")


def test_plain_names_near_the_forbidden_ones_are_accepted() -> None:
    for file in ("...", ".x", "manifest.json.bak", "x..y"):
        assert parse_manifest(_text({**GOOD, "file": file})).members[0].file == file


@pytest.mark.parametrize("sha", ["ab" * 31 + "a", "ab" * 32 + "a", "AB" * 32, "gg" * 32, ""])
def test_a_sha256_is_exactly_64_lowercase_hex_digits(sha: str) -> None:
    _refused(_text({**GOOD, "sha256": sha}), "is not 64 lowercase hex digits")


def test_a_tenant_or_a_file_listed_twice_is_refused() -> None:
    _refused(_text(GOOD, {**GOOD, "file": "other.jsonl"}), "entry 2: tenant 'acme'.* twice")
    _refused(_text(GOOD, {**GOOD, "tenant": "beta"}), "entry 2: .*'0001-acme.jsonl' is listed")
    pair = parse_manifest(_text(GOOD, {**GOOD, "tenant": "beta", "file": "b.jsonl"}))
    assert [m.tenant for m in pair.members] == ["acme", "beta"]


@pytest.mark.parametrize("name", ["size", "runs", "records", "unreadable", "bytes"])
@pytest.mark.parametrize("value", [-1, True, 1.0, "1", None])
def test_a_count_is_a_whole_number_at_least_zero(name: str, value: object) -> None:
    _refused(_text({**GOOD, name: value}), f"entry 1: '{name}' is .*, not a whole number >= 0")


@pytest.mark.parametrize("name", ["profile", "origin", "root", "sha256", "file"])
@pytest.mark.parametrize("value", [1, None, ["x"], False])
def test_a_text_field_is_text(name: str, value: object) -> None:
    _refused(_text({**GOOD, name: value}), f"entry 1: '{name}' is .*, not text")


def test_a_missing_field_is_refused_naming_it() -> None:
    for name in FIELDS:
        item = {k: v for k, v in GOOD.items() if k != name}
        _refused(_text(item), f"'{name}' is None")
