"""The task registry: which handler runs which job kind, and how its
arguments are decoded."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_origin

import pydantic

from awa import _core
from awa.config import DEFAULT_MAX_CRASHES
from awa.envelope import (
    Upcaster,
    args_problems,
    args_type_name,
    check_versions,
    upcast_stored,
)
from awa.errors import ConfigurationError, ValidationError
from awa.job import FIRST_SCHEMA_VERSION, ArgsDecoder, Job

DEFAULT_QUEUE = "default"

Handler = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Task:
    """A registered handler for one job kind."""

    kind: str
    queue: str
    args_type: Any
    handler: Handler
    is_async: bool
    decode_args: ArgsDecoder
    #: Cancel the handler's asyncio task when its job is cancelled on request.
    interrupt_on_cancel: bool = False
    #: Seconds an attempt may run (None: the queue's timeout, if any).
    timeout_s: float | None = None
    #: Checks arguments given as plain Python values (a dict for a model)
    #: at insert, as the handler will decode them; None for dict tasks.
    check_args: Callable[[Any], Any] | None = None
    #: The version its arguments are written at (see :mod:`awa.envelope`).
    schema_version: int = FIRST_SCHEMA_VERSION
    #: Version → the function upcasting arguments of that version to the next.
    upcasters: Mapping[int, Upcaster] = dataclasses.field(default_factory=dict)
    #: The rate class its jobs spend (``rate_class=`` at insert overrides it).
    rate_class: str | None = None


def derive_kind(name: str) -> str:
    """The job kind for an argument class name: ``SendEmail`` → ``send_email``."""
    return _core.derive_kind(name)


def is_mapping_type(args_type: Any) -> bool:
    """``dict``, ``dict[str, Any]`` and friends: args stay plain JSON objects."""
    return args_type is dict or get_origin(args_type) is dict


def decoder_for(args_type: Any) -> ArgsDecoder:
    """How stored JSON text becomes an instance of ``args_type``."""
    if is_mapping_type(args_type):
        return _core.decode_json
    if isinstance(args_type, type) and issubclass(args_type, pydantic.BaseModel):
        return args_type.model_validate_json
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(args_type)
    return adapter.validate_json


def _python_validator_for(args_type: Any) -> Callable[[Any], Any] | None:
    if is_mapping_type(args_type):
        return None
    if isinstance(args_type, type) and issubclass(args_type, pydantic.BaseModel):
        return args_type.model_validate
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(args_type)
    return adapter.validate_python


def same_args_type(left: Any, right: Any) -> bool:
    """Whether two argument types decode alike: the same type, or both
    mappings (``dict``, ``dict[str, Any]``)."""
    return left == right or (is_mapping_type(left) and is_mapping_type(right))


@functools.lru_cache(maxsize=256)
def _cached_decoder(args_type: Any) -> ArgsDecoder:
    return decoder_for(args_type)


class Registry:
    """Tasks by kind, and by argument type for inserts that give no kind."""

    def __init__(self) -> None:
        self.by_kind: dict[str, Task] = {}
        #: Queue defaults for ``max_crashes`` (``AsyncClient.set_queue_defaults``).
        self.queue_max_crashes: dict[str, int | None] = {}
        self._by_type: dict[Any, Task | None] = {}

    def register(
        self,
        args_type: Any,
        handler: Handler,
        *,
        kind: str | None,
        queue: str,
        interrupt_on_cancel: bool = False,
        timeout_s: float | None = None,
        schema_version: Any = FIRST_SCHEMA_VERSION,
        upcasters: Any = None,
        rate_class: Any = None,
    ) -> Task:
        if kind is None:
            if is_mapping_type(args_type) or not isinstance(args_type, type):
                raise ConfigurationError(
                    f"@task({args_type!r}) needs kind=…: a kind can only be derived "
                    "from a class name"
                )
            kind = derive_kind(args_type.__name__)
        _check_name("kind", kind)
        _check_name("queue", queue)
        if kind in self.by_kind:
            existing = self.by_kind[kind].handler
            raise ConfigurationError(
                f"kind {kind!r} already has a handler ({existing.__qualname__})"
            )
        if not callable(handler):
            raise ConfigurationError(f"the handler for {kind!r} is not callable")
        schema_version, upcasters = check_versions(kind, schema_version, upcasters)
        if rate_class is not None:
            _check_rate_class(rate_class)
        task = Task(
            kind=kind,
            queue=queue,
            args_type=args_type,
            handler=handler,
            is_async=inspect.iscoroutinefunction(handler),
            decode_args=decoder_for(args_type),
            interrupt_on_cancel=interrupt_on_cancel,
            timeout_s=timeout_s,
            check_args=_python_validator_for(args_type),
            schema_version=schema_version,
            upcasters=types.MappingProxyType(dict(upcasters)),
            rate_class=rate_class,
        )
        self.by_kind[kind] = task
        if not is_mapping_type(args_type):
            # One type serving two kinds makes the kind ambiguous at insert.
            self._by_type[args_type] = None if args_type in self._by_type else task
        return task

    def kind_of_type(self, args_type: Any, kind: str | None) -> str:
        """The kind jobs with arguments of ``args_type`` have: ``kind`` if given,
        else the kind of the task registered for the type, else the kind
        derived from the class name."""
        if kind is not None:
            _check_name("kind", kind)
            return kind
        task = self._by_type.get(args_type)
        if task is not None:
            return task.kind
        if is_mapping_type(args_type) or not isinstance(args_type, type):
            raise ConfigurationError(
                f"{args_type!r} needs kind=…: a kind can only be derived from a class name"
            )
        return derive_kind(args_type.__name__)

    def decoder(self, kind: str, args_type: Any) -> ArgsDecoder:
        """How the arguments of a ``kind`` job decode into ``args_type``: the
        kind's task's decoder when that task takes ``args_type``, else one for
        ``args_type`` (made once per type: a dataclass's costs a schema)."""
        task = self.by_kind.get(kind)
        if task is not None and same_args_type(task.args_type, args_type):
            return task.decode_args
        try:
            return _cached_decoder(args_type)
        except TypeError:  # an unhashable type expression
            return decoder_for(args_type)

    def committed_job(
        self, row: Any, *, with_payload: bool = True, decode: ArgsDecoder | None = None
    ) -> Job[Any]:
        """The job of a row of any job query, its args decoded with
        ``decode``, else as the kind's task says (a dict for a kind without
        one). Args written at an older schema version of that task are
        upcast to it first (as a worker would before running it), so hooks,
        follow-up specs and inspection see the task's version; args that
        cannot be upcast stay as stored."""
        task = self.by_kind.get(row["kind"])
        if task is None:
            return Job.from_record(row, decode, with_payload=with_payload)
        upcast = upcast_stored(task, row["args"], row["schema_version"]) if with_payload else None
        return Job.from_record(
            row, decode or task.decode_args, with_payload=with_payload, upcast=upcast
        )

    def for_args(self, args: Any) -> Task | None:
        """The task whose argument type ``args`` is an instance of, if exactly one."""
        return self._by_type.get(type(args))

    def set_queue_max_crashes(self, queue: str, max_crashes: int | None) -> None:
        _check_name("queue", queue)
        if max_crashes is not None and (
            isinstance(max_crashes, bool) or not isinstance(max_crashes, int) or max_crashes < 0
        ):
            raise ConfigurationError(
                f"max_crashes must be an integer >= 0 or None (got {max_crashes!r})"
            )
        self.queue_max_crashes[queue] = max_crashes

    def resolver(self, *, require_task: bool = False) -> Resolver:
        """:meth:`resolution` for the Rust core, which asks once per argument
        type, kind and queue in a batch and runs the check on every job."""
        return functools.partial(self.resolution, require_task=require_task)

    def resolution(
        self, args: Any, kind: Any, queue: Any, require_task: bool = False
    ) -> tuple[Any, Any, int | None, Callable[[Any], None] | None, int | None, str | None]:
        """The kind and queue an insert of arguments of this type uses:
        explicit values first, then the task registered for the argument
        type, then the class name; with the queue's default ``max_crashes``,
        the check each job's arguments must pass (``None``: they are the
        kind's own type), the kind's task's schema version (``None``
        without a task: version 1) and its rate class, so that what no
        worker could run is refused before any SQL: arguments that do not
        validate as the kind's registered type, and, with ``require_task``
        (the client's own inserts), a derived kind no task handles unless
        this client registers no tasks at all (a producer for another
        service's workers; or name the kind).
        Follow-ups are exempt from the latter: they often feed a stage other
        workers run, and refusing one would fail the handler that staged
        it."""
        if kind is None:
            kind = self._derived_kind(args, require_task)
        task = self.by_kind.get(kind) if isinstance(kind, str) else None
        check = None
        if task is not None and task.check_args is not None and type(args) is not task.args_type:
            check = functools.partial(_check_args, task)
        if queue is None:
            queue = task.queue if task is not None else DEFAULT_QUEUE
        max_crashes = (
            self.queue_max_crashes.get(queue, DEFAULT_MAX_CRASHES)
            if isinstance(queue, str)
            else DEFAULT_MAX_CRASHES
        )
        schema_version = task.schema_version if task is not None else None
        rate_class = task.rate_class if task is not None else None
        return kind, queue, max_crashes, check, schema_version, rate_class

    def _derived_kind(self, args: Any, require_task: bool) -> str:
        task = self.for_args(args)
        if task is not None:
            return task.kind
        if isinstance(args, dict):
            raise ValidationError("kind: is required when args is a dict", "kind")
        if dataclasses.is_dataclass(args) or isinstance(args, pydantic.BaseModel):
            kind = derive_kind(type(args).__name__)
            if require_task and self.by_kind and kind not in self.by_kind:
                raise ValidationError(
                    f"kind: no task is registered for {type(args).__name__} (kind "
                    f"{kind!r}); register one with @client.task({type(args).__name__}), "
                    "or pass kind= to insert jobs for another service's workers",
                    "kind",
                )
            return kind
        raise ValidationError(
            f"args: must be a pydantic model, a dataclass or a dict (got {type(args).__name__})",
            "args",
        )


#: How the Rust core asks the registry for a batch's kinds and queues.
Resolver = Callable[
    [Any, Any, Any],
    tuple[Any, Any, "int | None", "Callable[[Any], None] | None", "int | None", "str | None"],
]


def _check_args(task: Task, args: Any) -> None:
    """Validates arguments of another type (a dict, most often) as the
    kind's registered type, as the worker will decode them."""
    assert task.check_args is not None
    value = args
    if isinstance(args, pydantic.BaseModel):
        value = args.model_dump(mode="json")
    elif dataclasses.is_dataclass(args) and not isinstance(args, type):
        value = dataclasses.asdict(args)
    try:
        task.check_args(value)
    except pydantic.ValidationError as error:
        problems = args_problems(error)
        details = "; ".join(f"{where}: {message}" for where, message in problems)
        raise ValidationError(
            f"args: do not validate as {args_type_name(task.args_type)}, the arguments of "
            f"kind {task.kind!r}: {details}",
            problems[0][0],
        ) from None


def args_of(args_type: Any, args: Any) -> Any:
    """``args`` as a value of ``args_type``: as given when it already is one,
    else validated the way a worker decodes a kind's arguments (a dict into
    a pydantic model or a dataclass); :class:`ValidationError` otherwise."""
    if is_mapping_type(args_type):
        if isinstance(args, dict):
            return args
    elif isinstance(args_type, type) and isinstance(args, args_type):
        return args
    elif isinstance(args, Mapping):
        validate = _python_validator_for(args_type)
        assert validate is not None  # only mapping types have none
        try:
            return validate(args)
        except pydantic.ValidationError as error:
            details = "; ".join(f"{where}: {message}" for where, message in args_problems(error))
            raise ValidationError(
                f"args: do not validate as {args_type_name(args_type)}: {details}", "args"
            ) from None
    raise ValidationError(
        f"args: must be a {args_type_name(args_type)} (got {type(args).__name__})", "args"
    )


def _check_rate_class(rate_class: Any) -> None:
    if not isinstance(rate_class, str):
        raise ConfigurationError(f"rate_class: must be a string (got {rate_class!r})")
    try:
        _core.check_rate_class_name(rate_class)
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def _check_name(field: str, value: Any) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= _core.MAX_NAME_CHARS or "\0" in value:
        raise ConfigurationError(
            f"{field} must be a string of 1 to {_core.MAX_NAME_CHARS} characters "
            f"without NUL (got {value!r})"
        )
