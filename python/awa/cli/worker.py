"""``awa worker``: runs the tasks of the app's client until SIGINT or
SIGTERM, in this process or in ``--processes N`` children."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Final

from awa.cli.output import ExitCode, Reply
from awa.client import AsyncClient
from awa.errors import ConfigurationError
from awa.worker import endpoint, processes

log = logging.getLogger("awa.cli")

DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
#: How long, past ``--shutdown-timeout``, the parent of ``--processes N``
#: waits for a child to stop before killing it: a child also writes its last
#: outcomes, gives up leadership and deregisters after its handlers finish.
CHILD_STOP_MARGIN_S = 30.0
#: How often a worker with --metrics-port reads its queues' depth and lag.
QUEUE_METRICS_INTERVAL_S = 15.0


def add_commands(commands: Any) -> None:
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
    worker.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve /metrics (Prometheus), /healthz and /readyz on PORT (0: any free port, "
        "logged); with --processes N, child i serves PORT+i-1 (docs/metrics.md)",
    )
    worker.add_argument(
        "--metrics-host",
        default=endpoint.DEFAULT_HOST,
        metavar="HOST",
        help=f"the address --metrics-port listens on (default {endpoint.DEFAULT_HOST}: "
        "every interface; 127.0.0.1 keeps it local)",
    )
    worker.set_defaults(run=_worker, command="worker")


def port_number(text: str) -> int:
    """``--metrics-port``: 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {text!r}")
    return port


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
    value of an option given twice) and prints no envelope of its own (with
    ``--json`` the parent prints the one that reports them all)."""
    own = [arg for arg in argv if arg != "--json"]
    return [sys.executable, "-m", "awa", *own, "--processes", "1", "--no-migrate"]


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


async def _worker(options: argparse.Namespace) -> Reply:
    if options.processes > 1:
        result = await _worker_processes(options)
        code = result.exit_code
        data = {
            "processes": options.processes,
            "exit_code": code,
            "children": [dataclasses.asdict(child) for child in result.children],
        }
        return Reply(data, [], ExitCode(code) if code in set(ExitCode) else ExitCode.ERROR)
    client = _worker_client(options)
    served: endpoint.Endpoint | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # Windows
            loop.add_signal_handler(signum, stop.set)
    try:
        if options.migrate:
            await client.migrate()
        settings: dict[str, Any] = {}
        if options.global_max_workers is not None:
            settings["global_max_workers"] = options.global_max_workers
        if options.metrics_port is not None:
            settings["queue_metrics_interval"] = QUEUE_METRICS_INTERVAL_S
            served = open_endpoint(options.metrics_host, options.metrics_port, client)
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
        if served is not None:
            served.close()
        await client.close()
    if not worker.healthy:
        print(f"awa: the worker stopped unhealthy: {worker.unhealthy_reason}", file=sys.stderr)
        return Reply({"healthy": False, "reason": worker.unhealthy_reason}, [], ExitCode.ERROR)
    return Reply({"healthy": True, "reason": None}, [])


def open_endpoint(host: str, port: int, client: AsyncClient) -> endpoint.Endpoint:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` for ``client``'s
    worker (starting until it has one); a port in use is a usage error."""
    try:
        served = endpoint.Endpoint(host, port, lambda: client.worker)
    except OSError as error:
        raise ConfigurationError(
            f"--metrics-port: cannot listen on {host}:{port} ({error})"
        ) from None
    log.info("serving /metrics, /healthz and /readyz on http://%s:%d", host, served.port)
    return served


async def _worker_processes(options: argparse.Namespace) -> processes.SupervisorResult:
    """``--processes N``: checks the app and the supervisor's timings here
    (one error rather than N), migrates once if asked, then supervises N
    children (awa.worker.processes), reading their heartbeats where the
    app's client connects."""
    timings = processes.Timings.from_environment()
    client = _worker_client(options)
    try:
        if options.migrate:
            await client.migrate()
        database_url = client.database_url
    finally:
        await client.close()
    return await processes.run_children(
        child_command(options.argv),
        options.processes,
        stop_timeout_s=options.shutdown_timeout + CHILD_STOP_MARGIN_S,
        timings=timings,
        database_url=database_url,
        slot_arguments=_metrics_port_of_slot(options.metrics_port),
    )


def _metrics_port_of_slot(port: int | None) -> Callable[[int], list[str]] | None:
    """``--processes N --metrics-port P``: child i serves P+i-1 (any free
    port each with P = 0); argparse keeps the last value given."""
    if port is None:
        return None
    return lambda slot: ["--metrics-port", str(port + slot - 1 if port else 0)]
