"""Callback policies: CEL expressions that let ``resolve_callback`` decide
what a payload means.

A handler registering a callback may give expressions over the variable
``payload`` (the JSON the external system sent)::

    await job.register_callback(
        timeout_seconds=3600,
        filter='payload.event != "ping"',        # false: ignore this delivery
        on_fail='payload.status == "declined"',  # true: fail the job
        on_complete='payload.status == "paid"',  # true: complete the job
        transform='{"receipt": payload.id}',     # what a completion stores
    )

They are checked when registered (syntax, and ``payload`` as the only
variable) and stored with the job, so any process can resolve the callback
without knowing them. :func:`decide` applies them in order: ``filter``,
then ``on_fail``, then ``on_complete``, then the caller's default action.
An expression that fails to evaluate, or a condition that is not a bool,
is a policy failure: the job fails with the reason.

Expressions need the optional ``cel`` extra (``pip install
'awa-queue[cel]'``, the maintained ``common-expression-language``
package); ``resolve_callback`` without expressions does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from awa.errors import ConfigurationError, ValidationError

#: The expressions a policy may hold; the first three are conditions.
CONDITIONS: Final = ("filter", "on_fail", "on_complete")
EXPRESSIONS: Final = (*CONDITIONS, "transform")
MAX_EXPRESSION_CHARS: Final = 4096


class DefaultAction(StrEnum):
    """What ``resolve_callback`` does when no expression decides."""

    Complete = "complete"
    Fail = "fail"
    #: Leave the job parked (for example, an unrelated delivery).
    Ignore = "ignore"


class Resolution(StrEnum):
    Completed = "completed"
    Failed = "failed"
    Ignored = "ignored"


@dataclass(frozen=True, slots=True)
class Decision:
    resolution: Resolution
    reason: str
    #: What a completion stores as ``metadata.callback_result``.
    payload: Any = None


def policy_json(expressions: dict[str, str | None]) -> str | None:
    """Checks the expressions given at registration and returns what the job
    stores (``None`` when none was given)."""
    given = {name: text for name, text in expressions.items() if text is not None}
    if not given:
        return None
    cel = _cel()
    for name, text in given.items():
        if not isinstance(text, str) or not text.strip():
            raise ValidationError(f"{name}: must be a non-empty CEL expression", name)
        if len(text) > MAX_EXPRESSION_CHARS:
            raise ValidationError(
                f"{name}: at most {MAX_EXPRESSION_CHARS} characters (got {len(text)})", name
            )
        try:
            program = cel.compile(text)
        except ValueError as error:
            raise ValidationError(f"{name}: not a valid CEL expression: {error}", name) from None
        unknown = sorted(set(program.variables()) - {"payload"})
        if unknown:
            raise ValidationError(
                f"{name}: the only variable is `payload` (found {', '.join(unknown)})", name
            )
    return json.dumps(given, separators=(",", ":"))


def decide(policy: str | None, payload: Any, default: DefaultAction) -> Decision:
    """What a delivery of ``payload`` does to a job registered with ``policy``
    (the stored JSON, or ``None``)."""
    expressions: dict[str, str] = json.loads(policy) if policy else {}
    try:
        if "filter" in expressions and not _condition(expressions, "filter", payload):
            return Decision(Resolution.Ignored, "filter did not match")
        if "on_fail" in expressions and _condition(expressions, "on_fail", payload):
            return Decision(Resolution.Failed, f"on_fail matched: {expressions['on_fail']}")
        if "on_complete" in expressions and _condition(expressions, "on_complete", payload):
            return _completion(
                expressions, payload, f"on_complete matched: {expressions['on_complete']}"
            )
    except _PolicyFailure as failure:
        return Decision(Resolution.Failed, str(failure))
    if default is DefaultAction.Complete:
        try:
            return _completion(expressions, payload, "no expression decided; default complete")
        except _PolicyFailure as failure:
            return Decision(Resolution.Failed, str(failure))
    if default is DefaultAction.Fail:
        return Decision(Resolution.Failed, "no expression decided; default fail")
    return Decision(Resolution.Ignored, "no expression decided; default ignore")


def default_action(value: Any) -> DefaultAction:
    try:
        return DefaultAction(value)
    except ValueError:
        choices = ", ".join(repr(action.value) for action in DefaultAction)
        raise ValidationError(
            f"default_action: must be one of {choices} (got {value!r})", "default_action"
        ) from None


class _PolicyFailure(Exception):
    pass


def _completion(expressions: dict[str, str], payload: Any, reason: str) -> Decision:
    if "transform" in expressions:
        payload = _evaluate(expressions, "transform", payload)
    return Decision(Resolution.Completed, reason, payload)


def _condition(expressions: dict[str, str], name: str, payload: Any) -> bool:
    value = _evaluate(expressions, name, payload)
    if not isinstance(value, bool):
        raise _PolicyFailure(
            f"callback policy failed: {name} returned {type(value).__name__}, not a bool"
        )
    return value


def _evaluate(expressions: dict[str, str], name: str, payload: Any) -> Any:
    cel = _cel()
    try:
        return cel.evaluate(expressions[name], {"payload": payload})
    except Exception as error:  # noqa: BLE001 - any evaluation error is the policy's failure
        raise _PolicyFailure(
            f"callback policy failed: {name} raised {type(error).__name__}: {error}"
        ) from None


def _cel() -> Any:
    try:
        import cel
    except ImportError:
        raise ConfigurationError(
            "callback expressions need the CEL package: pip install 'awa-queue[cel]'"
        ) from None
    return cel
