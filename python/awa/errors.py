"""The exceptions awa raises. Every one derives from :class:`AwaError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class AwaError(Exception):
    """Base class of every error awa raises on purpose."""


class ValidationError(AwaError, ValueError):
    """A value breaks an insert limit; raised before any SQL runs.

    ``field`` names the offending value, as precisely as awa can tell:
    ``priority``, ``tags[3]``, ``args.items[2].name``, ``run_at``.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SchemaNotMigrated(AwaError):
    """The database schema is older than this version of awa needs."""

    def __init__(self, found: int | None, needed: int, database: str | None = None) -> None:
        name = "the database" if database is None else f'database "{database}"'
        where = "has no awa schema" if found is None else f"is at awa schema version {found}"
        super().__init__(
            f"{name} {where}; this awa needs version {needed}. "
            "Run `awa migrate` or `await client.migrate()` first."
        )
        self.found = found
        self.needed = needed
        self.database = database


class ConnectionFailed(AwaError, ConnectionError):
    """awa could not open a connection to the database: the message names
    the host, port, role and database, and the server's or the network's
    reason (the password never appears)."""

    def __init__(self, message: str, *, host: str, port: int, user: str, database: str) -> None:
        super().__init__(message)
        self.host = host
        self.port = port
        self.user = user
        self.database = database


class JobNotFound(AwaError, LookupError):
    """No job has the requested id."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"there is no job with id {job_id}")
        self.job_id = job_id


class PeriodicNotFound(ValidationError, LookupError):
    """No periodic job has the requested name (a :class:`ValidationError`
    of ``name``, as before it had a class of its own)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"name: no periodic job is named {name!r}", "name")
        self.name = name


class TerminalError(AwaError):
    """Raise from a handler to fail the job now, without retries."""


class UnknownJobKind(TerminalError):
    """A worker claimed a job whose kind no task of it handles. The job never
    runs there: it is parked ``undecodable`` (reason ``unknown_kind``) with
    its attempt given back, and its error entry has this type. Send it back
    (``retry_undecodable(kind=...)``) once workers that handle the kind are
    deployed."""


class ArgsNotDecodable(TerminalError):
    """A claimed job's stored arguments cannot become its task's argument
    type: written at a newer schema version than the task's, an upcaster
    failed, or they do not validate (inserted by another release, or
    edited). The job never runs: it is parked ``undecodable`` with its
    attempt given back, and its error entry has this type. Deploy workers
    that can read it, or fix the arguments, then ``retry_undecodable``."""


class ConfigurationError(AwaError, ValueError):
    """A worker or client setting is invalid (bad queue list, interval, …)."""


class StagingError(TerminalError):
    """``job.enqueue_on_completion`` refused a follow-up.

    Raised while staging, before anything is written: the follow-up breaks an
    insert limit (``field`` names it), the attempt already staged 16
    follow-ups or 64 KiB of them (``field`` is ``follow_ups``), or the handler
    has returned and staging is closed (``field`` is ``None``). It is a
    :class:`TerminalError`: the attempt fails without retries, and it still
    fails if the handler catches the error and returns normally.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UniqueConflict(AwaError):
    """A job could not take its unique key: another job already holds it.

    Raised by an insert with ``unique_opts`` that met such a job, and by
    ``retry_from_dlq`` for dead letters it could not send back (the rest of
    the redrive went ahead and committed). ``existing_id`` is the job that
    holds the key (``None`` if it finished and was pruned between the insert
    and the lookup). For a redrive, ``job_id`` is the dead letter left
    ``failed`` (the first, if several were), ``conflicts`` lists every
    ``(dead letter id, holder id)`` pair, and ``redriven`` the ids that were
    sent back, as ``retry_from_dlq`` would have returned them.
    """

    def __init__(
        self,
        existing_id: int | None,
        *,
        job_id: int | None = None,
        conflicts: Sequence[tuple[int, int]] = (),
        redriven: Sequence[int] = (),
    ) -> None:
        self.existing_id = existing_id
        self.job_id = job_id
        self.conflicts = list(conflicts)
        self.redriven = list(redriven)
        if job_id is None:
            where = "" if existing_id is None else f" (job {existing_id})"
            message = f"a job with the same unique key already exists{where}"
        else:
            message = (
                f"dead letter {job_id} was not redriven: job {existing_id} holds its unique key"
            )
            if len(self.conflicts) > 1:
                message += f" ({len(self.conflicts) - 1} more dead letters likewise)"
            message += f"; {len(self.redriven)} redriven"
        super().__init__(message)


class CallbackNotFound(AwaError, LookupError):
    """No parked job waits for this callback id: it is unknown, was already
    resolved, or belongs to an attempt that was rescued or re-registered."""

    def __init__(self, callback_id: object) -> None:
        super().__init__(f"no job is waiting for callback {callback_id}")
        self.callback_id = callback_id


class FollowUpError(AwaError):
    """A follow-up spec failed while resolving a callback; the resolution was
    rolled back with it and can be retried. The spec's error is ``__cause__``."""


