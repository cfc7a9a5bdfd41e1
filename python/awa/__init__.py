"""awa: a PostgreSQL-backed background job queue for Python with a Rust core.

import awa
client = awa.AsyncClient("postgresql://…")

@client.task(SendEmail, queue="email")
async def send_email(job: awa.Job[SendEmail]) -> None: ...

await client.migrate()
await client.insert(SendEmail(to="a@b.c"))
await client.start([("email", 8)])
"""

from awa.client import DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_CRASHES, DEFAULT_PRIORITY, AsyncClient
from awa.config import WorkerConfig
from awa.errors import (
    AwaError,
    ConfigurationError,
    JobNotFound,
    SchemaNotMigrated,
    TerminalError,
    UnknownJobKind,
    ValidationError,
)
from awa.job import Job, JobState
from awa.outcomes import Cancel, RetryAfter, Snooze
from awa.tasks import derive_kind

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_PRIORITY",
    "AsyncClient",
    "AwaError",
    "Cancel",
    "ConfigurationError",
    "Job",
    "JobNotFound",
    "JobState",
    "RetryAfter",
    "SchemaNotMigrated",
    "Snooze",
    "TerminalError",
    "UnknownJobKind",
    "ValidationError",
    "WorkerConfig",
    "derive_kind",
]
