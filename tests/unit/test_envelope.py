"""Schema versions without a database: what ``@client.task`` accepts, the
upcasting chain, and the verdict on a claimed job's arguments."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, model_validator

import awa
from awa.envelope import Undecodable, UndecodableReason, check_versions, decode_claimed, upcast
from awa.tasks import Registry, Task


class Point(BaseModel):
    x: int
    y: int
    z: int


def add_y(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "y": 0}


def add_z(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "z": args["y"] + 1}


def point_task(**versions: Any) -> Task:
    return Registry().register(Point, lambda job: None, kind="point", queue="default", **versions)


def test_upcasting_applies_each_step_in_order():
    upcasters = {1: add_y, 2: add_z}
    assert upcast({"x": 1}, 1, 3, upcasters) == {"x": 1, "y": 0, "z": 1}
    assert upcast({"x": 1, "y": 5}, 2, 3, upcasters) == {"x": 1, "y": 5, "z": 6}
    assert upcast({"x": 1}, 3, 3, upcasters) == {"x": 1}


@pytest.mark.parametrize(
    ("upcasters", "message"),
    [
        ({1: add_y}, "no upcaster from schema version 2 to 3"),
        ({1: add_y, 2: lambda args: args["missing"]}, "2 to 3 raised KeyError"),
        ({1: lambda args: [args], 2: add_z}, "1 to 2 returned list, not a dict"),
    ],
)
def test_a_failed_upcast_is_undecodable(upcasters, message):
    with pytest.raises(Undecodable, match=message) as raised:
        upcast({"x": 1}, 1, 3, upcasters)
    assert raised.value.reason is UndecodableReason.UpcastFailed
    assert raised.value.entry(2) == {
        "attempt": 2,
        "type": "ArgsNotDecodable",
        "message": raised.value.message,
        "outcome": "undecodable",
        "reason": "upcast_failed",
    }


def test_a_claimed_job_is_decoded_at_its_version_or_upcast_first():
    task = point_task(schema_version=3, upcasters={1: add_y, 2: add_z})
    current = decode_claimed(task, "point", '{"x":1,"y":2,"z":3}', 3, {})
    assert current.value == Point(x=1, y=2, z=3)
    assert current.args_json == '{"x":1,"y":2,"z":3}'
    older = decode_claimed(task, "point", '{"x":1}', None, {})
    assert older.value == Point(x=1, y=0, z=1)
    assert older.args_json == '{"x":1,"y":0,"z":1}'


@pytest.mark.parametrize(
    ("args_json", "stored", "reason"),
    [
        ('{"x":1,"y":2,"z":3}', 4, UndecodableReason.UnknownSchemaVersion),
        ('{"x":"one","y":2,"z":3}', 3, UndecodableReason.ArgsInvalid),
        ('{"y":2}', 2, UndecodableReason.ArgsInvalid),
    ],
)
def test_what_cannot_become_the_tasks_type_is_undecodable(args_json, stored, reason):
    task = point_task(schema_version=3, upcasters={1: add_y, 2: add_z})
    with pytest.raises(Undecodable) as raised:
        decode_claimed(task, "point", args_json, stored, {})
    assert raised.value.reason is reason


class Picky(BaseModel):
    x: int

    @model_validator(mode="after")
    def refuse(self) -> Picky:
        raise TypeError("not today")


def test_a_model_that_raises_anything_while_building_is_undecodable():
    task = Registry().register(Picky, lambda job: None, kind="picky", queue="default")
    with pytest.raises(Undecodable, match="raised TypeError: not today") as raised:
        decode_claimed(task, "picky", '{"x":1}', None, {})
    assert raised.value.reason is UndecodableReason.ArgsInvalid


def test_a_kind_without_a_task_is_undecodable_and_names_the_known_kinds():
    with pytest.raises(Undecodable, match=r"known: \['point'\]") as raised:
        decode_claimed(None, "other", "{}", None, {"point": None})
    assert (raised.value.reason, raised.value.error_type) == (
        UndecodableReason.UnknownKind,
        "UnknownJobKind",
    )


@pytest.mark.parametrize(
    ("schema_version", "upcasters", "message"),
    [
        (0, None, "schema_version of 'point' must be an integer from 1"),
        (True, None, "must be an integer"),
        ("2", {1: add_y}, "must be an integer"),
        (40_000, None, "from 1 to 32767"),
        (3, {1: add_y}, r"missing \[2\]"),
        (2, {1: add_y, 2: add_z}, r"unexpected \[2\]"),
        (1, {0: add_y}, r"unexpected \[0\]"),
        (2, {1: "add_y"}, r"upcasters\[1\] of 'point' is not callable"),
        (2, [add_y], "must be a dict from version to function"),
    ],
)
def test_registration_refuses_bad_versions_and_upcasters(schema_version, upcasters, message):
    with pytest.raises(awa.ConfigurationError, match=message):
        check_versions("point", schema_version, upcasters)
    client = awa.AsyncClient("postgresql://never-connected")
    with pytest.raises(awa.ConfigurationError, match=message):
        client.task(Point, kind="point", schema_version=schema_version, upcasters=upcasters)(
            lambda job: None
        )
    assert "point" not in client.tasks


def test_inserts_take_the_version_of_the_kinds_task():
    registry = Registry()
    registry.register(Point, lambda job: None, kind="point", queue="default")
    registry.register(dict, lambda job: None, kind="v2", queue="default", schema_version=2,
                      upcasters={1: add_y})  # fmt: skip
    assert registry.by_kind["point"].schema_version == 1
    assert registry.resolution(Point(x=1, y=2, z=3), None, None)[4] == 1
    assert registry.resolution({}, "v2", None)[4] == 2
    assert registry.resolution({}, "no_task", None)[4] is None
