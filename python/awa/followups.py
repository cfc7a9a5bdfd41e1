"""Durable follow-up jobs: ``on_*_enqueue`` specs and handler-staged follow-ups.

A spec maps a committed transition of one job kind to new jobs. For
worker-driven outcomes (and callback resolutions) the follow-ups are
inserted in the transaction that applies the transition, so both commit
or neither does; rescue follow-ups run after the rescue commits, best
effort. Handler-staged follow-ups (``job.enqueue_on_completion``) ride the
same insert, after the specs, and only for ``completed``.

This module builds rows; the completer, the rescuer and callback
resolution run the SQL.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from awa import _core, metrics
from awa.errors import ConfigurationError, StagingError, ValidationError
from awa.events import RescueReason
from awa.hooks import (
    CANCELLED,
    COMPLETED,
    EXHAUSTED,
    FAILED,
    RESCUED,
    RETRIED,
    WAITING_FOR_CALLBACK,
    Transition,
)
from awa.inserts import UniqueOpts, add_job, check_option_names
from awa.job import ArgsDecoder

if TYPE_CHECKING:
    from awa.tasks import Registry

#: The outcomes a spec can follow, with what its closure receives after
#: ``(args, job)``.
SPEC_OUTCOMES: Final[Mapping[str, tuple[str, ...]]] = {
    COMPLETED: (),
    CANCELLED: ("reason",),
    RETRIED: ("error", "attempt", "next_run_at"),
    EXHAUSTED: ("error", "attempt"),
    WAITING_FOR_CALLBACK: (),
    RESCUED: ("reason",),
}


class EnqueueRequest:
    """A follow-up job and its insert options, returned by ``on_*_enqueue_with``
    closures.

    ``EnqueueRequest(args, **options)`` takes the keywords of
    :meth:`awa.AsyncClient.insert`. The setters return a new request with one
    option changed; :meth:`with_opts` replaces every option at once::

        EnqueueRequest(WelcomeEmail(user_id=1)).queue("email").priority(1)
    """

    __slots__ = ("args", "options")

    def __init__(self, args: Any, **options: Any) -> None:
        check_option_names(options, "EnqueueRequest")
        self.args = args
        self.options: Mapping[str, Any] = options

    def _set(self, name: str, value: Any) -> EnqueueRequest:
        return EnqueueRequest(self.args, **{**self.options, name: value})

    def queue(self, name: str) -> EnqueueRequest:
        return self._set("queue", name)

    def priority(self, priority: int) -> EnqueueRequest:
        return self._set("priority", priority)

    def unique(self, opts: UniqueOpts | Mapping[str, Any] | None = None) -> EnqueueRequest:
        """Deduplicate by unique key (``None``: :class:`awa.UniqueOpts` defaults)."""
        return self._set("unique_opts", UniqueOpts() if opts is None else opts)

    def metadata(self, metadata: Mapping[str, Any]) -> EnqueueRequest:
        return self._set("metadata", metadata)

    def with_opts(self, **options: Any) -> EnqueueRequest:
        """A request with exactly these options (earlier ones are dropped)."""
        return EnqueueRequest(self.args, **options)

    def __repr__(self) -> str:
        return f"EnqueueRequest({self.args!r}, **{dict(self.options)!r})"


@dataclass(frozen=True, slots=True)
class FollowUpSpec:
    outcome: str
    closure: Callable[..., Any]
    decode_args: ArgsDecoder
    returns_request: bool
    name: str

    def requests(self, transition: Transition) -> list[EnqueueRequest]:
        """The follow-ups for one committed transition (may raise: user code)."""
        job = transition.job
        context = [_context_value(transition, field) for field in SPEC_OUTCOMES[self.outcome]]
        result = self.closure(self.decode_args(job.args_json), job, *context)
        if type(result) is EnqueueRequest:  # the common case, checked first: this runs per job
            return [result]
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError(
                f"{self.name} returned an awaitable; follow-up closures are plain functions"
            )
        if result is None:
            if self.returns_request:
                return []
            raise TypeError(f"{self.name} returned None; use the _with variant to skip a follow-up")
        if isinstance(result, EnqueueRequest):
            return [result]
        if self.returns_request:
            got = type(result).__name__
            raise TypeError(f"{self.name} must return an awa.EnqueueRequest or None (got {got})")
        return [EnqueueRequest(result)]


def _context_value(transition: Transition, field: str) -> Any:
    if field == "next_run_at":
        return transition.job.run_at
    if field == "reason" and transition.outcome == RESCUED:
        return RescueReason(transition.reason)
    return getattr(transition, field)


class FollowUpFailed(Exception):
    """A spec's closure, or the follow-up it returned, failed for one job:
    that job's transition must not commit."""

    def __init__(self, transition: Transition, spec: str, error: Exception) -> None:
        super().__init__(
            f"{spec} for job {transition.job.id} raised {type(error).__name__}: {error}"
        )
        self.transition = transition
        self.spec = spec
        self.error = error


