"""awa: a PostgreSQL-backed background job queue for Python with a Rust core.

In short::

    import awa
    client = awa.AsyncClient("postgresql://…")

    @client.task(SendEmail, queue="email")
    async def send_email(job: awa.Job[SendEmail]) -> None: ...

    await client.migrate()
    await client.insert(SendEmail(to="a@b.c"))
    await client.start([("email", 8)])
"""

from awa import events, metrics
from awa.callback_policy import DefaultAction
from awa.callbacks import CallbackResolution
from awa.client import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_CRASHES,
    DEFAULT_PRIORITY,
    AsyncClient,
    migrate,
)
from awa.config import WorkerConfig
from awa.dead_letters import DeadLetter, DeadLetterReason
from awa.doctor import DoctorCheck, DoctorReport, DoctorThresholds
from awa.envelope import UndecodableReason
from awa.errors import (
    ArgsNotDecodable,
    AttemptLost,
    AttemptTimeout,
    AwaError,
    CallbackNotFound,
    CallbackNotResumable,
    ConfigurationError,
    ConnectionFailed,
    FollowUpError,
    JobNotCompleted,
    JobNotFound,
    PayloadOmitted,
    PeriodicNotFound,
    ProgressError,
    ResultError,
    ResultTimeout,
    SchemaNotMigrated,
    StagingError,
    TerminalError,
    UniqueConflict,
    UnknownJobKind,
    ValidationError,
)
from awa.events import JobEvent, RescueReason
from awa.explain import ExplainReason, Explanation
from awa.followups import EnqueueRequest
from awa.health import HealthReport, LeaderHealth, QueueLoad, WorkerHealth
from awa.inserts import DEFAULT_UNIQUE_STATES, CopyInsertOptions, InsertOptions, UniqueOpts
from awa.job import Job, JobState, Progress
from awa.outcomes import CallbackToken, Cancel, RetryAfter, Snooze, WaitForCallback
from awa.periodic import PeriodicInfo
from awa.quarantine import QuarantinedFingerprint
from awa.queues import QueueConfig, QueueStats, QueueSummary, RateClass
from awa.sync_client import Client, ClientClosed
from awa.tasks import derive_kind
from awa.transaction import Transaction
from awa.worker.attempt import RunningJob

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_PRIORITY",
    "DEFAULT_UNIQUE_STATES",
    "ArgsNotDecodable",
    "AsyncClient",
    "AttemptLost",
    "AttemptTimeout",
    "AwaError",
    "CallbackNotFound",
    "CallbackNotResumable",
    "CallbackResolution",
    "CallbackToken",
    "Cancel",
    "Client",
    "ClientClosed",
    "ConfigurationError",
    "ConnectionFailed",
    "CopyInsertOptions",
    "DeadLetter",
    "DeadLetterReason",
    "DefaultAction",
    "DoctorCheck",
    "DoctorReport",
    "DoctorThresholds",
    "EnqueueRequest",
    "ExplainReason",
    "Explanation",
    "FollowUpError",
    "HealthReport",
    "InsertOptions",
    "Job",
    "JobEvent",
    "JobNotCompleted",
    "JobNotFound",
    "JobState",
    "LeaderHealth",
    "PayloadOmitted",
    "PeriodicInfo",
    "PeriodicNotFound",
    "Progress",
    "ProgressError",
    "QuarantinedFingerprint",
    "QueueConfig",
    "QueueLoad",
    "QueueStats",
    "QueueSummary",
    "RateClass",
    "RescueReason",
    "ResultError",
    "ResultTimeout",
    "RetryAfter",
    "RunningJob",
    "SchemaNotMigrated",
    "Snooze",
    "StagingError",
    "TerminalError",
    "Transaction",
    "UndecodableReason",
    "UniqueConflict",
    "UniqueOpts",
    "UnknownJobKind",
    "ValidationError",
    "WaitForCallback",
    "WorkerConfig",
    "WorkerHealth",
    "derive_kind",
    "events",
    "metrics",
    "migrate",
]
