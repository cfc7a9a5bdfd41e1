"""awa._core.CompletionBatch, backoff_seconds and plan_rescue: outcomes become
one guarded row each, handed out as one list per column.

Columns are ``(ids, run_leases, states, delays_s, refunds, errors)``; an
error is a JSON object appended to the job's history.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from awa import _core

NOW = 1_000.0
SEED = 7
ONE_DAY_S = 86_400.0


class Row(NamedTuple):
    """One row of ``take()``, with its error entry decoded."""

    id: int
    run_lease: int
    state: str
    delay_s: float | None
    refund: int
    error: dict[str, Any] | None


def rows(columns: tuple[list[Any], ...]) -> list[Row]:
    ids, leases, states, delays, refunds, errors = columns
    assert len({len(column) for column in columns}) == 1, "columns differ in length"
    return [
        Row(id, lease, state, delay, refund, None if error is None else _core.decode_json(error))
        for id, lease, state, delay, refund, error in zip(
            ids, leases, states, delays, refunds, errors, strict=True
        )
    ]


def only_row(batch: _core.CompletionBatch) -> Row:
    [row] = rows(batch.take().params())
    return row


def new_batch(
    max_rows: int = 100, max_age_s: float = 0.5, seed: int = SEED
) -> _core.CompletionBatch:
    return _core.CompletionBatch(max_rows, max_age_s, seed)


def in_backoff_range(delay: float | None, failures: int) -> bool:
    """Whether ``delay`` is ``2**failures`` plus at most 25 % jitter, capped at a day."""
    assert delay is not None
    base = min(2.0**failures, ONE_DAY_S)
    return base <= delay <= min(base * 1.25, ONE_DAY_S)


# ── each outcome through CompletionBatch.record ─────────────────────────


def completed(batch: _core.CompletionBatch, job_id: int, run_lease: int, now: float) -> str:
    return batch.record(job_id, run_lease, 1, 1, 0, "completed", now)


def retry_after(
    batch: _core.CompletionBatch,
    job_id: int,
    run_lease: int,
    attempt_no: int,
    max_attempts: int,
    crashes: int,
    delay_s: float,
    now: float,
) -> str:
    return batch.record(
        job_id, run_lease, attempt_no, max_attempts, crashes, "retry_after", now, delay_s
    )


def snooze(
    batch: _core.CompletionBatch, job_id: int, run_lease: int, delay_s: float, now: float
) -> str:
    return batch.record(job_id, run_lease, 1, 1, 0, "snooze", now, delay_s)


def cancelled(
    batch: _core.CompletionBatch,
    job_id: int,
    run_lease: int,
    attempt_no: int,
    reason: str,
    now: float,
) -> str:
    return batch.record(job_id, run_lease, attempt_no, 1, 0, "cancelled", now, None, "", reason)


def failed_terminal(
    batch: _core.CompletionBatch,
    job_id: int,
    run_lease: int,
    attempt_no: int,
    error_type: str,
    message: str,
    traceback: str | None,
    now: float,
) -> str:
    return batch.record(
        job_id, run_lease, attempt_no, 1, 0, "failed_terminal", now, None, error_type, message,
        traceback,
    )  # fmt: skip


def failed(
    batch: _core.CompletionBatch,
    job_id: int,
    run_lease: int,
    attempt_no: int,
    max_attempts: int,
    crashes: int,
    error_type: str,
    message: str,
    traceback: str | None,
    now: float,
) -> str:
    return batch.record(
        job_id, run_lease, attempt_no, max_attempts, crashes, "failed", now, None, error_type,
        message, traceback,
    )  # fmt: skip


# ── one row per outcome ─────────────────────────────────────────────────


def test_completed_is_a_plain_completed_row() -> None:
    batch = new_batch()
    completed(batch, 1, 10, NOW)
    assert only_row(batch) == Row(1, 10, "completed", None, 0, None)


def test_retry_after_with_attempts_left_is_retryable_after_the_delay() -> None:
    batch = new_batch()
    state = retry_after(
        batch, 2, 20, attempt_no=1, max_attempts=25, crashes=0, delay_s=30.0, now=NOW
    )
    assert state == "retryable"
    assert only_row(batch) == Row(2, 20, "retryable", 30.0, 0, None)


def test_retry_after_without_attempts_left_fails_the_job() -> None:
    batch = new_batch()
    state = retry_after(batch, 3, 30, attempt_no=3, max_attempts=3, crashes=0, delay_s=1.0, now=NOW)
    assert state == "failed"
    assert only_row(batch) == Row(
        3,
        30,
        "failed",
        None,
        0,
        {
            "attempt": 3,
            "type": "RetryAfter",
            "message": "a retry was requested, but no attempts are left",
            "outcome": "failed",
            "reason": "max_attempts_exhausted",
        },
    )


def test_retry_after_does_not_count_crashes_as_attempts() -> None:
    batch = new_batch()
    state = retry_after(batch, 4, 40, attempt_no=3, max_attempts=2, crashes=2, delay_s=5.0, now=NOW)
    assert state == "retryable"


def test_a_negative_delay_counts_as_none() -> None:
    batch = new_batch()
    retry_after(batch, 1, 1, 1, 25, 0, -5.0, NOW)
    snooze(batch, 2, 2, -5.0, NOW)
    assert [row.delay_s for row in rows(batch.take().params())] == [0.0, 0.0]


def test_snooze_is_scheduled_and_refunds_the_attempt() -> None:
    batch = new_batch()
    snooze(batch, 5, 50, 12.5, NOW)
    assert only_row(batch) == Row(5, 50, "scheduled", 12.5, 1, None)


def test_cancelled_records_the_reason() -> None:
    batch = new_batch()
    cancelled(batch, 6, 60, 2, "not needed any more", NOW)
    assert only_row(batch) == Row(
        6,
        60,
        "cancelled",
        None,
        0,
        {"attempt": 2, "type": "Cancel", "message": "not needed any more", "outcome": "cancelled"},
    )


def test_failed_terminal_records_the_error_and_traceback() -> None:
    batch = new_batch()
    failed_terminal(batch, 7, 70, 1, "ValueError", "boom", "Traceback …\nValueError: boom", NOW)
    assert only_row(batch) == Row(
        7,
        70,
        "failed",
        None,
        0,
        {
            "attempt": 1,
            "type": "ValueError",
            "message": "boom",
            "traceback": "Traceback …\nValueError: boom",
            "outcome": "failed",
            "reason": "terminal_error",
        },
    )


def test_an_error_without_a_traceback_has_no_traceback_entry() -> None:
    batch = new_batch()
    failed_terminal(batch, 7, 70, 1, "ValueError", "boom", None, NOW)
    error = only_row(batch).error
    assert error is not None
    assert "traceback" not in error


def test_failed_with_attempts_left_is_retryable_with_backoff() -> None:
    batch = new_batch()
    assert failed(batch, 8, 80, 1, 25, 0, "OSError", "disk full", None, NOW) == "retryable"
    row = only_row(batch)
    assert (row.state, row.refund) == ("retryable", 0)
    assert in_backoff_range(row.delay_s, failures=1)
    assert row.error == {
        "attempt": 1,
        "type": "OSError",
        "message": "disk full",
        "outcome": "retryable",
    }


def test_failed_on_the_last_attempt_fails_the_job() -> None:
    batch = new_batch()
    assert failed(batch, 9, 90, 25, 25, 0, "OSError", "disk full", "tb", NOW) == "failed"
    row = only_row(batch)
    assert (row.state, row.delay_s) == ("failed", None)
    assert row.error is not None
    assert row.error["outcome"] == "failed"


def test_backoff_counts_failures_not_crashes() -> None:
    batch = new_batch()
    # Third claim, two of which crashed: this is the first failure.
    assert failed(batch, 1, 1, 3, 2, 2, "E", "m", None, NOW) == "retryable"
    assert in_backoff_range(only_row(batch).delay_s, failures=1)


@pytest.mark.parametrize("attempt", [1, 2, 5, 10, 16, 17, 30, 999])
def test_backoff_grows_as_two_to_the_failures_and_caps_at_a_day(attempt: int) -> None:
    batch = new_batch()
    failed(batch, 1, 1, attempt, 1000, 0, "E", "m", None, NOW)
    assert in_backoff_range(only_row(batch).delay_s, failures=attempt)


def test_the_same_seed_gives_the_same_jitter() -> None:
    delays = []
    for _ in range(2):
        batch = new_batch(seed=42)
        for job_id in range(1, 6):
            failed(batch, job_id, 1, 3, 25, 0, "E", "m", None, NOW)
        delays.append([row.delay_s for row in rows(batch.take().params())])
    assert delays[0] == delays[1]
    assert len(set(delays[0])) == 5, "each failure draws its own jitter"


def test_nul_in_error_text_is_replaced_so_the_entry_stays_valid_jsonb() -> None:
    batch = new_batch()
    failed_terminal(batch, 1, 1, 1, "Bad\0Type", "line\0two", "tb\0", NOW)
    error = only_row(batch).error
    assert error is not None
    assert (error["type"], error["message"], error["traceback"]) == (
        "Bad\ufffdType",
        "line\ufffdtwo",
        "tb\ufffd",
    )


def test_long_messages_keep_their_head_and_say_how_much_was_cut() -> None:
    batch = new_batch()
    cancelled(batch, 1, 1, 1, "m" * 2_000 + "x" * 500, NOW)
    error = only_row(batch).error
    assert error is not None
    assert error["message"] == "m" * 2_000 + "… [500 more characters]"


def test_long_tracebacks_keep_their_tail() -> None:
    batch = new_batch()
    failed_terminal(batch, 1, 1, 1, "E", "m", "x" * 1_000 + "t" * 4_000, NOW)
    error = only_row(batch).error
    assert error is not None
    assert error["traceback"] == "[1000 earlier characters] …" + "t" * 4_000


# ── flushing ────────────────────────────────────────────────────────────


def test_an_empty_batch_is_never_due() -> None:
    batch = new_batch(max_rows=1, max_age_s=0.0)
    assert batch.is_due(NOW + 1e9) is False
    assert batch.due_in(NOW) is None


def test_a_batch_is_due_when_the_oldest_row_is_old_enough() -> None:
    batch = new_batch(max_rows=100, max_age_s=0.25)
    completed(batch, 1, 1, NOW)
    completed(batch, 2, 2, NOW + 0.2)
    assert batch.is_due(NOW + 0.125) is False
    assert batch.due_in(NOW + 0.125) == pytest.approx(0.125)
    assert batch.is_due(NOW + 0.25) is True
    assert batch.due_in(NOW + 0.3) == 0.0


def test_a_batch_is_due_as_soon_as_it_is_full() -> None:
    batch = new_batch(max_rows=3, max_age_s=60.0)
    for job_id in range(1, 3):
        completed(batch, job_id, 1, NOW)
    assert batch.is_due(NOW) is False
    snooze(batch, 3, 1, 1.0, NOW)
    assert len(batch) == 3
    assert batch.is_due(NOW) is True
    assert batch.due_in(NOW) == 0.0


def test_take_hands_out_at_most_one_batch_oldest_first() -> None:
    batch = new_batch(max_rows=2, max_age_s=0.25)
    completed(batch, 1, 10, NOW)
    snooze(batch, 2, 20, 1.0, NOW)
    cancelled(batch, 3, 30, 1, "no", NOW)
    assert [row.id for row in rows(batch.take().params())] == [1, 2]
    assert len(batch) == 1
    assert batch.due_in(NOW) == 0.0  # left over from a due batch: due at once
    assert [row.id for row in rows(batch.take().params())] == [3]
    assert len(batch) == 0
    assert batch.take().params() == ([], [], [], [], [], [])
    assert batch.is_due(NOW + 100) is False


def test_the_age_trigger_restarts_after_take() -> None:
    batch = new_batch(max_rows=100, max_age_s=1.0)
    completed(batch, 1, 1, NOW)
    batch.take()
    completed(batch, 2, 2, NOW + 10)
    assert batch.is_due(NOW + 10.5) is False
    assert batch.due_in(NOW + 10.5) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("max_rows", "max_age_s"),
    [(0, 1.0), (1, -1.0), (1, float("nan")), (1, float("inf"))],
)
def test_bad_flush_settings_are_refused(max_rows: int, max_age_s: float) -> None:
    with pytest.raises(ValueError):
        _core.CompletionBatch(max_rows, max_age_s, SEED)


# ── backoff ─────────────────────────────────────────────────────────────


def test_backoff_without_jitter_is_two_to_the_failures() -> None:
    assert [_core.backoff_seconds(n, 0.0) for n in (1, 2, 3, 10)] == [2.0, 4.0, 8.0, 1024.0]


def test_jitter_adds_at_most_a_quarter() -> None:
    assert _core.backoff_seconds(4, 0.5) == 18.0
    assert _core.backoff_seconds(4, 0.999_999) < 20.0
    assert _core.backoff_seconds(4, 7.0) == 20.0  # unit is clamped to [0, 1]
    assert _core.backoff_seconds(4, -1.0) == 16.0


def test_backoff_never_exceeds_a_day() -> None:
    assert _core.MAX_BACKOFF_S == ONE_DAY_S
    assert _core.backoff_seconds(16, 0.999) < ONE_DAY_S
    assert _core.backoff_seconds(17, 0.0) == ONE_DAY_S
    assert _core.backoff_seconds(10_000, 0.5) == ONE_DAY_S


# ── rescue ──────────────────────────────────────────────────────────────


def rescue(
    *orphans: tuple[int, int, int | None], reason: str = "worker stopped heartbeating"
) -> list[Row]:
    """Plans the rescue of ``(job_id, crashes, max_crashes)`` orphans.

    Each is on attempt ``crashes + 1`` of 25, with run lease ``job_id * 10``.
    """
    ids = [job_id for job_id, _, _ in orphans]
    crashes = [count for _, count, _ in orphans]
    return rows(
        _core.plan_rescue(
            ids,
            [job_id * 10 for job_id in ids],
            [count + 1 for count in crashes],
            [25] * len(ids),
            crashes,
            [limit for _, _, limit in orphans],
            reason,
            SEED,
        )
    )


def test_a_crash_within_the_budget_is_retryable_after_a_crash_backoff() -> None:
    [row] = rescue((1, 2, 5))
    assert (row.id, row.run_lease, row.state, row.refund) == (1, 10, "retryable", 0)
    assert in_backoff_range(row.delay_s, failures=3)
    assert row.error == {
        "attempt": 3,
        "type": "WorkerCrash",
        "message": "worker stopped heartbeating",
        "outcome": "retryable",
    }


def test_a_crash_past_the_budget_fails_with_crash_loop() -> None:
    [row] = rescue((2, 5, 5))
    assert (row.state, row.delay_s) == ("failed", None)
    assert row.error == {
        "attempt": 6,
        "type": "WorkerCrash",
        "message": "crash_loop: the worker died during 6 attempts (max_crashes is 5); "
        "worker stopped heartbeating",
        "outcome": "failed",
        "reason": "crash_loop",
    }


def test_zero_max_crashes_fails_on_the_first_crash() -> None:
    [row] = rescue((1, 0, 0))
    assert row.state == "failed"


def test_unbounded_max_crashes_always_retries() -> None:
    [row] = rescue((1, 400, None))
    assert row.state == "retryable"
    assert row.delay_s == ONE_DAY_S


def test_rescue_plans_one_row_per_orphan_in_order() -> None:
    planned = rescue((3, 0, 5), (1, 5, 5), (2, 1, None))
    assert [(row.id, row.state) for row in planned] == [
        (3, "retryable"),
        (1, "failed"),
        (2, "retryable"),
    ]


def test_rescuing_nothing_plans_nothing() -> None:
    assert _core.plan_rescue([], [], [], [], [], [], "gone", SEED) == ([], [], [], [], [], [])


def test_rescue_columns_must_have_one_value_per_job() -> None:
    with pytest.raises(ValueError, match="one value per job"):
        _core.plan_rescue([1, 2], [1], [1, 1], [25, 25], [0, 0], [None, None], "gone", SEED)


def test_the_python_dead_letter_reasons_are_the_cores():
    from awa import _core
    from awa.dead_letters import DeadLetterReason

    assert [reason.value for reason in DeadLetterReason] == list(_core.FAILURE_REASONS)


def test_record_refuses_an_unknown_outcome_and_a_missing_delay() -> None:
    batch = new_batch()
    with pytest.raises(ValueError, match="unknown outcome"):
        batch.record(1, 1, 1, 1, 0, "exploded", NOW)
    with pytest.raises(ValueError, match="delay_s"):
        batch.record(1, 1, 1, 1, 0, "snooze", NOW)
    assert len(batch) == 0


def test_a_taken_flush_lists_its_ids_and_can_lose_a_row() -> None:
    batch = new_batch()
    for job_id in (1, 2, 3):
        completed(batch, job_id, job_id * 10, NOW)
    assert batch.ids() == [1, 2, 3]
    flush = batch.take()
    assert (flush.ids, len(flush), len(batch)) == ([1, 2, 3], 3, 0)
    assert flush.remove(2) is True
    assert flush.remove(2) is False
    assert [row.id for row in rows(flush.params())] == [1, 3]
    assert [row.run_lease for row in rows(flush.params())] == [10, 30]
