"""What a command prints: text for a person, or with ``--json`` one JSON
object on stdout (the envelope, docs/cli.md), and the exit status.

Every command answers with a :class:`Reply`; an error is named, never a
traceback, and decides the exit status (:class:`ExitCode`)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any, Final

import asyncpg

from awa.errors import AwaError, ConfigurationError, ValidationError

#: The envelope's version: it changes only when a field's meaning does.
ENVELOPE_VERSION: Final = 1


class ExitCode(enum.IntEnum):
    """The exit statuses of every ``awa`` command (stable; docs/cli.md)."""

    OK = 0
    #: The command could not do its work: the database refused or could
    #: not be reached, the schema is not migrated, a worker stopped unhealthy.
    ERROR = 1
    #: The command line is wrong: an unknown option, a bad value, no
    #: database named, an --app that does not load.
    USAGE = 2
    #: What it names does not exist (a job, a periodic job).
    NOT_FOUND = 3
    #: Refused without a confirmation or a filter (a bulk verb).
    REFUSED = 4
    #: It gave up waiting (``queues drain --timeout``).
    TIMED_OUT = 5
    #: Interrupted (Ctrl-C).
    INTERRUPTED = 130


class Refused(AwaError):
    """A command that acts on many jobs at once, without the filter or the
    confirmation it needs (exit status 4)."""


class NotFound(AwaError, LookupError):
    """What a command names does not exist (exit status 3), where the
    library says so with a value rather than an error."""


@dataclasses.dataclass(frozen=True)
class Reply:
    """A command's answer: ``data`` for ``--json``, ``lines`` for a person."""

    data: Any
    lines: Sequence[str]
    exit_code: ExitCode = ExitCode.OK


def exit_code_of(error: BaseException) -> ExitCode:
    if isinstance(error, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if isinstance(error, Refused):
        return ExitCode.REFUSED
    if isinstance(error, LookupError) and isinstance(error, AwaError):
        return ExitCode.NOT_FOUND
    if isinstance(error, ValidationError | ConfigurationError):
        return ExitCode.USAGE
    if isinstance(error, TimeoutError):
        return ExitCode.TIMED_OUT
    return ExitCode.ERROR


def error_message(error: BaseException) -> str:
    """The sentence a failed command ends with; the error's type where it
    has none (a bare ``TimeoutError``)."""
    message = str(error)
    if isinstance(error, asyncpg.PostgresError):
        return f"the database refused: {message} ({type(error).__name__})"
    if not isinstance(error, AwaError | OSError | TimeoutError | KeyboardInterrupt):
        # Not one of ours nor the system's: a defect, said in one line
        # (-v logs the traceback).
        return f"internal error: {type(error).__name__}: {message}".rstrip(": ")
    return message or type(error).__name__


def print_reply(command: str, reply: Reply, *, as_json: bool) -> int:
    if as_json:
        _print_envelope(
            {"version": ENVELOPE_VERSION, "command": command, "ok": True, "data": reply.data}
        )
    else:
        for line in reply.lines:
            print(line)
    return int(reply.exit_code)


def print_failure(command: str, error: BaseException, *, as_json: bool) -> int:
    code = exit_code_of(error)
    message = error_message(error)
    if as_json:
        _print_envelope(
            {
                "version": ENVELOPE_VERSION,
                "command": command,
                "ok": False,
                "error": {"type": type(error).__name__, "message": message, "exit_code": int(code)},
            }
        )
    else:
        print(f"awa: {message}", file=sys.stderr)
    return int(code)


def print_usage_failure(command: str, message: str) -> None:
    """argparse's complaint, as an envelope (it exits with 2 itself)."""
    _print_envelope(
        {
            "version": ENVELOPE_VERSION,
            "command": command,
            "ok": False,
            "error": {"type": "UsageError", "message": message, "exit_code": int(ExitCode.USAGE)},
        }
    )


def _print_envelope(envelope: dict[str, Any]) -> None:
    print(json.dumps(envelope, default=jsonable, sort_keys=True))


def jsonable(value: Any) -> Any:
    """The two kinds of value the commands' data hold that ``json`` does not
    know (every other value a command gives is shaped by its ``*_data``
    function), as the schema (docs/cli.md) has them."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def when(moment: datetime.datetime | None) -> str:
    """A timestamp in a line for a person."""
    return "-" if moment is None else moment.isoformat(timespec="milliseconds")
