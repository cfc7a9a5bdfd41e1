"""Schema versions of job arguments: checking a task's versions and
upcasters, upcasting stored arguments, and deciding whether a claimed job
can be decoded at all.

Overview: ``@client.task(Args, schema_version=3, upcasters={1: v1_to_v2,
2: v2_to_v3})`` says the task's arguments are at version 3, and how a
payload written at version 1 or 2 becomes the next version's (each upcaster
takes the arguments as a dict and returns the next version's dict). Every
job records the version it was written at (``awa.jobs.schema_version``,
NULL for 1). Before a handler runs, the worker upcasts older arguments step
by step and validates the result as ``Args``.

State model: a claimed job whose arguments cannot be decoded is
:class:`Undecodable`, for one of four :class:`UndecodableReason`\\ s. The
executor parks it in the ``undecodable`` state with its attempt given
back, no hook fired and no follow-up inserted, until an operator runs
``retry_undecodable`` for workers that can read it.

Nothing here talks to the database; :func:`decode_claimed` is a pure
function of the task and the claimed row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Protocol

import pydantic

from awa import _core
from awa.errors import ConfigurationError
from awa.job import FIRST_SCHEMA_VERSION

#: The column is a smallint.
MAX_VERSION: Final = 32_767

#: Takes the arguments at one version (a dict) and returns the next version's.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

#: The error entry types an undecodable job records: its kind has no task
#: here, or its arguments cannot become the task's.
UNKNOWN_KIND_TYPE: Final = "UnknownJobKind"
NOT_DECODABLE_TYPE: Final = "ArgsNotDecodable"


class UndecodableReason(StrEnum):
    """Why a claimed job could not be decoded (its ``failure_reason``)."""

    #: No task of the worker handles the job's kind.
    UnknownKind = "unknown_kind"
    #: The arguments were written at a version newer than the task's.
    UnknownSchemaVersion = "unknown_schema_version"
    #: An upcaster raised, returned something other than a dict, or is missing.
    UpcastFailed = "upcast_failed"
    #: The arguments (upcast, if older) do not validate as the task's type.
    ArgsInvalid = "args_invalid"


class Undecodable(Exception):
    """A claimed job's arguments cannot be decoded by this worker."""

    def __init__(self, reason: UndecodableReason, error_type: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.error_type = error_type
        self.message = message

    def entry(self, attempt: int) -> dict[str, Any]:
        """The job's error entry (the database adds when, and the worker)."""
        return {
            "attempt": attempt,
            "type": self.error_type,
            "message": self.message,
            "outcome": "undecodable",
            "reason": self.reason.value,
        }

    @property
    def text(self) -> str:
        return f"{self.error_type}: {self.message}"


@dataclass(frozen=True, slots=True)
class Decoded:
    """A claimed job's arguments as its task's type, and as JSON at the
    task's version (the stored text unless they were upcast)."""

    value: Any
    args_json: str
    schema_version: int

    @property
    def upcast(self) -> tuple[str, int]:
        """What a job built from the claimed row carries in place of its
        stored arguments (``Job.from_record(..., upcast=...)``)."""
        return self.args_json, self.schema_version


def check_versions(
    kind: str, schema_version: Any, upcasters: Any
) -> tuple[int, Mapping[int, Upcaster]]:
    """A task's ``schema_version`` (an int from 1) and ``upcasters`` (a dict
    with exactly the keys 1 to ``schema_version - 1``, each callable), as
    given; :class:`awa.ConfigurationError` naming the problem otherwise."""
    if (
        isinstance(schema_version, bool)
        or not isinstance(schema_version, int)
        or not FIRST_SCHEMA_VERSION <= schema_version <= MAX_VERSION
    ):
        raise ConfigurationError(
            f"schema_version of {kind!r} must be an integer from {FIRST_SCHEMA_VERSION} to "
            f"{MAX_VERSION} (got {schema_version!r})"
        )
    if upcasters is None:
        upcasters = {}
    if not isinstance(upcasters, Mapping):
        raise ConfigurationError(
            f"upcasters of {kind!r} must be a dict from version to function "
            f"(got {type(upcasters).__name__})"
        )
    expected = set(range(FIRST_SCHEMA_VERSION, schema_version))
    given = set(upcasters)
    if given != expected:
        missing = sorted(expected - given)
        unexpected = sorted(given - expected, key=repr)
        problems = []
        if missing:
            problems.append(f"missing {missing}")
        if unexpected:
            problems.append(f"unexpected {unexpected}")
        raise ConfigurationError(
            f"upcasters of {kind!r} at schema_version {schema_version} must have exactly the "
            f"versions {sorted(expected)} as keys, each upcasting to the next "
            f"({'; '.join(problems)})"
        )
    for version, upcaster in upcasters.items():
        if not callable(upcaster):
            raise ConfigurationError(
                f"upcasters[{version}] of {kind!r} is not callable (got {upcaster!r})"
            )
    return schema_version, dict(upcasters)


def upcast(
    args: dict[str, Any], version: int, target: int, upcasters: Mapping[int, Upcaster]
) -> dict[str, Any]:
    """``args`` written at ``version`` as ``target``'s, one upcaster per
    step. Raises :class:`Undecodable` (``upcast_failed``) for a missing
    upcaster, one that raised, or one that returned something other than a
    dict."""
    for step in range(version, target):
        upcaster = upcasters.get(step)
        if upcaster is None:
            raise Undecodable(
                UndecodableReason.UpcastFailed,
                NOT_DECODABLE_TYPE,
                f"no upcaster from schema version {step} to {step + 1}",
            )
        try:
            args = upcaster(args)
        except Exception as error:  # noqa: BLE001 - any failure of user code is the verdict
            raise Undecodable(
                UndecodableReason.UpcastFailed,
                NOT_DECODABLE_TYPE,
                f"the upcaster from schema version {step} to {step + 1} raised "
                f"{type(error).__name__}: {error}",
            ) from None
        if not isinstance(args, dict):
            raise Undecodable(
                UndecodableReason.UpcastFailed,
                NOT_DECODABLE_TYPE,
                f"the upcaster from schema version {step} to {step + 1} returned "
                f"{type(args).__name__}, not a dict",
            )
    return args


class VersionedTask(Protocol):
    """What decoding needs of a task (awa.tasks.Task is one)."""

    @property
    def args_type(self) -> Any: ...
    @property
    def decode_args(self) -> Callable[[Any], Any]: ...
    @property
    def check_args(self) -> Callable[[Any], Any] | None: ...
    @property
    def schema_version(self) -> int: ...
    @property
    def upcasters(self) -> Mapping[int, Upcaster]: ...


def decode_claimed(
    task: VersionedTask | None, kind: str, args_json: str, stored_version: int | None, known: Any
) -> Decoded:
    """The arguments of a claimed ``kind`` job (stored as ``args_json`` at
    ``stored_version``, ``None`` being 1) as ``task``'s type. Raises
    :class:`Undecodable` when ``task`` is ``None`` (``known``: the kinds the
    worker handles, for the message), for a version newer than the task's,
    for a failed upcast, and for arguments that do not validate."""
    if task is None:
        raise Undecodable(
            UndecodableReason.UnknownKind,
            UNKNOWN_KIND_TYPE,
            f"no task handles kind {kind!r} in this worker (known: {sorted(known)})",
        )
    version = FIRST_SCHEMA_VERSION if stored_version is None else stored_version
    if version == task.schema_version:
        # The common case: the stored text is already the task's.
        return Decoded(_validated(task, task.decode_args, args_json), args_json, version)
    if version > task.schema_version or version < FIRST_SCHEMA_VERSION:
        raise Undecodable(
            UndecodableReason.UnknownSchemaVersion,
            NOT_DECODABLE_TYPE,
            f"the arguments are at schema version {version}; this worker's task for "
            f"{kind!r} knows versions {FIRST_SCHEMA_VERSION} to {task.schema_version}",
        )
    upcast_args = upcast(_core.decode_json(args_json), version, task.schema_version, task.upcasters)
    try:
        upcast_json = _core.encode_json(upcast_args)
    except (TypeError, ValueError) as error:
        raise Undecodable(
            UndecodableReason.UpcastFailed,
            NOT_DECODABLE_TYPE,
            f"the arguments upcast from schema version {version} do not encode as JSON: {error}",
        ) from None
    validate = task.check_args if task.check_args is not None else _as_is
    return Decoded(_validated(task, validate, upcast_args), upcast_json, task.schema_version)


def upcast_stored(
    task: VersionedTask, args_json: str, stored_version: int | None
) -> tuple[str, int] | None:
    """A committed job's stored arguments (``args_json`` at
    ``stored_version``) as JSON at ``task``'s version, with that version;
    ``None`` when they are at it already, or newer, or cannot be upcast (the
    job then carries them as stored, and decoding them fails where they are
    used, as it would have)."""
    version = FIRST_SCHEMA_VERSION if stored_version is None else stored_version
    if version >= task.schema_version:
        return None
    try:
        upcast_args = upcast(_core.decode_json(args_json), version, task.schema_version,
                             task.upcasters)  # fmt: skip
        return _core.encode_json(upcast_args), task.schema_version
    except (Undecodable, ValueError, TypeError):
        return None


def _as_is(args: Any) -> Any:
    return args


def _validated(task: VersionedTask, validate: Callable[[Any], Any], args: Any) -> Any:
    try:
        return validate(args)
    except pydantic.ValidationError as error:
        where, message = args_problems(error)[0]
        raise Undecodable(
            UndecodableReason.ArgsInvalid,
            NOT_DECODABLE_TYPE,
            f"the stored arguments do not validate as {args_type_name(task.args_type)}: "
            f"{error.error_count()} error(s): {where}: {message}",
        ) from None
    except Exception as error:  # noqa: BLE001 - a validator of the user's that raised
        # Anything else a model raises while building from the arguments is
        # the same verdict: left to propagate, it would reach the claim loop.
        raise Undecodable(
            UndecodableReason.ArgsInvalid,
            NOT_DECODABLE_TYPE,
            f"building {args_type_name(task.args_type)} from the stored arguments raised "
            f"{type(error).__name__}: {error}",
        ) from None


def args_type_name(args_type: Any) -> str:
    """An argument type as messages name it: ``SendEmail``, ``dict``."""
    return args_type.__qualname__ if isinstance(args_type, type) else repr(args_type)


def args_problems(error: pydantic.ValidationError) -> list[tuple[str, str]]:
    """Each of pydantic's complaints about job arguments as (``args.<path>``,
    message); at least one."""
    problems = [
        (".".join(str(part) for part in ("args", *e["loc"])), e["msg"])
        for e in error.errors(include_url=False)
    ]
    return problems or [("args", str(error))]
