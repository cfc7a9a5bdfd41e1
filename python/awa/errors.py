"""The exceptions awa raises. Every one derives from :class:`AwaError`."""

from __future__ import annotations


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

    def __init__(self, found: int | None, needed: int) -> None:
        where = "has no awa schema" if found is None else f"is at awa schema version {found}"
        super().__init__(
            f"the database {where}; this awa needs version {needed}. "
            "Run `python -m awa migrate` or `await client.migrate()` first."
        )
        self.found = found
        self.needed = needed


class JobNotFound(AwaError, LookupError):
    """No job has the requested id."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"there is no job with id {job_id}")
        self.job_id = job_id


class UnknownJobKind(AwaError):
    """A worker claimed a job whose kind no task handles (recorded as a failed attempt)."""


class TerminalError(AwaError):
    """Raise from a handler to fail the job now, without retries."""


class ConfigurationError(AwaError, ValueError):
    """A worker or client setting is invalid (bad queue list, interval, …)."""
