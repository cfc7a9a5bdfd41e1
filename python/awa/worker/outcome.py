"""What an attempt came to: the one place a handler's return value or
exception becomes an :class:`Outcome`.

``None`` → completed; any other value → completed with that value as the
job's result (JSON, at most :data:`MAX_RESULT_BYTES`; one that cannot be
stored fails the attempt for good with :class:`~awa.errors.ResultError`);
:class:`~awa.RetryAfter` → retryable (uses an
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

import traceback
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from awa import _core
from awa.errors import ResultError, TerminalError, ValidationError
from awa.hooks import CANCELLED, COMPLETED, FAILED, WAITING_FOR_CALLBACK
from awa.outcomes import Cancel, RetryAfter, Snooze, WaitForCallback

if TYPE_CHECKING:
    from awa._core import _OutcomeCode as Code
    from awa.worker.attempt import RunningJob

TRACEBACK_LINES: Final = 40
#: Snooze is a reschedule, not an outcome: no event, no follow-ups.
SNOOZED: Final = "snoozed"
#: The largest result a handler may return, as JSON: it is written with the
#: completion, in the batch that completes other jobs too.
MAX_RESULT_BYTES: Final = 64 * 1024


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
    #: What a completing handler returned, as JSON text (``None``: nothing).
    result: str | None = None

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
    try:
        text = result_json(result)
    except ResultError as error:
        return of_error(error)
    completed = _completed(job, duration_s)
    return completed._replace(result=text) if completed.code == "completed" else completed


def result_json(result: Any) -> str:
    """A handler's return value as the JSON its job stores (what
    ``_core.encode_json`` writes for arguments too); raises
    :class:`~awa.errors.ResultError` for a value JSON cannot hold or larger
    than :data:`MAX_RESULT_BYTES`."""
    try:
        text = _core.encode_json(result, "result")
    except ValidationError as error:
        raise ResultError(
            f"the handler's return value cannot be stored as the job's result ({error})",
            error.field,
        ) from None
    size = len(text.encode())
    if size > MAX_RESULT_BYTES:
        raise ResultError(
            f"the handler's return value is {size} bytes of JSON, more than the "
            f"{MAX_RESULT_BYTES} a result may hold (store bulky output in your own tables "
            "and return a reference)",
            "result",
        )
    return text


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