class AttemptLost(AwaError):
    """The running attempt no longer holds its job: a callback resolved it,
    its callback expired, or it was rescued. Raised to a handler waiting in
    place (``job.wait_for_callback``); whatever that attempt writes
    afterwards is refused, so letting it propagate is the right thing."""

    def __init__(self, job_id: int, why: str) -> None:
        super().__init__(f"job {job_id}: this attempt no longer holds the job ({why})")
        self.job_id = job_id


class CallbackNotResumable(AwaError):
    """``resume_external`` found the callback's job parked by a handler that
    returned ``WaitForCallback``: no handler waits to be resumed. Resolve it
    with ``complete_external``, ``fail_external`` or ``retry_external``."""

    def __init__(self, callback_id: object, job_id: int) -> None:
        super().__init__(
            f"job {job_id} is parked on callback {callback_id} with no handler waiting in "
            "place (it returned WaitForCallback); use complete_external, fail_external or "
            "retry_external"
        )
        self.callback_id = callback_id
        self.job_id = job_id


class AttemptTimeout(AwaError):
    """The attempt ran past its deadline (its task's or queue's ``timeout``):
    the worker cancelled the handler, or maintenance rescued the attempt.
    Recorded as a failed attempt, retried while attempts remain."""


class PayloadOmitted(AwaError):
    """The job was read for inspection without ``include_payload=True``, so
    its ``args`` and ``metadata`` were never fetched (they may hold personal
    data). Ask for them explicitly where they are needed."""

    def __init__(self, job_id: int) -> None:
        super().__init__(
            f"job {job_id} was read without include_payload=True: its args and metadata "
            "were not fetched"
        )
        self.job_id = job_id


def check_text(value: Any, field: str, max_chars: int) -> str:
    """``value`` if it is a string of 1 to ``max_chars`` characters without
    NUL (a reason, a name, who did something); else :class:`ValidationError`
    naming ``field``."""
    if not isinstance(value, str) or not value or len(value) > max_chars:
        raise ValidationError(
            f"{field}: must be a non-empty string of at most {max_chars} characters", field
        )
    if "\x00" in value:
        raise ValidationError(f"{field}: must not contain NUL characters", field)
    return value


class ProgressError(ValidationError):
    """``job.set_progress`` refused a report: ``percent`` is not a number
    from 0 to 100, a ``message`` is not a string, the ``data`` cannot be
    stored as JSON, or the whole report is larger than
    ``awa.worker.progress.MAX_PROGRESS_BYTES``. ``field`` names the value.
    Raised to the handler at once; nothing is kept or written."""


class ResultError(TerminalError):
    """A handler returned a value that cannot be stored as the job's result:
    it is not JSON-serialisable (``field`` names the offending value, as
    ``result.items[2]``), or its JSON is larger than
    ``awa.worker.outcome.MAX_RESULT_BYTES``. The attempt fails for good (a
    :class:`TerminalError`): running the handler again would only return
    the same kind of value, after redoing its work."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class JobNotCompleted(AwaError):
    """``client.result`` waited for a job that ended without completing.

    ``state`` is ``failed`` (its attempts ran out, a handler raised a
    :class:`TerminalError`, or maintenance failed it: it is now a dead
    letter, and ``reason`` is its ``failure_reason``, such as
    ``max_attempts_exhausted``) or ``cancelled``; ``error`` is the last
    error entry's ``"<Type>: <message>"`` (for a cancel, its reason), or
    ``""`` when there is none."""

    def __init__(self, job_id: int, state: str, reason: str | None, error: str) -> None:
        why = f" ({reason})" if reason else ""
        said = f": {error}" if error else ""
        super().__init__(f"job {job_id} ended {state}{why} without a result{said}")
        self.job_id = job_id
        self.state = state
        self.reason = reason
        self.error = error


class ResultTimeout(AwaError, TimeoutError):
    """``client.result`` gave up: the job had not ended within ``timeout``
    seconds. The job is untouched; wait again, or look it up."""

    def __init__(self, job_id: int, timeout_s: float, state: str) -> None:
        super().__init__(
            f"job {job_id} did not end within {timeout_s:g}s (it is {state}); nothing was changed"
        )
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.state = state
