"""``manage.py awa_worker``: ``awa worker --app <settings.AWA_APP>`` inside
the Django project, so handlers can use its settings and models."""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from awa import cli
from awa.cli.worker import DEFAULT_SHUTDOWN_TIMEOUT_S


class Command(BaseCommand):
    help = (
        "Runs an awa worker for the AsyncClient settings.AWA_APP names until SIGINT or "
        "SIGTERM (as `awa worker --app`; see docs/cli.md)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            default=[],
            help="a queue and its concurrency, as for awa worker (repeatable)",
        )
        parser.add_argument("--global-max-workers", type=int, default=None)
        parser.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT_S)
        parser.add_argument("--migrate", action="store_true", help="migrate before starting")

    def handle(self, *args: Any, **options: Any) -> None:
        app = getattr(settings, "AWA_APP", None)
        if not app:
            raise CommandError(
                "set AWA_APP in your settings to your awa.AsyncClient, e.g. "
                'AWA_APP = "myproject.tasks:client"'
            )
        code = cli.main(worker_argv(app, options))
        if code:
            raise CommandError(f"the awa worker exited with status {code}", returncode=code)


def worker_argv(app: str, options: dict[str, Any]) -> list[str]:
    """The ``awa`` command line these options stand for."""
    argv = ["worker", "--app", app, "--shutdown-timeout", str(options["shutdown_timeout"])]
    for queue in options["queue"]:
        argv += ["--queue", queue]
    if options["global_max_workers"] is not None:
        argv += ["--global-max-workers", str(options["global_max_workers"])]
    if options["migrate"]:
        argv.append("--migrate")
    return argv
