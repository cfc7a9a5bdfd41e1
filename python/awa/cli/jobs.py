"""``awa jobs list | show | explain | cancel | retry``: the jobs, one job,
why it is not running, and the two things an operator does to one."""

from __future__ import annotations

import argparse
import json
from typing import Any

from awa.cli.common import add_database_options, add_json_option, add_page_options, client
from awa.cli.output import Refused, Reply, when
from awa.client import MAX_LIST_LIMIT
from awa.explain import Explanation
from awa.job import Job, JobState, Progress


def add_commands(commands: Any) -> None:
    jobs = commands.add_parser("jobs", help="inspect jobs")
    jobs_commands = jobs.add_subparsers(required=True, metavar="jobs-command")
    listed = jobs_commands.add_parser("list", help="jobs, newest first, by any of the filters")
    listed.add_argument("--state", metavar="STATE", help="e.g. failed, available, running")
    listed.add_argument("--queue", metavar="QUEUE")
    listed.add_argument("--kind", metavar="KIND")
    listed.add_argument("--tag", metavar="TAG", help="jobs that carry this tag")
    listed.add_argument(
        "--before", type=int, metavar="JOB_ID", help="ids below this one: the next page"
    )
    add_page_options(listed, MAX_LIST_LIMIT)
    listed.set_defaults(run=_list, command="jobs list")
    show = jobs_commands.add_parser("show", help="one job and every attempt it made")
    show.add_argument("job_id", type=int, metavar="JOB_ID")
    show.add_argument(
        "--payload", action="store_true", help="also print args and metadata (may be personal)"
    )
    show.set_defaults(run=_show, command="jobs show")
    explain = jobs_commands.add_parser("explain", help="why a job is not running now")
    explain.add_argument("job_id", type=int, metavar="JOB_ID")
    explain.set_defaults(run=_explain, command="jobs explain")
    cancel = jobs_commands.add_parser(
        "cancel", help="cancel a job that has not finished (a running handler is told)"
    )
    cancel.add_argument("job_id", type=int, metavar="JOB_ID")
    cancel.add_argument("--reason", help="kept in the job's errors")
    cancel.set_defaults(run=_cancel, command="jobs cancel")
    retry = jobs_commands.add_parser(
        "retry", help="send failed jobs back to work (as `dlq retry` with their ids)"
    )
    retry.add_argument("job_ids", nargs="+", type=int, metavar="JOB_ID")
    retry.set_defaults(run=_retry, command="jobs retry")
    # `awa explain JOB_ID`: the same, at the top (what operators type first).
    top_explain = commands.add_parser("explain", help="why a job is not running now")
    top_explain.add_argument("job_id", type=int, metavar="JOB_ID")
    top_explain.set_defaults(run=_explain, command="jobs explain")
    for parser in (listed, show, explain, cancel, retry, top_explain):
        add_database_options(parser)
        add_json_option(parser)


