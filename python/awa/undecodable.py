"""Undecodable jobs: parked by a worker that could not decode their
arguments (see :mod:`awa.envelope`), kept until an operator acts.

``list_jobs(state="undecodable")`` shows them, each with its reason in the
last entry of ``errors``; ``retry_undecodable`` makes them available again
(for workers that can now read them); ``cancel`` discards them. Retention
never deletes them: an undecodable job is work nobody has done yet, so it
stays until it is retried or cancelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from awa.db import Database
from awa.errors import ValidationError

#: Jobs per statement when retrying; each statement is its own transaction.
BATCH_SIZE: Final = 1000


def check_selection(ids: Sequence[int] | None, queue: str | None, kind: str | None) -> None:
    """At least one of ``ids``, ``queue`` and ``kind``, each of its type:
    retrying every undecodable job has to be asked for by naming them."""
    if ids is not None and (
        isinstance(ids, str | bytes)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise ValidationError("ids: must be a list of job ids", "ids")
    for name, value in (("queue", queue), ("kind", kind)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"{name}: must be a string", name)
    if ids is None and queue is None and kind is None:
        raise ValidationError(
            "retry_undecodable: give ids, queue or kind (undecodable jobs of every kind are "
            "rarely all readable by the same new release)",
            "ids",
        )


async def retry(
    db: Database, ids: Sequence[int] | None, queue: str | None, kind: str | None
) -> int:
    """Makes the selected undecodable jobs available now, in batches of
    :data:`BATCH_SIZE`; returns how many."""
    selected_ids = None if ids is None else list(ids)
    retried = 0
    while True:
        row = await db.fetchrow("jobs_retry_undecodable", selected_ids, queue, kind, BATCH_SIZE)
        count: int = 0 if row is None else row["retried"]
        retried += count
        if count < BATCH_SIZE:
            return retried
