"""The command line: ``python -m awa migrate | worker | jobs show | demo``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib
import importlib.metadata
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Coroutine, Sequence
from types import ModuleType
from typing import Any, Final

import asyncpg

from awa import __version__, log_format
from awa.client import AsyncClient
from awa.connecting import DEFAULT_CONNECT_TIMEOUT_S
from awa.errors import AwaError, ConfigurationError
from awa.job import Job
from awa.periodic import PeriodicInfo
from awa.queues import UNSET, QueueConfig
from awa.worker import processes

log = logging.getLogger("awa.cli")

DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
#: How long, past ``--shutdown-timeout``, the parent of ``--processes N``
#: waits for a child to stop before killing it: a child also writes its last
#: outcomes, gives up leadership and deregisters after its handlers finish.
CHILD_STOP_MARGIN_S = 30.0
#: Exit status of a worker that stopped because a service could not recover.
EXIT_UNHEALTHY = 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(argv)
    # What --processes N re-runs in each child.
    options.argv = list(sys.argv[1:] if argv is None else argv)
    log_format.configure(logging.DEBUG if options.verbose else logging.INFO, options.log_format)
    try:
        return int(event_loop_runner(options.loop)(options.run(options)))
    except (AwaError, OSError, asyncpg.PostgresError) as error:
        print(f"awa: {_one_line(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _one_line(error: BaseException) -> str:
    """The message a command ends with; the error's type where it has none
    (a bare ``TimeoutError`` printed as ``awa: `` before)."""
    message = str(error)
    if isinstance(error, asyncpg.PostgresError):
        return f"the database refused: {message} ({type(error).__name__})"
    return message or type(error).__name__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="awa", description=__doc__)
    try:
        version = importlib.metadata.version("awa-queue")
    except importlib.metadata.PackageNotFoundError:
        version = f"{__version__} (source tree: awa-queue is not installed, so awa.__version__)"
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text lines, or one JSON object per line with each job's fields",
    )
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: uvloop when installed (awa-queue[uvloop]), else asyncio's",
    )
    commands = parser.add_subparsers(required=True, metavar="command")

    migrate = commands.add_parser("migrate", help="bring the awa schema up to date")
    _database_option(migrate)
    migrate.set_defaults(run=_migrate)

    worker = commands.add_parser("worker", help="run a worker until SIGINT or SIGTERM")
    worker.add_argument(
        "--app",
        required=True,
        metavar="MODULE:CLIENT",
        help="where your AsyncClient lives, e.g. myapp.jobs:client",
    )
    worker.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar=QUEUE_SPEC,
        help="a queue and its concurrency in each worker process (repeatable; default: "
        "every task's queue, 10 each); weight and min_workers share --global-max-workers",
    )
    worker.add_argument(
        "--global-max-workers",
        type=at_least_one,
        default=None,
        metavar="N",
        help="at most N handlers at once in each worker process, shared by the queues "
        "by weight (docs/flow-control.md)",
    )
    worker.add_argument(
        "--processes",
        type=at_least_one,
        default=1,
        metavar="N",
        help="run N worker processes, each with every --queue's full concurrency "
        "(default 1: this process is the worker)",
    )
    worker.add_argument(
        "--shutdown-timeout",
        type=float,
        default=DEFAULT_SHUTDOWN_TIMEOUT_S,
        help="seconds running jobs get to finish on shutdown",
    )
    worker.add_argument(
        "--migrate",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="migrate before starting (once, before any of --processes starts)",
    )
    worker.set_defaults(run=_worker)

    jobs = commands.add_parser("jobs", help="inspect jobs")
    jobs_commands = jobs.add_subparsers(required=True, metavar="jobs-command")
    show = jobs_commands.add_parser("show", help="one job and every attempt it made")
    show.add_argument("job_id", type=int, metavar="JOB_ID")
    show.add_argument(
        "--payload", action="store_true", help="also print args and metadata (may be personal)"
    )
    _database_option(show)
    show.set_defaults(run=_jobs_show)

    explain = jobs_commands.add_parser("explain", help="why a job is not running now")
    explain.add_argument("job_id", type=int, metavar="JOB_ID")
    _database_option(explain)
    explain.set_defaults(run=_jobs_explain)

    queues = commands.add_parser("queues", help="pause, resume, configure, drain or show a queue")
    queue_commands = queues.add_subparsers(required=True, metavar="queues-command")
    pause = queue_commands.add_parser("pause", help="no worker of the fleet claims from it")
    pause.add_argument("queue", metavar="QUEUE")
    pause.add_argument("--by", metavar="WHO", help="who pauses it, and why (kept until resumed)")
    resume = queue_commands.add_parser("resume", help="let workers claim from it again")
    resume.add_argument("queue", metavar="QUEUE")
    show_queue = queue_commands.add_parser("show", help="a queue's fleet-wide settings")
    show_queue.add_argument("queue", metavar="QUEUE")
    configure = queue_commands.add_parser(
        "configure",
        help="set a queue's flow control for the fleet (a setting not given is kept; "
        "'none' removes it; docs/flow-control.md)",
    )
    configure.add_argument("queue", metavar="QUEUE")
    configure.add_argument(
        "--priority-aging-interval", type=_or_none(float), default=UNSET,
        metavar="SECONDS|none", help="a due job gains one priority level per this long",
    )  # fmt: skip
    configure.add_argument(
        "--global-max-running", type=_or_none(int), default=UNSET,
        metavar="N|none", help="at most N of its jobs run at once across the fleet",
    )  # fmt: skip
    configure.add_argument(
        "--rate-limit", type=_or_none(_rate_limit), default=UNSET,
        metavar="RATE,BURST|none", help="at most RATE jobs start a second across the fleet, "
        "BURST at once after a lull",
    )  # fmt: skip
    configure.add_argument(
        "--fair", action=argparse.BooleanOptionalAction, default=UNSET,
        help="claim round-robin across the partitions (partition_key=) with jobs waiting",
    )  # fmt: skip
    configure.add_argument(
        "--max-workers-per-partition", type=_or_none(int), default=UNSET,
        metavar="N|none", help="at most N jobs of each partition run at once across the fleet",
    )  # fmt: skip
    drain = queue_commands.add_parser(
        "drain", help="wait until no running, due or retrying job is left (spec 002)"
    )
    drain.add_argument("queue", metavar="QUEUE")
    drain.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="give up after this long"
    )
    for parser_, run in ((pause, _queues_pause), (resume, _queues_resume),
                         (show_queue, _queues_show), (configure, _queues_configure),
                         (drain, _queues_drain)):  # fmt: skip
        _database_option(parser_)
        parser_.set_defaults(run=run)

    periodic = commands.add_parser("periodic", help="list, pause, resume or trigger periodic jobs")
    periodic_commands = periodic.add_subparsers(required=True, metavar="periodic-command")
    listed = periodic_commands.add_parser("list", help="every periodic job the database knows")
    _database_option(listed)
    listed.set_defaults(run=_periodic_list)
    for verb, run, about in (
        ("pause", _periodic_pause, "stop it firing, fleet-wide"),
        ("resume", _periodic_resume, "let it fire again from its next time after now"),
        ("trigger", _periodic_trigger, "enqueue its job now, outside its schedule"),
    ):
        command = periodic_commands.add_parser(verb, help=about)
        command.add_argument("name", metavar="NAME")
        _database_option(command)
        command.set_defaults(run=run)

    demo = commands.add_parser("demo", help="enqueue and work a few hundred real jobs")
    demo.add_argument(
        "--database-url",
        metavar="URL",
        help="a server to run on, in a database the demo creates and drops "
        "(default: AWA_DATABASE_URL's server, else a throwaway embedded one)",
    )
    demo.add_argument("--jobs", type=int, default=300, help="how many jobs to enqueue")
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo's database afterwards (and say where)"
    )
    demo.set_defaults(run=_demo)
    return parser


def event_loop_runner(choice: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    """``asyncio.run``, or ``uvloop.run`` when asked for or (``auto``) installed."""
    if choice == "asyncio":
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigurationError(
                "--loop uvloop needs uvloop: pip install 'awa-queue[uvloop]'"
            ) from None
        return asyncio.run
    return uvloop.run


def _database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="PostgreSQL URL (default: AWA_DATABASE_URL)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up connecting after this long (default {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )


def required_url(options: argparse.Namespace) -> str:
    """The database a command works on: never a throwaway one."""
    url = options.database_url or os.environ.get("AWA_DATABASE_URL")
    if not url:
        raise ConfigurationError(
            "no database given: use --database-url postgresql://user@host/db "
            "or set AWA_DATABASE_URL"
        )
    return str(url)


def _client(options: argparse.Namespace) -> AsyncClient:
    return AsyncClient(required_url(options), connect_timeout=options.connect_timeout)


async def _migrate(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        applied = await client.migrate()
    print(f"applied migrations {applied}" if applied else "the schema is up to date")
    return 0


def load_client(target: str) -> AsyncClient:
    """Imports ``module:attribute`` and checks it is an :class:`AsyncClient`."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app must look like module:client, got {target!r}")
    module = _import_app(module_name)
    try:
        client = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(client, AsyncClient):
        raise ConfigurationError(f"{target} is a {type(client).__name__}, not an awa.AsyncClient")
    return client


