"""What an attempt came to: the one place a handler's return value or
exception becomes an :class:`Outcome`.

``None`` → completed; :class:`~awa.RetryAfter` → retryable (uses an
attempt); :class:`~awa.Snooze` → scheduled (does not); :class:`~awa.Cancel`
→ cancelled; :class:`~awa.WaitForCallback` → parked for the callback this
attempt registered; :class:`~awa.TerminalError` → failed; any other
exception → retryable with backoff until ``max_attempts``, then failed.
Two rules guard against losing work silently: a handler that swallowed a
:class:`~awa.StagingError` and returned normally fails for good (its
follow-up would be lost), and ``WaitForCallback`` with an id this attempt
did not register is a failure.

The Rust core (``CompletionBatch.record``) turns the value into the row
written; hooks and follow-ups see its ``event``.
"""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from awa.errors import TerminalError
from awa.hooks import CANCELLED, COMPLETED, FAILED, WAITING_FOR_CALLBACK
from awa.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback

if TYPE_CHECKING:
    from awa._core import _OutcomeCode as Code
    from awa.worker.attempt import RunningJob

log = logging.getLogger("awa.executor")

TRACEBACK_LINES: Final = 40
#: Snooze is a reschedule, not an outcome: no event, no follow-ups.
SNOOZED: Final = "snoozed"

_warned_return_kinds: set[str] = set()


class Outcome(NamedTuple):
    """One attempt's result, as the completer records it.

    ``code`` is what ``CompletionBatch.record`` takes (``completed``,
    ``retry_after``, ``snooze``, ``waiting_for_callback``, ``cancelled``,
    ``failed``, ``failed_terminal``); ``event`` the transition hooks and
    follow-up specs see once it commits (``failed`` becomes ``retried`` or
    ``exhausted`` by the committed state; ``snoozed`` fires nothing).
    """

    code: Code
    event: str
    delay_s: float | None = None
    error_type: str = ""
    message: str = ""
    traceback: str | None = None
    duration_s: float = 0.0

    @property
    def error_text(self) -> str:
        """``"<Type>: <message>"`` for a failure, the reason for a cancel."""
        if self.code == "cancelled":
            return ""
        return f"{self.error_type}: {self.message}" if self.error_type else ""

    @property
    def reason(self) -> str:
        return self.message if self.code == "cancelled" else ""


def of_result(job: RunningJob[Any], result: Any, duration_s: float) -> Outcome:
    """The outcome of a handler that returned ``result``."""
    if result is None:
        stage = job._stage
        if stage is None or stage.error is None:  # the common case, inline
            return Outcome("completed", COMPLETED, None, "", "", None, duration_s)
        return _completed(job, duration_s)
    if isinstance(result, RetryAfter):
        return Outcome(
            "retry_after",
            FAILED,
            delay_s=result.seconds,
            error_type="RetryAfter",
            message=f"the handler asked to retry in {result.seconds:g}s",
        )
    if isinstance(result, Snooze):
        return Outcome("snooze", SNOOZED, delay_s=result.seconds)
    if isinstance(result, WaitForCallback):
        if job.callback_id is None or result.callback_id != job.callback_id:
            return of_error(
                TypeError(
                    "the handler returned WaitForCallback without the callback id "
                    "that `await job.register_callback()` gave this attempt"
                )
            )
        return Outcome("waiting_for_callback", WAITING_FOR_CALLBACK)
    if isinstance(result, Cancel):
        return Outcome("cancelled", CANCELLED, message=str(result.reason))
    if job.kind not in _warned_return_kinds:
        _warned_return_kinds.add(job.kind)
        log.warning(
            "handler for %r returned %r; only None, RetryAfter, Snooze, Cancel and "
            "WaitForCallback mean something, so the job is marked completed",
            job.kind,
            type(result).__name__,
        )
    return _completed(job, duration_s)


def of_error(error: BaseException) -> Outcome:
    """The outcome of a handler that raised ``error``: a terminal failure for
    :class:`~awa.TerminalError`, else a failed attempt (retried while
    attempts remain)."""
    return Outcome(
        "failed_terminal" if isinstance(error, TerminalError) else "failed",
        FAILED,
        error_type=type(error).__name__,
        message=str(error),
        traceback=_traceback_tail(error),
    )


def _completed(job: RunningJob[Any], duration_s: float) -> Outcome:
    stage = job._stage
    if stage is not None and stage.error is not None:
        # The handler swallowed a StagingError: completing without the
        # follow-up it meant to stage would lose it silently.
        return of_error(stage.error)
    return Outcome("completed", COMPLETED, None, "", "", None, duration_s)


def _traceback_tail(error: BaseException) -> str:
    lines = traceback.format_exception(error)
    return "".join(lines[-TRACEBACK_LINES:])