async def _list(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        found = await awa.list_jobs(
            state=options.state, queue=options.queue, kind=options.kind, tag=options.tag,
            before=options.before, limit=options.limit, include_payload=options.payload,
        )  # fmt: skip
    # A full page may have more after it; a short one has none.
    next_before = found[-1].id if len(found) == options.limit else None
    lines = [describe_listed(job) for job in found] or ["no jobs"]
    if next_before is not None:
        lines.append(f"(newest first; the next page: --before {next_before})")
    return Reply(
        {"jobs": [job_data(job, with_payload=options.payload) for job in found],
         "next_before": next_before},
        lines,
    )  # fmt: skip


async def _cancel(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        reason = {} if options.reason is None else {"reason": options.reason}
        cancelled = await awa.cancel(options.job_id, **reason)
        if cancelled is None:
            finished = await awa.get_job(options.job_id, include_payload=False)
            return Reply(
                {"cancelled": False, "job": job_data(finished, with_payload=False)},
                [f"job {options.job_id} had already finished ({finished.state.value})"],
            )
    return Reply(
        {"cancelled": True, "job": job_data(cancelled, with_payload=False)},
        [f"job {options.job_id} is cancelled"],
    )


async def _retry(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        # Only dead letters go back: say which are not before changing any.
        for job_id in options.job_ids:
            job = await awa.get_job(job_id, include_payload=False)
            if job.state is not JobState.Failed:
                raise Refused(
                    f"job {job_id} is {job.state.value}: only failed jobs are retried "
                    "(`awa jobs cancel` stops one that has not finished)"
                )
        retried = await awa.retry_from_dlq(options.job_ids)
    return Reply({"retried": retried}, [f"retried jobs {', '.join(map(str, retried))}"])


def describe_listed(job: Job[Any]) -> str:
    """One line of ``awa jobs list``."""
    return (
        f"{job.id}  {job.state.value:<16} {job.queue}  {job.kind}  p{job.priority}  "
        f"attempt {job.attempt}/{job.max_attempts}  run_at {when(job.run_at)}  "
        f"finished {when(job.finalized_at)}"
    )


async def _show(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        job = await awa.get_job(options.job_id, include_payload=options.payload)
    return Reply(job_data(job, with_payload=options.payload),
                 describe_job(job, with_payload=options.payload))  # fmt: skip


async def _explain(options: argparse.Namespace) -> Reply:
    async with client(options) as awa:
        explained = await awa.explain(options.job_id)
    return Reply(explanation_data(explained), [f"{explained.reason.value}: {explained.message}"])


def job_data(job: Job[Any], *, with_payload: bool) -> dict[str, Any]:
    """A job as ``--json`` gives it (docs/cli.md, ``job``)."""
    data: dict[str, Any] = {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "crashes": job.crashes,
        "max_crashes": job.max_crashes,
        "run_at": job.run_at,
        "created_at": job.created_at,
        "attempted_at": job.attempted_at,
        "finalized_at": job.finalized_at,
        "tags": list(job.tags),
        "rate_class": job.rate_class,
        "partition_key": job.partition_key,
        "schema_version": job.schema_version,
        "callback_id": job.callback_id,
        "callback_timeout_at": job.callback_timeout_at,
        "attempts": [
            {
                "attempt": record.attempt,
                "outcome": record.outcome,
                "started_at": record.started_at,
                "finished_at": record.finished_at,
                "worker_id": record.worker_id,
                "error": record.error,
            }
            for record in job.attempts
        ],
        "progress": progress_data(job.progress, with_payload=with_payload),
    }
    if with_payload:
        data["args"] = json.loads(job.args_json)
        data["metadata"] = job.metadata
        data["result"] = job.result
    return data


def progress_data(progress: Progress | None, *, with_payload: bool) -> dict[str, Any] | None:
    """The handler's last report: its percent and message, and the data it
    gave only with ``--payload`` (it may hold personal data)."""
    if progress is None:
        return None
    data: dict[str, Any] = {"percent": progress.percent, "message": progress.message}
    if with_payload:
        data["data"] = progress.data
    return data


def explanation_data(explained: Explanation) -> dict[str, Any]:
    return {
        "job_id": explained.job_id,
        "reason": explained.reason.value,
        "message": explained.message,
        "until": explained.until,
        "ahead": explained.ahead,
        "holders": list(explained.holders),
    }


def describe_job(job: Job[Any], *, with_payload: bool) -> list[str]:
    """The lines ``awa jobs show`` prints: the job, then one per attempt."""
    lines = [
        f"job {job.id}  kind {job.kind}  queue {job.queue}  state {job.state.value}",
        f"  attempt {job.attempt}/{job.max_attempts}  crashes {job.crashes}"
        f"  priority {job.priority}  run_at {when(job.run_at)}",
        f"  created {when(job.created_at)}  finished {when(job.finalized_at)}",
    ]
    flow = [
        f"{name} {value}"
        for name, value in (("rate_class", job.rate_class), ("partition_key", job.partition_key))
        if value is not None
    ]
    if job.schema_version != 1:
        flow.append(f"schema_version {job.schema_version}")
    if flow:
        lines.append("  " + "  ".join(flow))
    progress = job.progress
    if progress is not None:
        message = f"  {progress.message}" if progress.message else ""
        lines.append(f"  progress {progress.percent:g}%{message}")
    if with_payload:
        lines.append(f"  args {job.args_json}")
        lines.append(f"  metadata {json.dumps(job.metadata, sort_keys=True)}")
        if job.state.value == "completed":
            lines.append(f"  result {json.dumps(job.result, sort_keys=True)}")
    else:
        lines.append("  args, metadata and result not shown (--payload shows them)")
    records = job.attempts
    lines.append(f"attempts ({len(records)}):")
    for record in records:
        worker = f"worker {record.worker_id}" if record.worker_id is not None else ""
        error = record.error or {}
        detail = f"{error.get('type')}: {error.get('message')}" if error else ""
        lines.append(
            f"  #{record.attempt:<3} {record.outcome:<10} {when(record.started_at)} → "
            f"{when(record.finished_at)}  {worker}  {detail}".rstrip()
        )
    return lines