def _import_app(module_name: str) -> ModuleType:
    # The console script does not put the current directory on sys.path the
    # way `python -m awa` does; an app next to the user must load either way.
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not _is_prefix(error.name, module_name):
            raise ConfigurationError(_import_failure(module_name, error)) from None
        raise ConfigurationError(
            f"--app: no module named {error.name!r} (looked in the current directory "
            f"{here} and on sys.path; run from your project's root or set PYTHONPATH)"
        ) from None
    except Exception as error:  # noqa: BLE001 - the app's own code may raise anything
        raise ConfigurationError(_import_failure(module_name, error)) from None


def _is_prefix(missing: str, module_name: str) -> bool:
    return module_name == missing or module_name.startswith(missing + ".")


def _import_failure(module_name: str, error: BaseException) -> str:
    """The error and the app's own frames (not importlib's)."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<frozen ")
        and frame.filename not in (__file__, importlib.__file__)
    ]
    where = "".join(traceback.format_list(frames)).rstrip()
    return (
        f"--app: importing {module_name!r} raised {type(error).__name__}: {error}\n{where}"
    ).rstrip()


def at_least_one(text: str) -> int:
    """``--processes``, ``--global-max-workers``: a whole number of at least
    1 (argparse reports the error and exits 2 otherwise)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {count}")
    return count


