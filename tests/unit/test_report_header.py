"""The test run's header says which PostgreSQL it uses, never with a password."""

from __future__ import annotations

import re

from awa.embedded import find_bindir
from tests.conftest import describe_test_database


def test_a_configured_server_is_named_by_role_host_port_and_database_without_its_password():
    described = describe_test_database(
        {"AWA_DATABASE_URL": "postgresql://ada:s3cret@db.example:6543/jobs"}
    )
    assert described.startswith("the AWA_DATABASE_URL server, ada@db.example:6543/jobs ")
    assert "s3cret" not in described


def test_the_embedded_server_is_named_with_its_version_and_binaries():
    described = describe_test_database({})
    assert re.fullmatch(
        rf"embedded throwaway PostgreSQL \d+(\.\d+)* from {re.escape(str(find_bindir()))}",
        described,
    )


def test_unusable_binaries_are_reported_in_the_header(monkeypatch, tmp_path):
    monkeypatch.setenv("AWA_PG_BINDIR", str(tmp_path))
    described = describe_test_database({})
    assert described.startswith("embedded throwaway PostgreSQL, unavailable: ")
    assert str(tmp_path) in described


def test_the_pooler_is_mentioned_when_the_clients_go_through_one():
    described = describe_test_database(
        {"AWA_DATABASE_URL": "postgresql://ada@db.example/jobs", "AWA_TEST_POOLER": "transaction"}
    )
    assert described.endswith("; clients through PgBouncer (transaction pooling)")
