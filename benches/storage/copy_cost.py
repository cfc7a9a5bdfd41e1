"""What a bulk COPY of 20 000 jobs costs the server, on ``awa.jobs`` as
migrated and on variants of it with one thing taken away or changed.

Each variant gets a fresh database migrated by this tree, then the change
(``--variants``; see ``VARIANTS``). Rounds interleave the variants; each
COPYs the rows ``enqueue_many_copy`` would send (``InsertRows.copy_text``,
the enqueue time read first as ``jobs_copy_start`` does) inside a
transaction, and reads the backend's CPU time (``/proc/<pid>/schedstat``)
and the WAL written. Every fifth round truncates the table and checkpoints,
so the table stays within 100 000 rows. Medians are printed.

``--keyed`` gives every job a partition key (eight tenants in turn) and a
rate class, as a multi-tenant enqueue does; the partition lanes are opened
before the clock starts (``jobs_copy_open_partition_lanes``), as
``enqueue_many_copy`` opens them before its COPY.

    python benches/storage/copy_cost.py --admin-url postgresql://postgres@127.0.0.1:55432/postgres

The server must be on this machine (the backend's CPU is read from /proc);
the databases ``awa_copy_<variant>`` are dropped and made again.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import json
import statistics
import sys
import time
from pathlib import Path

import asyncpg

import awa
from awa import sql
from awa.databases import create_database, drop_database, with_database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers" / "drivers"))
import floor  # the peer run's SQL floor, for its table

JOBS = 20_000
KIND = "bench_job"
QUEUE = "bench"
TENANTS = [f"tenant-{n}" for n in range(8)]
RATE_CLASS = "bench-class"

#: The checks of awa.jobs itself (the other columns' are domains', migration 0026).
TABLE_CHECKS = ("jobs_unique_states_valid", "jobs_unique_complete", "jobs_failure_reason_known")
#: The domains of migration 0026 and their checks.
DOMAIN_CHECKS = (
    ("job_kind", "jobs_kind_length"), ("queue_name", "jobs_queue_length"),
    ("job_args", "jobs_args_object"), ("job_priority", "jobs_priority_range"),
    ("job_max_attempts", "jobs_max_attempts_range"),
    ("job_max_crashes", "jobs_max_crashes_range"), ("job_tags", "jobs_tags_count"),
    ("job_timeout_ms", "jobs_timeout_positive"),
    ("job_schema_version", "jobs_schema_version_positive"),
)  # fmt: skip
PARTIAL_INDEXES = (
    "awa.jobs_unique_key_idx", "awa.jobs_callback_idx", "awa.jobs_callback_timeout_idx",
    "awa.jobs_deadline_idx", "awa.jobs_dead_letter_idx",
)  # fmt: skip

#: What each variant changes after migrating.
VARIANTS: dict[str, list[str]] = {
    "as-migrated": [],
    "no-lane-index": ["DROP INDEX awa.jobs_lane_idx"],
    "no-partition-lane-index": ["DROP INDEX awa.jobs_partition_lane_idx"],
    "lane-index-fixed-width": [
        # (priority, run_at, id): the lane index without its text column.
        "DROP INDEX awa.jobs_lane_idx",
        "CREATE INDEX jobs_lane_idx ON awa.jobs (priority, run_at, id)",
    ],
    # The lane index keyed by a hash of the queue (fixed width), and whether
    # the job has a partition key, not the key (no null in any entry).
    "lane-index-queue-hash": [
        "DROP INDEX awa.jobs_lane_idx",
        "CREATE INDEX jobs_lane_idx ON awa.jobs"
        " ((hashtext(queue)), priority, run_at, id, (partition_key IS NULL))",
    ],
    # The lane index as migrated, without its last column (no null in any
    # entry).
    "lane-index-without-partition-key": [
        "DROP INDEX awa.jobs_lane_idx",
        "CREATE INDEX jobs_lane_idx ON awa.jobs (queue, priority, run_at, id)",
    ],
    # The lane index as migrated, its queue compared byte by byte: under a
    # database collation other than C (C.UTF-8 included), a comparison of
    # two different strings of the text column calls the C library's
    # strcoll. (Two triggers name the column: they are made again around
    # the change; the domain's check is lost, which COPY's rows all pass.)
    "queue-collate-c": [
        """DO $$
        DECLARE
            follow text := pg_get_triggerdef(
                (SELECT oid FROM pg_trigger WHERE tgname = 'jobs_follow_on_update'));
            open_lane text := pg_get_triggerdef(
                (SELECT oid FROM pg_trigger WHERE tgname = 'jobs_open_partition_lane_on_update'));
        BEGIN
            DROP TRIGGER jobs_follow_on_update ON awa.jobs;
            DROP TRIGGER jobs_open_partition_lane_on_update ON awa.jobs;
            ALTER TABLE awa.jobs ALTER COLUMN queue TYPE text COLLATE "C";
            EXECUTE follow;
            EXECUTE open_lane;
        END $$"""
    ],
    # Migration 0022's layout: every job in the partition lane index (its
    # partition '' stood for the jobs without a key), the whole lane's index
    # without the key.
    "partition-index-every-job": [
        "DROP INDEX awa.jobs_partition_lane_idx",
        "CREATE INDEX jobs_partition_lane_idx"
        " ON awa.jobs (queue, priority, (coalesce(partition_key, '')), run_at, id)",
        "DROP INDEX awa.jobs_lane_idx",
        "CREATE INDEX jobs_lane_idx ON awa.jobs (queue, priority, run_at, id)",
    ],
    "fillfactor-70": ["ALTER TABLE awa.jobs SET (fillfactor = 70)"],
    "no-checks": [
        "ALTER TABLE awa.jobs " + ", ".join(f"DROP CONSTRAINT {name}" for name in TABLE_CHECKS),
        *(f"ALTER DOMAIN awa.{domain} DROP CONSTRAINT {name}" for domain, name in DOMAIN_CHECKS),
    ],
    "no-partial-indexes": ["DROP INDEX " + ", ".join(PARTIAL_INDEXES)],
    # The grammar of a partition key and of a rate class (regular
    # expressions, checked on every row that names one).
    "no-domain-checks": [
        "ALTER DOMAIN awa.partition_key DROP CONSTRAINT partition_key_grammar",
        "ALTER DOMAIN awa.rate_class DROP CONSTRAINT rate_class_grammar",
    ],
    "no-triggers": ["ALTER TABLE awa.jobs DISABLE TRIGGER USER"],
    # The table as migrated, the same rows in COPY's binary format.
    "binary-format": [],
    # The table as migrated, the columns whose value is the column's default
    # left out of the COPY (state, priority, max_attempts, max_crashes, tags,
    # metadata), so the server fills them in instead of parsing them.
    "defaults-left-out": [],
    # Not awa's table: the peer run's SQL floor (benches/peers/drivers/floor.py),
    # the same payloads COPYed into its four-column table, as its bulk
    # enqueue does; what the bulk row's "÷ floor" compares with.
    "sql-floor": [floor.SCHEMA],
}
BINARY_VARIANTS = {"binary-format"}
#: Which of ``copy_columns`` the variant sends (all of them if not listed).
COLUMN_VARIANTS = {"defaults-left-out": ("kind", "queue", "args", "run_at")}
FLOOR_VARIANTS = {"sql-floor"}


def backend_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


class Variant:
    def __init__(self, name: str, client: awa.AsyncClient, conn: asyncpg.Connection, pid: int):
        self.name = name
        self.client = client
        self.conn = conn
        self.pid = pid
        self.wall_ms: list[float] = []
        self.cpu_ms: list[float] = []
        self.wal_per_job: list[float] = []

    @classmethod
    async def open(cls, admin_url: str, name: str) -> Variant:
        database = "awa_copy_" + name.replace("-", "_")
        await drop_database(admin_url, database)
        await create_database(admin_url, database)
        url = with_database(admin_url, database)
        client = awa.AsyncClient(url)
        await client.migrate()
        client.task(dict, kind=KIND, queue=QUEUE)(_never_run)
        conn = await asyncpg.connect(url)
        for statement in VARIANTS[name]:
            await conn.execute(statement)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        return cls(name, client, conn, pid)

    async def copy_once(
        self, payloads: list[dict], per_job: list[dict] | None, truncate: bool
    ) -> None:
        rows, _ = self.client._rows(payloads, per_job, {"kind": KIND, "queue": QUEUE}, copy=True)
        columns = list(rows.copy_columns(False))
        if truncate:
            await self.conn.execute("TRUNCATE awa.jobs")
            if self.name in FLOOR_VARIANTS:
                await self.conn.execute("TRUNCATE floor_jobs")
            await self.conn.execute("CHECKPOINT")
        async with self.conn.transaction():
            if self.name in FLOOR_VARIANTS:
                await self._copy_timed(
                    "floor_jobs",
                    None,
                    ["args"],
                    b"".join(json.dumps(p).encode() + b"\n" for p in payloads),
                    None,
                    len(payloads),
                )
                return
            lanes = rows.partition_lanes()
            if lanes[0]:
                await self.conn.fetch(sql.query("jobs_copy_open_partition_lanes"), *lanes)
            enqueued_us = await self.conn.fetchval(
                "SELECT (extract(epoch FROM awa.enqueue_time_v1()) * 1000000)::bigint"
            )
            text = rows.copy_text(enqueued_us, None)
            records = binary_records(text) if self.name in BINARY_VARIANTS else None
            if self.name in COLUMN_VARIANTS:
                columns, text = only_columns(columns, text, COLUMN_VARIANTS[self.name])
            await self._copy_timed("jobs", "awa", columns, text, records, len(payloads))

    async def _copy_timed(
        self,
        table: str,
        schema: str | None,
        columns: list[str],
        text: bytes,
        records: list[tuple] | None,
        jobs: int,
    ) -> None:
        """One COPY, with the backend's CPU, the wall time and the WAL it wrote."""
        wal_before = await self.conn.fetchval("SELECT pg_current_wal_insert_lsn()")
        cpu_before, started = backend_cpu_s(self.pid), time.perf_counter()
        if records is None:
            await self.conn.copy_to_table(
                table, schema_name=schema, columns=columns, source=io.BytesIO(text)
            )
        else:
            # asyncpg sends records in the binary format; the records are
            # made before the clock starts, so what differs is the server.
            await self.conn.copy_records_to_table(
                table, schema_name=schema, columns=columns, records=records
            )
        wall_s, cpu_s = time.perf_counter() - started, backend_cpu_s(self.pid) - cpu_before
        wal = await self.conn.fetchval(
            "SELECT pg_current_wal_insert_lsn() - $1::pg_lsn", wal_before
        )
        self.wall_ms.append(wall_s * 1000)
        self.cpu_ms.append(cpu_s * 1000)
        self.wal_per_job.append(float(wal) / jobs)

    async def close(self) -> None:
        await self.conn.close()
        await self.client.close()


