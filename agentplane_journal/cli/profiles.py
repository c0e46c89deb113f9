"""``profile`` and ``migrate-profile``: a tenant's wire profile, read and changed explicitly.

The profile is recorded per tenant (``journal_profile``); see docs/concepts/wire-profiles.md.
Migrating is the one explicit way across: records already written keep their bytes and
verify as written, records from then on are the new profile's.
"""

from __future__ import annotations

import argparse

from agentplane_journal.cli import format as fmt
from agentplane_journal.cli.db import _store
from agentplane_journal.core.profile import WireProfile


def _shape(tenant: str, profile: WireProfile) -> dict[str, object]:
    return {
        "tenant": tenant,
        "profile": profile.name,
        "record_version": profile.record_version,
        "canon_version": profile.canon_version,
    }


async def cmd_profile(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        profile = await store.wire_profile()
    if args.json:
        fmt.print_json(_shape(store.tenant, profile))
    else:
        canon = "none" if profile.canon_version is None else str(profile.canon_version)
        print(
            f"tenant {store.tenant!r}: wire profile {profile.name} "
            f"(record v{profile.record_version}, canon version {canon})"
        )
    return 0


async def cmd_migrate_profile(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        previous = await store.migrate_profile(args.profile)
        profile = store.profile
    if args.json:
        fmt.print_json({**_shape(store.tenant, profile), "previous": previous.name})
    else:
        print(
            f"tenant {store.tenant!r}: wire profile {previous.name} -> {profile.name}; records "
            "already written keep their bytes and verify as written, new records are "
            f"{profile.name}'s (reopen every writer)"
        )
    return 0