class FollowUps:
    """Registered specs by (job kind, outcome)."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, str], list[FollowUpSpec]] = {}

    def add(
        self,
        kind: str,
        outcome: str,
        closure: Callable[..., Any],
        decode_args: ArgsDecoder,
        *,
        returns_request: bool,
    ) -> None:
        if not callable(closure):
            raise ConfigurationError(f"the follow-up closure for {kind!r} is not callable")
        if inspect.iscoroutinefunction(closure):
            raise ConfigurationError(
                f"follow-up closures run inside the outcome's transaction and must be plain "
                f"functions; {closure.__qualname__} is async"
            )
        name = f"on_{outcome}_enqueue{'_with' if returns_request else ''}({kind!r})"
        spec = FollowUpSpec(outcome, closure, decode_args, returns_request, name)
        self._specs.setdefault((kind, outcome), []).append(spec)

    def wants(self, kind: str, outcome: str) -> bool:
        return (kind, outcome) in self._specs

    @property
    def any(self) -> bool:
        return bool(self._specs)

    def may_follow(self, kind: str, outcome: str) -> bool:
        """Whether an attempt outcome (``failed`` meaning retried or exhausted)
        of ``kind`` can have spec follow-ups."""
        if outcome == FAILED:
            return self.wants(kind, RETRIED) or self.wants(kind, EXHAUSTED)
        return self.wants(kind, outcome)

    def add_rows(self, transition: Transition, rows: Any, registry: Registry) -> None:
        """Appends the follow-ups of every spec for this transition to ``rows``;
        raises :class:`FollowUpFailed` if a closure or its follow-up fails."""
        for spec in self._specs.get((transition.job.kind, transition.outcome), ()):
            try:
                for request in spec.requests(transition):
                    add_job(rows, registry, request.args, batch=False, **request.options)
            except Exception as error:
                raise FollowUpFailed(transition, spec.name, error) from error


class FollowUpStage:
    """The follow-ups one attempt's handler staged (``job.enqueue_on_completion``).

    Rows are checked and counted by the Rust core as they are staged; the
    first refusal is remembered, so an attempt whose handler swallowed it
    still fails.
    """

    __slots__ = ("error", "registry", "rows", "sealed")

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.rows: Any = None
        self.error: StagingError | None = None
        self.sealed = False

    def add(self, args: Any, options: Mapping[str, Any]) -> None:
        if self.rows is None:
            # Made on first use: most attempts stage nothing.
            self.rows = _core.InsertRows(1, staging=True)
            if self.sealed:
                self.rows.seal()
        try:
            check_option_names(options, "options")
            add_job(self.rows, self.registry, args, **options)
        except StagingError as error:
            self._remember(error)
            raise
        except (ValidationError, TypeError, ValueError) as error:
            staging = StagingError(str(error), getattr(error, "field", None))
            self._remember(staging)
            raise staging from error

    def _remember(self, error: StagingError) -> None:
        if self.error is None:
            self.error = error

    def seal(self) -> None:
        """Closes staging: the handler returned."""
        self.sealed = True
        if self.rows is not None:
            self.rows.seal()

    @property
    def count(self) -> int:
        return 0 if self.rows is None else len(self.rows)

    def discard(self) -> None:
        """The attempt did not complete: its staged follow-ups are dropped."""
        metrics.add(metrics.STAGED_FOLLOW_UPS_DISCARDED, self.count)