def child_command(argv: Sequence[str]) -> list[str]:
    """The command each child of ``--processes N`` runs: this one, as a
    single worker process that does not migrate (argparse keeps the last
    value of an option given twice)."""
    return [sys.executable, "-m", "awa", *argv, "--processes", "1", "--no-migrate"]


QUEUE_SPEC: Final = "NAME=MAX_WORKERS[,weight=W][,min_workers=M]"
_QUEUE_SPEC_KEYS: Final = ("weight", "min_workers")


def parse_queues(specs: Sequence[str]) -> list[dict[str, Any]] | None:
    """``--queue`` values as queue entries for ``client.start``."""
    if not specs:
        return None
    return [_queue_entry(spec) for spec in specs]


def _queue_entry(spec: str) -> dict[str, Any]:
    head, *extras = spec.split(",")
    name, sep, count = head.partition("=")
    if not sep or not name or not count.isdigit():
        raise ConfigurationError(f"--queue must look like {QUEUE_SPEC}, got {spec!r}")
    entry: dict[str, Any] = {"name": name, "max_workers": int(count)}
    for extra in extras:
        key, sep, value = extra.partition("=")
        if key not in _QUEUE_SPEC_KEYS or not sep or not value.isdigit():
            raise ConfigurationError(
                f"--queue must look like {QUEUE_SPEC}, got {spec!r} ({extra!r} is not "
                "weight=W or min_workers=M with a whole number)"
            )
        entry[key] = int(value)
    return entry


