"""awa._core.Dispatcher: how many jobs to claim from which queue, and which
jobs this worker holds.

A claim is plan → start (once per job the database returned) → settle;
several plans may be in flight. finish frees a slot when a handler returns,
and hands out a prefetched job waiting for it.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from awa import _core


def wanted(plan: tuple[int, list[str], list[int]] | None) -> tuple[list[str], list[int]] | None:
    """A plan without its id: ``(queues, counts)``."""
    return None if plan is None else (plan[1], plan[2])


def claim(dispatcher: _core.Dispatcher, jobs: Iterable[tuple[int, str]]) -> list[str | None]:
    """One claim round: plan, start ``(job_id, queue)`` pairs, settle.

    Returns what ``start`` said for each job. Leases are the job id * 10.
    """
    plan = dispatcher.plan_claim()
    plan_id = plan[0] if plan is not None else -1
    started = [dispatcher.start(plan_id, job_id, job_id * 10, queue) for job_id, queue in jobs]
    if plan is not None:
        dispatcher.settle_claim(plan_id)
    return started


def fill(dispatcher: _core.Dispatcher, queue: str, first_id: int, count: int) -> None:
    """Claims ``count`` jobs for ``queue`` with consecutive ids."""
    started = claim(dispatcher, ((job_id, queue) for job_id in range(first_id, first_id + count)))
    assert started == ["run"] * count


# ── planning ────────────────────────────────────────────────────────────


def test_a_plan_reserves_free_slots_up_to_the_batch_size() -> None:
    dispatcher = _core.Dispatcher([("email", 8), ("default", 32)], claim_batch_max=10)
    assert wanted(dispatcher.plan_claim()) == (["email", "default"], [8, 10])


def test_two_plans_in_flight_reserve_different_slots() -> None:
    dispatcher = _core.Dispatcher([("q", 10)], 4)
    first, second = dispatcher.plan_claim(), dispatcher.plan_claim()
    assert first is not None and second is not None
    assert first[0] != second[0]
    assert wanted(first) == wanted(second) == (["q"], [4])
    assert dispatcher.start(second[0], 1, 10, "q") == "run"
    dispatcher.settle_claim(first[0])  # came back empty
    dispatcher.settle_claim(second[0])
    assert dispatcher.running("q") == 1
    assert dispatcher.can_claim() is False  # both claims came back short


def test_a_job_counts_against_its_own_plan_only() -> None:
    dispatcher = _core.Dispatcher([("q", 10)], 2)
    first, second = dispatcher.plan_claim(), dispatcher.plan_claim()
    assert first is not None and second is not None
    assert [dispatcher.start(first[0], job_id, 1, "q") for job_id in (1, 2, 3)] == [
        "run",
        "run",
        None,
    ]
    assert dispatcher.start(second[0], 3, 1, "q") == "run"


def test_settling_an_unknown_plan_raises() -> None:
    dispatcher = _core.Dispatcher([("q", 4)], 10)
    with pytest.raises(RuntimeError, match="no claim plan 7 is pending"):
        dispatcher.settle_claim(7)
    plan = dispatcher.plan_claim()
    assert plan is not None
    dispatcher.settle_claim(plan[0])
    with pytest.raises(RuntimeError):
        dispatcher.settle_claim(plan[0])


def test_an_empty_plan_is_none_and_needs_no_settling() -> None:
    dispatcher = _core.Dispatcher([("q", 2)], 10)
    fill(dispatcher, "q", 1, 2)
    assert dispatcher.plan_claim() is None
    assert dispatcher.plan_claim() is None


def test_a_full_claim_keeps_the_queue_ready_for_the_rest() -> None:
    dispatcher = _core.Dispatcher([("q", 25)], claim_batch_max=10)
    fill(dispatcher, "q", 1, 10)
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["q"], [10])
    dispatcher.settle_claim(plan[0])


def test_the_global_cap_spans_queues() -> None:
    dispatcher = _core.Dispatcher([("a", 5), ("b", 5)], 10, global_max_workers=6)
    assert wanted(dispatcher.plan_claim()) == (["a", "b"], [3, 3])


def test_under_the_global_cap_queues_share_by_weight() -> None:
    dispatcher = _core.Dispatcher([("a", 5), ("b", 5)], 10, global_max_workers=6)
    dispatcher.set_share("a", 2, 0)
    assert wanted(dispatcher.plan_claim()) == (["a", "b"], [4, 2])


def test_a_bad_share_is_refused() -> None:
    dispatcher = _core.Dispatcher([("a", 5)], 10, global_max_workers=6)
    with pytest.raises(ValueError, match="weight must be at least 1"):
        dispatcher.set_share("a", 0, 0)
    with pytest.raises(ValueError, match="not served"):
        dispatcher.set_share("b", 1, 0)


def test_the_global_cap_counts_running_jobs() -> None:
    dispatcher = _core.Dispatcher([("a", 5), ("b", 5)], 10, global_max_workers=3)
    assert claim(dispatcher, [(1, "a"), (2, "a"), (3, "b")]) == ["run", "run", "run"]
    assert dispatcher.can_claim() is False
    assert dispatcher.plan_claim() is None
    assert dispatcher.finish(2) == (True, None)
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["a"], [1])
    dispatcher.settle_claim(plan[0])


# ── starting jobs ───────────────────────────────────────────────────────


def test_started_jobs_are_held_with_their_lease() -> None:
    dispatcher = _core.Dispatcher([("email", 2), ("default", 2)], 10)
    assert claim(dispatcher, [(1, "email"), (2, "default")]) == ["run", "run"]
    assert len(dispatcher) == 2
    assert dispatcher.lease_of(1) == 10
    assert dispatcher.lease_of(3) is None
    ids, leases = dispatcher.held()
    assert sorted(zip(ids, leases, strict=True)) == [(1, 10), (2, 20)]
    assert dispatcher.running("email") == 1
    assert dispatcher.running("default") == 1


def test_a_job_beyond_the_plan_is_not_started() -> None:
    dispatcher = _core.Dispatcher([("q", 2)], 10)
    assert claim(dispatcher, [(1, "q"), (2, "q"), (3, "q")]) == ["run", "run", None]
    assert dispatcher.lease_of(3) is None
    assert dispatcher.running("q") == 2


def test_a_job_already_held_is_not_started_twice() -> None:
    dispatcher = _core.Dispatcher([("q", 3)], 10)
    assert claim(dispatcher, [(1, "q"), (1, "q")]) == ["run", None]
    assert len(dispatcher) == 1


def test_a_job_of_an_unserved_queue_is_not_started() -> None:
    dispatcher = _core.Dispatcher([("q", 3)], 10)
    assert claim(dispatcher, [(1, "elsewhere")]) == [None]
    assert dispatcher.running("elsewhere") == 0
    assert len(dispatcher) == 0


def test_a_job_started_without_a_plan_is_refused() -> None:
    dispatcher = _core.Dispatcher([("q", 3)], 10)
    assert dispatcher.start(1, 1, 1, "q") is None


# ── settling ────────────────────────────────────────────────────────────


def test_settling_gives_back_unused_reservations() -> None:
    dispatcher = _core.Dispatcher([("q", 10)], 10)
    fill(dispatcher, "q", 1, 3)
    dispatcher.mark_ready("q")
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["q"], [7])
    dispatcher.settle_claim(plan[0])


def test_a_short_claim_marks_the_queue_empty_until_marked_ready() -> None:
    dispatcher = _core.Dispatcher([("q", 10)], 10)
    fill(dispatcher, "q", 1, 1)
    assert dispatcher.can_claim() is False
    assert dispatcher.plan_claim() is None
    assert dispatcher.mark_ready("q") is True
    assert dispatcher.can_claim() is True
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["q"], [9])
    dispatcher.settle_claim(plan[0])


def test_a_failed_claim_marks_every_planned_queue_empty() -> None:
    dispatcher = _core.Dispatcher([("a", 2), ("b", 2)], 10)
    assert claim(dispatcher, []) == []
    assert dispatcher.can_claim() is False
    dispatcher.mark_all_ready()
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["a", "b"], [2, 2])
    dispatcher.settle_claim(plan[0])


def test_marking_an_unserved_queue_ready_says_so() -> None:
    dispatcher = _core.Dispatcher([("q", 1)], 1)
    assert dispatcher.mark_ready("elsewhere") is False


def test_only_the_short_queue_is_marked_empty() -> None:
    dispatcher = _core.Dispatcher([("full", 2), ("short", 4)], 2)
    claim(dispatcher, [(1, "full"), (2, "full"), (3, "short")])
    assert dispatcher.plan_claim() is None  # "full" is at its limit, "short" drained
    dispatcher.mark_ready("short")
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["short"], [2])
    dispatcher.settle_claim(plan[0])


# ── finishing ───────────────────────────────────────────────────────────


def test_finishing_frees_the_slot_and_says_a_claim_could_take_it() -> None:
    dispatcher = _core.Dispatcher([("q", 2)], 10)
    fill(dispatcher, "q", 1, 2)
    assert dispatcher.can_claim() is False
    assert dispatcher.finish(1) == (True, None)
    assert dispatcher.running("q") == 1
    assert dispatcher.lease_of(1) is None
    plan = dispatcher.plan_claim()
    assert wanted(plan) == (["q"], [1])
    dispatcher.settle_claim(plan[0])


def test_finishing_in_a_drained_queue_says_no_claim_is_worth_it() -> None:
    dispatcher = _core.Dispatcher([("q", 5)], 10)
    fill(dispatcher, "q", 1, 2)  # short claim: the queue is drained
    assert dispatcher.finish(1) == (False, None)


def test_finishing_an_unknown_job_is_ignored() -> None:
    dispatcher = _core.Dispatcher([("q", 2)], 10)
    fill(dispatcher, "q", 1, 2)
    dispatcher.finish(99)
    dispatcher.finish(1)
    dispatcher.finish(1)
    assert dispatcher.running("q") == 1
    assert len(dispatcher) == 1


# ── configuration ───────────────────────────────────────────────────────


def test_no_queues_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one queue"):
        _core.Dispatcher([], 10)


def test_a_queue_without_workers_is_refused() -> None:
    with pytest.raises(ValueError, match='queue "q": max_workers must be at least 1'):
        _core.Dispatcher([("q", 0)], 10)


def test_a_queue_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match='queue "q" is listed twice'):
        _core.Dispatcher([("q", 1), ("q", 2)], 10)


def test_a_zero_claim_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="claim_batch_max must be at least 1"):
        _core.Dispatcher([("q", 1)], 0)


def test_a_zero_global_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="global_max_workers must be at least 1"):
        _core.Dispatcher([("q", 1)], 10, global_max_workers=0)


def test_a_failed_claim_keeps_its_queues_ready() -> None:
    dispatcher = _core.Dispatcher([("q", 4)], 10)
    first = dispatcher.plan_claim()
    assert first is not None
    dispatcher.settle_claim(first[0], failed=True)
    assert dispatcher.can_claim(), "a failed claim learned nothing about the queue"
    second = dispatcher.plan_claim()
    assert second is not None and second[2] == [4]
    dispatcher.settle_claim(second[0])  # came back empty: drained until woken
    assert not dispatcher.can_claim()


def test_a_notification_during_a_claim_in_flight_is_not_undone_by_its_short_result() -> None:
    dispatcher = _core.Dispatcher([("q", 4)], 10)
    plan = dispatcher.plan_claim()
    assert plan is not None
    assert dispatcher.mark_ready("q")  # a job committed after the claim's snapshot
    dispatcher.settle_claim(plan[0])  # the claim came back empty
    assert dispatcher.can_claim(), "the notification must not be lost"


# ── prefetch ────────────────────────────────────────────────────────────


def prefetching(max_workers: int, prefetch: int) -> _core.Dispatcher:
    """A dispatcher that has seen one short handler, so it prefetches."""
    dispatcher = _core.Dispatcher(
        [("q", max_workers)], 100, prefetch=prefetch, prefetch_wait_s=0.05
    )
    assert claim(dispatcher, [(1000, "q")]) == ["run"]
    dispatcher.mark_ready("q")
    assert dispatcher.finish(1000, 0.001) == (True, None)
    return dispatcher


def test_short_handlers_claim_ahead_and_prefetched_jobs_wait() -> None:
    dispatcher = prefetching(2, 2)
    assert wanted(dispatcher.plan_claim()) == (["q"], [4])


def test_a_freed_slot_goes_to_the_longest_waiting_job_unless_told_not_to() -> None:
    dispatcher = prefetching(2, 4)
    jobs = [(job_id, "q") for job_id in range(1, 7)]
    assert claim(dispatcher, jobs) == ["run", "run", "wait", "wait", "wait", "wait"]
    assert (dispatcher.running("q"), dispatcher.waiting("q")) == (2, 4)
    # While jobs wait, a claim waits until it can be a full one: here half
    # the allowance of 4, the other half keeping the slots busy meanwhile.
    assert dispatcher.finish(1, 0.001, True) == (False, 3), "one place of the two"
    assert dispatcher.finish(2, 0.001) == (True, None), "start_next defaults to False"
    assert (dispatcher.running("q"), dispatcher.waiting("q")) == (1, 3)
    assert sorted(dispatcher.held()[0]) == [3, 4, 5, 6]


def test_a_waiting_job_that_leaves_frees_no_running_slot() -> None:
    dispatcher = prefetching(1, 1)
    assert claim(dispatcher, [(1, "q"), (2, "q")]) == ["run", "wait"]
    assert dispatcher.finish(2, None, True) == (True, None)
    assert (dispatcher.running("q"), dispatcher.waiting("q")) == (1, 0)


def test_slow_handlers_and_a_global_cap_do_not_prefetch() -> None:
    slow = _core.Dispatcher([("q", 2)], 100, prefetch=2, prefetch_wait_s=0.05)
    assert claim(slow, [(1, "q")]) == ["run"]
    slow.mark_ready("q")
    slow.finish(1, 0.5)
    assert wanted(slow.plan_claim()) == (["q"], [2])
    capped = _core.Dispatcher([("q", 2)], 100, 10, prefetch=2, prefetch_wait_s=0.05)
    assert claim(capped, [(1, "q")]) == ["run"]
    capped.mark_ready("q")
    capped.finish(1, 0.001)
    assert wanted(capped.plan_claim()) == (["q"], [2])


def test_a_bad_prefetch_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="prefetch threshold"):
        _core.Dispatcher([("q", 1)], 1, prefetch=1, prefetch_wait_s=float("nan"))
