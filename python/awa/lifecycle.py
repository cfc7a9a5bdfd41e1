"""What happens around a committed transition: follow-up rows before the
commit, counters and hook events after it.

:class:`Lifecycle` is the client's registry of hooks and follow-up specs;
the completer (worker outcomes), the rescuer and callback resolution all go
through it, so every emission site follows the same rules:

1. inside the transition's transaction, :meth:`Lifecycle.follow_up_rows`
   builds the rows to insert (specs first, then staged follow-ups of a
   completion); a closure that raises aborts that job's transition;
2. after the commit, :meth:`Lifecycle.committed` counts staged follow-ups
   and dispatches the events.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from awa import _core, metrics
from awa.errors import FollowUpError
from awa.followups import FollowUpFailed, FollowUps, FollowUpStage
from awa.hooks import COMPLETED, Hooks, Transition
from awa.job import Job
from awa.tasks import Registry

if TYPE_CHECKING:
    from awa.db import Database

log = logging.getLogger("awa.lifecycle")


@dataclass(slots=True)
class FollowUpRows:
    """The follow-ups of a set of transitions, which rows were staged, and
    the job each row follows (``jobs_insert_follow_ups``'s second
    parameter, aligned with the rows)."""

    rows: Any  # _core.InsertRows
    staged: list[tuple[int, int]]  # [start, end) ranges of staged rows
    parents: list[int]

    def __len__(self) -> int:
        return len(self.rows)


class Lifecycle:
    """Hooks and follow-up specs registered on one client."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.hooks = Hooks()
        self.follow_ups = FollowUps()

    @property
    def observes_any(self) -> bool:
        """Whether any hook or follow-up spec is registered (most workers
        have none, and then no outcome needs its row read back)."""
        return self.hooks.any or self.follow_ups.any

    def observes(self, kind: str, outcome: str) -> bool:
        """Whether a committed ``outcome`` of ``kind`` needs its row read back."""
        return self.hooks.wants(kind) or self.follow_ups.may_follow(kind, outcome)

    def committed_job(self, row: Any) -> Job[Any]:
        return self.registry.committed_job(row)

    def follow_up_rows(
        self, transitions: Sequence[tuple[Transition, FollowUpStage | None]]
    ) -> FollowUpRows:
        """Rows to insert with these transitions: each one's spec follow-ups,
        then, for a completion, what its handler staged. Raises
        :class:`awa.followups.FollowUpFailed` for the first job whose spec fails."""
        rows = _core.InsertRows(len(transitions))
        staged: list[tuple[int, int]] = []
        parents: list[int] = []
        for transition, stage in transitions:
            first = len(rows)
            self.follow_ups.add_rows(transition, rows, self.registry)
            if transition.outcome == COMPLETED and stage is not None and stage.count:
                start = len(rows)
                rows.extend(stage.rows)
                staged.append((start, len(rows)))
            parents.extend([transition.job.id] * (len(rows) - first))
        return FollowUpRows(rows, staged, parents)

    async def insert_follow_ups(
        self,
        db: Database,
        connection: Any,
        transitions: Sequence[Transition],
        outcome: str,
        undone: str,
    ) -> None:
        """Inserts the follow-ups of the ``outcome`` specs: inside the
        transition's own transaction (callback resolution, cancellation),
        or, with ``connection`` ``None``, as a statement of its own after it
        (rescue, best effort). A spec that fails raises
        :class:`awa.FollowUpError`, ``undone`` saying what that leaves."""
        wanted = [(t, None) for t in transitions if self.follow_ups.wants(t.job.kind, outcome)]
        if not wanted:
            return
        try:
            follow_ups = self.follow_up_rows(wanted)
        except FollowUpFailed as failed:
            raise FollowUpError(f"{failed}; {undone}") from failed.error
        if len(follow_ups):
            inserted_keys = await db.fetchval(
                "jobs_insert_follow_ups", follow_ups.rows.json_rows(), follow_ups.parents,
                connection=connection,
            )  # fmt: skip
            metrics.add(metrics.FOLLOW_UPS_WRITTEN, len(follow_ups.rows.written(inserted_keys)))

    def committed(
        self,
        transitions: Sequence[Transition],
        follow_ups: FollowUpRows | None,
        inserted_keys: list[bytes] | None,
    ) -> None:
        """After the commit: counts follow-ups (``inserted_keys`` is what
        ``jobs_insert_follow_ups`` returned) and dispatches events."""
        if follow_ups is not None and len(follow_ups):
            metrics.add(metrics.FOLLOW_UPS_WRITTEN, len(follow_ups.rows.written(inserted_keys)))
        if follow_ups is not None and follow_ups.staged:
            positions = set(follow_ups.rows.written(inserted_keys))
            for start, end in follow_ups.staged:
                inserted = sum(1 for row in range(start, end) if row in positions)
                metrics.add(
                    metrics.STAGED_FOLLOW_UPS_COMMITTED,
                    inserted,
                    **{metrics.FOLLOW_UP_RESULT: "inserted"},
                )
                metrics.add(
                    metrics.STAGED_FOLLOW_UPS_COMMITTED,
                    end - start - inserted,
                    **{metrics.FOLLOW_UP_RESULT: "duplicate"},
                )
        for transition in transitions:
            self.hooks.emit(transition)
