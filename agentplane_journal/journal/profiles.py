"""The tenant's wire profile in the database: recorded, checked on open, migrated explicitly.

A base of :class:`~agentplane_journal.journal.store.SqlJournalStore`. Which byte format a
tenant's journal is written in (:mod:`agentplane_journal.core.profile`) is a fact about the
journal, kept in ``journal_profile`` (revision ``0005_wire_profile``), never a process
setting that two deployments could disagree on:

* **No row is ``agentplane-0.4``.** Every journal written before profiles were recorded holds
  0.4.0's bytes, so it is adopted as it is; opening it as ``agentplane-0.4`` writes nothing
  (a read-only user, a host's open transaction, a replica all keep working).
* **A tenant takes another profile only while it is empty.** Opening a tenant with no row in
  ``agentplane-0.22`` claims it: ``INSERT .. ON CONFLICT DO NOTHING`` and, in the same
  transaction, a check that the tenant holds no record; a tenant with records and no row is a
  0.4 journal and is refused (:class:`WireProfileError`), nothing written. Of two claims
  the primary key keeps one. The window left open, deliberately: a handle opened as
  ``agentplane-0.4`` on a still-empty tenant (it writes nothing, see above) does not see a
  later claim, and could append 0.4 records into it; closing it would cost a write on every
  first open or a read on every append.
* **Anything else is an explicit migration**, :meth:`Profiles.migrate_profile`: the row is
  rewritten with ``previous`` and ``changed_at``. Records already written keep their bytes and
  verify as written (verification never re-serialises); records from then on are the new
  profile's. So a migrated journal holds both, and says since when.

The check runs once per handle, before its first statement (with the schema check):
``SqlJournalStore.connect`` therefore refuses at open.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from agentplane_journal.core.profile import DEFAULT_PROFILE, WireProfile, profile_named
from agentplane_journal.db.dialect import READ_ONLY, WRITE_TRANSACTION
from agentplane_journal.db.models import Journal, JournalProfile
from agentplane_journal.db.unit import Repository, describe
from agentplane_journal.errors import BackendError, CorruptRecordError, WireProfileError

__all__ = ["Profiles"]


class Profiles(Repository):
    """The wire-profile half of the journal store (see the module docstring)."""

    #: The profile the handle was opened with (``None``: the journal's own), and the one in
    #: force once checked against the database.
    _requested_profile: WireProfile | None = None
    _profile: WireProfile | None = None

    def _request_profile(self, profile: WireProfile | str | None) -> None:
        self._requested_profile = None if profile is None else profile_named(profile)
        self._profile = None

    @property
    def profile(self) -> WireProfile:
        """The wire profile this handle writes in (``AGENTPLANE_0_4``/``AGENTPLANE_0_22``).

        Known once the handle has been checked against the database (``connect`` does it;
        a store built on an engine does it before its first statement, or at
        ``await store.wire_profile()``). Opened with an explicit profile, that one (a
        mismatch is refused at the check); opened with ``profile=None``, the journal's own.
        """
        if self._profile is not None:
            return self._profile
        if self._requested_profile is not None:
            return self._requested_profile
        raise RuntimeError(
            "this handle was opened with profile=None (the journal's own) and has not read it "
            "yet: `await store.wire_profile()` first (connect() does it at open)"
        )

    async def wire_profile(self) -> WireProfile:
        """The tenant's wire profile, checked against the database (see :attr:`profile`)."""
        await self._ready()
        return self.profile

    async def _ready(self) -> None:
        await super()._ready()
        if self._profile is None:
            try:
                self._profile = await self._check_profile()
            except WireProfileError as exc:  # its advice names this database
                raise exc.naming(self.database) from None

    async def _check_profile(self) -> WireProfile:
        requested = self._requested_profile
        try:
            async with self._bind.connect() as conn:
                conn = await conn.execution_options(**{READ_ONLY: True})
                recorded = await self._recorded(conn)
                if recorded is not None or requested in (None, DEFAULT_PROFILE):
                    found = recorded or DEFAULT_PROFILE
                    if requested is not None and requested is not found:
                        raise WireProfileError(self.tenant, found.name, requested.name)
                    return found
            assert requested is not None
            return await self._claim_profile(requested)
        except DBAPIError as exc:
            raise BackendError(f"cannot read the journal's wire profile: {describe(exc)}") from exc

    async def _recorded(self, conn: AsyncConnection) -> WireProfile | None:
        row = (
            await conn.execute(
                select(JournalProfile.profile).where(JournalProfile.tenant == self.tenant)
            )
        ).first()
        if row is None:
            return None
        try:
            return profile_named(row[0])
        except ValueError:
            raise CorruptRecordError(
                0,
                f"journal_profile names {row[0]!r} for tenant {self.tenant!r}, a wire profile "
                "this package does not know (written by a newer version, or edited)",
            ) from None

    async def _claim_profile(self, profile: WireProfile) -> WireProfile:
        """Record ``profile`` for this tenant if it holds no record yet; refuse otherwise."""
        d = self.dialect
        async with self._bind.connect() as conn:
            conn = await conn.execution_options(**{WRITE_TRANSACTION: True})
            async with conn.begin():
                stmt = d.insert(JournalProfile).values(
                    tenant=self.tenant, profile=profile.name, previous=None, changed_at=self.now()
                )
                await conn.execute(stmt.on_conflict_do_nothing(index_elements=["tenant"]))
                recorded = await self._recorded(conn)
                assert recorded is not None  # inserted, or someone else's committed row
                if recorded is not profile:
                    raise WireProfileError(self.tenant, recorded.name, profile.name)
                any_record = await conn.execute(
                    select(Journal.seq).where(Journal.tenant == self.tenant).limit(1)
                )
                if any_record.first() is not None:  # raising rolls the claim back
                    raise WireProfileError(
                        self.tenant,
                        DEFAULT_PROFILE.name,
                        profile.name,
                        " (it holds records written before wire profiles were recorded)",
                    )
        return profile

    async def migrate_profile(self, profile: WireProfile | str) -> WireProfile:
        """Record ``profile`` as this tenant's wire profile from now on; return the one it left.

        The explicit way across: records already written keep their bytes and verify as
        written, and every record appended from now on (through any handle opened in the new
        profile) is the new profile's. Handles still open in the old profile keep appending
        in it until reopened: migrate while no writer runs, and between runs (a run's records
        would otherwise be in two formats, which agentplane 0.22 cannot replay). This handle
        switches at once.
        """
        target = profile_named(profile)
        await super()._ready()
        return await self._write_profile(target, None, read_previous=True)

    async def restore_profile(
        self, profile: WireProfile | str, previous: WireProfile | str | None
    ) -> None:
        """Record ``profile`` for this tenant, which a restore is about to fill (it is empty):
        ``previous`` is the other profile the restored records are in (a migrated tenant's
        file holds both), ``None`` when every record is in ``profile``.

        An export carries no migration row, only its records: the one the target records is
        what they show. Nothing is written when the tenant already says as much (a restore
        in the default profile of records all in it leaves no row, as before profiles).
        """
        target = profile_named(profile)
        left = None if previous is None else profile_named(previous)
        if left is None and await self.wire_profile() is target:
            return
        await self._write_profile(target, left, read_previous=False)

    async def _write_profile(
        self, target: WireProfile, previous: WireProfile | None, *, read_previous: bool
    ) -> WireProfile:
        """Upsert this tenant's row: ``target``, and ``previous`` (or, ``read_previous``, the
        recorded one, the default's if none); the handle switches at once. Returns the
        ``previous`` written (the default profile for ``None``)."""
        d = self.dialect

        async def work(conn: AsyncConnection) -> WireProfile | None:
            left = (await self._recorded(conn) or DEFAULT_PROFILE) if read_previous else previous
            stmt = d.insert(JournalProfile).values(
                tenant=self.tenant,
                profile=target.name,
                previous=None if left is None else left.name,
                changed_at=self.now(),
            )
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["tenant"],
                    set_={
                        "profile": stmt.excluded.profile,
                        "previous": stmt.excluded.previous,
                        "changed_at": stmt.excluded.changed_at,
                    },
                )
            )
            return left

        try:
            async with self._bind.connect() as conn:
                conn = await conn.execution_options(**{WRITE_TRANSACTION: True})
                async with conn.begin():
                    left = await work(conn)
        except DBAPIError as exc:
            raise BackendError(f"cannot record the wire profile: {describe(exc)}") from exc
        self._requested_profile = self._profile = target
        return left or DEFAULT_PROFILE