def only_columns(columns: list[str], text: bytes, kept: tuple[str, ...]) -> tuple[list[str], bytes]:
    """The COPY text with only the ``kept`` columns."""
    at = [columns.index(name) for name in kept]
    lines = (line.split(b"\t") for line in text.rstrip(b"\n").split(b"\n"))
    return list(kept), b"".join(b"\t".join(fields[i] for i in at) + b"\n" for fields in lines)


def binary_records(text: bytes) -> list[tuple]:
    """The rows of ``copy_text`` (no tags, metadata or limits) as values."""
    records = []
    for line in text.decode().splitlines():
        kind, queue, args, state, priority, max_attempts, max_crashes, _, _, run_at = line.split(
            "\t"
        )
        records.append((
            kind, queue, args, state, int(priority), int(max_attempts), int(max_crashes),
            None, None, datetime.datetime.fromisoformat(run_at),
        ))  # fmt: skip
    return records


async def _never_run(job: object) -> None:
    raise AssertionError("no worker runs here")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--keyed", action="store_true", help="a partition key and a rate class")
    opts = parser.parse_args()
    names = opts.variants.split(",")
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    variants = [await Variant.open(opts.admin_url, name) for name in names]
    payloads = [{"i": i} for i in range(JOBS)]
    per_job = (
        [
            {"partition_key": TENANTS[i % len(TENANTS)], "rate_class": RATE_CLASS}
            for i in range(JOBS)
        ]
        if opts.keyed
        else None
    )
    try:
        for round_number in range(opts.rounds):
            for variant in variants:
                await variant.copy_once(payloads, per_job, truncate=round_number % 5 == 0)
    finally:
        for variant in variants:
            await variant.close()
    keyed = ", each with a partition key and a rate class" if opts.keyed else ""
    print(f"COPY of {JOBS} jobs{keyed}, medians of {opts.rounds} rounds")
    print("| variant | wall ms | backend CPU ms | WAL bytes / job |")
    print("|---|---|---|---|")
    for variant in variants:
        print(
            f"| {variant.name} | {statistics.median(variant.wall_ms):.1f} "
            f"| {statistics.median(variant.cpu_ms):.1f} "
            f"| {statistics.median(variant.wal_per_job):.1f} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