def _worker_client(options: argparse.Namespace) -> AsyncClient:
    client = load_client(options.app)
    if client.embedded:
        raise ConfigurationError(
            f"{options.app} runs on a throwaway embedded server (embedded=True), which no "
            "other process can reach: give it a database URL for awa worker"
        )
    return client


async def _worker(options: argparse.Namespace) -> int:
    if options.processes > 1:
        return await _worker_processes(options)
    client = _worker_client(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # Windows
            loop.add_signal_handler(signum, stop.set)
    try:
        if options.migrate:
            await client.migrate()
        settings = {}
        if options.global_max_workers is not None:
            settings["global_max_workers"] = options.global_max_workers
        await client.start(parse_queues(options.queue), **settings)
        worker = client.worker
        assert worker is not None
        unhealthy = asyncio.ensure_future(worker.wait_until_unhealthy())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({unhealthy, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        unhealthy.cancel()
        log.info("stopping: running jobs get %.0fs to finish", options.shutdown_timeout)
        await client.shutdown(timeout=options.shutdown_timeout)
    finally:
        await client.close()
    if not worker.healthy:
        print(f"awa: the worker stopped unhealthy: {worker.unhealthy_reason}", file=sys.stderr)
        return EXIT_UNHEALTHY
    return 0


async def _worker_processes(options: argparse.Namespace) -> int:
    """``--processes N``: checks the app here (one error rather than N),
    migrates once if asked, then runs N children (awa.worker.processes)."""
    client = _worker_client(options)
    try:
        if options.migrate:
            await client.migrate()
    finally:
        await client.close()
    return await processes.run_children(
        child_command(options.argv),
        options.processes,
        stop_timeout_s=options.shutdown_timeout + CHILD_STOP_MARGIN_S,
    )


async def _jobs_show(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        job = await client.get_job(options.job_id, include_payload=options.payload)
    for line in describe_job(job, with_payload=options.payload):
        print(line)
    return 0


async def _jobs_explain(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        explained = await client.explain(options.job_id)
    print(f"{explained.reason.value}: {explained.message}")
    return 0


async def _queues_pause(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        config = await client.pause_queue(options.queue, paused_by=options.by)
    print(describe_queue(config))
    return 0


async def _queues_resume(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        config = await client.resume_queue(options.queue)
    print(describe_queue(config))
    return 0


async def _queues_show(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        config = await client.get_queue_config(options.queue)
    print(describe_queue(config))
    return 0


async def _queues_configure(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        config = await client.configure_queue(
            options.queue,
            priority_aging_interval=options.priority_aging_interval,
            global_max_running=options.global_max_running,
            rate_limit=options.rate_limit,
            fair=options.fair,
            max_workers_per_partition=options.max_workers_per_partition,
        )
    print(describe_queue(config))
    return 0


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An option's value parser that also takes ``none`` (remove the setting)."""

    def parse_or_none(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    parse_or_none.__name__ = getattr(parse, "__name__", "value")
    return parse_or_none


def _rate_limit(text: str) -> tuple[float, int]:
    rate, comma, burst = text.partition(",")
    try:
        if not comma:
            raise ValueError(text)
        return float(rate), int(burst)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RATE,BURST (jobs a second, and an integer burst), e.g. 50,5 (got {text!r})"
        ) from None


async def _queues_drain(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        waited_for = await client.drain_queue(options.queue, timeout=options.timeout)
    print(f"queue {options.queue} is drained (it waited for {waited_for} jobs)")
    return 0


async def _periodic_list(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        schedules = await client.list_periodic()
    for info in schedules:
        print(describe_periodic(info))
    if not schedules:
        print("no periodic jobs")
    return 0


async def _periodic_pause(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        print(describe_periodic(await client.pause_periodic(options.name)))
    return 0


async def _periodic_resume(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        print(describe_periodic(await client.resume_periodic(options.name)))
    return 0


async def _periodic_trigger(options: argparse.Namespace) -> int:
    async with _client(options) as client:
        job = await client.trigger_periodic(options.name)
    print(
        f"periodic job {options.name}: enqueued job {job.id} (kind {job.kind}, queue {job.queue})"
    )
    return 0


def describe_periodic(info: PeriodicInfo) -> str:
    """One line of ``awa periodic list``."""
    if info.retired_at is not None:
        status = f"retired {_when(info.retired_at)}"
    elif info.paused:
        status = "paused"
    else:
        status = f"next {_when(info.next_fire_at)}"
    return (
        f"{info.name}  {info.cron!r} {info.timezone}  kind {info.kind}  queue {info.queue}  "
        f"{status}  last {_when(info.last_fire_at)}"
    )


def describe_queue(config: QueueConfig) -> str:
    """The line ``awa queues pause|resume|configure|show`` prints."""
    if config.paused:
        by = f" by {config.paused_by}" if config.paused_by else ""
        line = (
            f"queue {config.queue}: paused since {_when(config.paused_at)}{by}; no worker claims "
            f"from it until `awa queues resume {config.queue}`"
        )
    else:
        line = f"queue {config.queue}: not paused"
    limits = []
    if config.priority_aging_interval is not None:
        limits.append(f"priority aging every {config.priority_aging_interval:g}s")
    if config.global_max_running is not None:
        limits.append(f"at most {config.global_max_running} running across the fleet")
    if config.rate_limit is not None:
        rate, burst = config.rate_limit
        limits.append(f"rate limit {rate:g}/s, burst {burst}")
    if config.fair:
        limits.append("fair across partitions")
    if config.max_workers_per_partition is not None:
        limits.append(f"at most {config.max_workers_per_partition} running per partition")
    return "; ".join([line, *limits])


def describe_job(job: Job[Any], *, with_payload: bool) -> list[str]:
    """The lines ``awa jobs show`` prints: the job, then one per attempt."""
    lines = [
        f"job {job.id}  kind {job.kind}  queue {job.queue}  state {job.state.value}",
        f"  attempt {job.attempt}/{job.max_attempts}  crashes {job.crashes}"
        f"  priority {job.priority}  run_at {_when(job.run_at)}",
        f"  created {_when(job.created_at)}  finished {_when(job.finalized_at)}",
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
    if with_payload:
        lines.append(f"  args {job.args_json}")
        lines.append(f"  metadata {json.dumps(job.metadata, sort_keys=True)}")
    else:
        lines.append("  args and metadata not shown (--payload shows them)")
    records = job.attempts
    lines.append(f"attempts ({len(records)}):")
    for record in records:
        worker = f"worker {record.worker_id}" if record.worker_id is not None else ""
        error = record.error or {}
        detail = f"{error.get('type')}: {error.get('message')}" if error else ""
        lines.append(
            f"  #{record.attempt:<3} {record.outcome:<10} {_when(record.started_at)} → "
            f"{_when(record.finished_at)}  {worker}  {detail}".rstrip()
        )
    return lines


def _when(moment: datetime.datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="milliseconds")


async def _demo(options: argparse.Namespace) -> int:
    from awa import demo

    return await demo.run(
        options.database_url or os.environ.get("AWA_DATABASE_URL"), options.jobs, keep=options.keep
    )
