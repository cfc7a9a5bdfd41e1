"""Quarantine of crash-looping fingerprints, for operators.

A fingerprint is a job's kind plus its arguments (``awa.job_fingerprint``
in SQL: 16 bytes of SHA-256 over the kind and the canonical jsonb text).
The maintenance leader counts worker crashes per fingerprint and
quarantines one that crashes ``quarantine_threshold`` times within
``quarantine_window``. Workers keep the quarantined set in memory (told
through ``awa_control``, reloaded every 30 s anyway): a claimed job with a
quarantined fingerprint is given back unrun and parked (``scheduled`` at
``infinity``, attempt refunded), so the claim itself costs nothing more.
:func:`list_quarantine` shows why; :func:`release` sets the parked jobs due.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from awa.db import Database
from awa.errors import ValidationError


@dataclass(frozen=True, slots=True)
class QuarantinedFingerprint:
    """A fingerprint that crashed workers, and whether it is held."""

    fingerprint: str  # hex, as release_quarantine takes it
    kind: str
    crashes: int
    window_started_at: datetime.datetime
    last_crash_at: datetime.datetime
    last_job_id: int
    quarantined_at: datetime.datetime | None
    reason: str | None

    @property
    def held(self) -> bool:
        return self.quarantined_at is not None


async def list_quarantine(db: Database, watching: bool) -> list[QuarantinedFingerprint]:
    rows = await db.fetch("quarantine_list", watching)
    return [
        QuarantinedFingerprint(
            fingerprint=row["fingerprint"].hex(),
            kind=row["kind"],
            crashes=row["crashes"],
            window_started_at=row["window_started_at"],
            last_crash_at=row["last_crash_at"],
            last_job_id=row["last_job_id"],
            quarantined_at=row["quarantined_at"],
            reason=row["reason"],
        )
        for row in rows
    ]


async def release(db: Database, fingerprint: Any) -> bool:
    row = await db.fetchrow("quarantine_release", _fingerprint_bytes(fingerprint))
    return row is not None and row["kind"] is not None


def _fingerprint_bytes(value: Any) -> bytes:
    if isinstance(value, QuarantinedFingerprint):
        value = value.fingerprint
    if isinstance(value, bytes) and len(value) == 16:
        return value
    if isinstance(value, str):
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = b""
        if len(raw) == 16:
            return raw
    raise ValidationError(
        f"fingerprint: must be 32 hex characters or 16 bytes (got {value!r})", "fingerprint"
    )
