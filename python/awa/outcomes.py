"""What a handler may return besides ``None`` (which means completed).

Return an instance from the handler: ``return awa.RetryAfter(30)``.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

from awa.errors import ValidationError


def _seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(
            f"{what}: seconds must be a number (got {type(value).__name__})", what
        )
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"{what}: seconds must be finite and >= 0 (got {value})", what)
    return float(value)


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """Run the job again after ``seconds``; uses an attempt (fails if none are left)."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _seconds(self.seconds, "RetryAfter"))


@dataclass(frozen=True, slots=True)
class Snooze:
    """Defer the job by ``seconds`` without consuming an attempt (state ``scheduled``)."""

    seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _seconds(self.seconds, "Snooze"))


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the job for good: state ``cancelled``, with the reason in its error history."""

    reason: str = "cancelled by handler"


class CallbackToken(uuid.UUID):
    """What ``await job.register_callback()`` returns: the callback's id, as a
    ``uuid.UUID`` (hand ``str(token)`` to the external system; every call
    that takes a callback id takes the token), with ``.id`` as in awa-pg."""

    __slots__ = ()

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(int=self.int)


@dataclass(frozen=True, slots=True)
class WaitForCallback:
    """Park the job in ``waiting_external`` until its callback is resolved
    (``client.complete_external`` and friends); frees the worker slot.

    ``callback_id`` is what ``await job.register_callback()`` returned in this
    attempt: the :class:`CallbackToken`, or its id as a ``UUID`` or string.
    """

    callback_id: uuid.UUID

    def __post_init__(self) -> None:
        object.__setattr__(self, "callback_id", callback_uuid(self.callback_id))


def callback_uuid(value: object) -> uuid.UUID:
    """A callback id given as a token, a ``UUID`` or its string."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ValidationError(
        f"callback_id: must be what register_callback() returned, or its id (got {value!r})",
        "callback_id",
    )


Outcome = RetryAfter | Snooze | Cancel | WaitForCallback | None
