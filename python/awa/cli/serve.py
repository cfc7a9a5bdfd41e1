"""``awa serve``: the web dashboard (docs/dashboard.md) and ``/metrics``,
served by uvicorn until SIGINT or SIGTERM. Needs the ``web`` extra; without
it the command is a usage error naming ``pip install 'awa-queue[web]'``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any, Final

from awa.cli.common import add_database_options, client
from awa.cli.output import Reply
from awa.errors import ConfigurationError

log = logging.getLogger("awa.cli")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8080
#: Where ``--basic-auth`` is read from when not given on the command line
#: (which every user of the machine can see in the process list).
BASIC_AUTH_ENV: Final = "AWA_BASIC_AUTH"


def add_commands(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="serve the web dashboard and /metrics until SIGINT or SIGTERM"
    )
    serve.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--allow-actions",
        action="store_true",
        help="offer retry, purge, pause, resume, trigger and release (default: read-only)",
    )
    serve.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        default=None,
        help=f"ask for this user and password (default: {BASIC_AUTH_ENV}, else no auth)",
    )
    serve.add_argument("--title", default=None, help="the name the pages carry (default awa)")
    add_database_options(serve)
    serve.set_defaults(run=_serve, command="serve")


async def _serve(options: argparse.Namespace) -> Reply:
    if getattr(options, "json", False):
        raise ConfigurationError("awa serve serves pages until stopped: it takes no --json")
    try:
        import uvicorn

        from awa import web
    except ImportError as missing:
        raise ConfigurationError(
            f"awa serve needs the web extra ({missing.name} is not installed): "
            "pip install 'awa-queue[web]'"
        ) from None
    credentials = options.basic_auth or os.environ.get(BASIC_AUTH_ENV) or None
    auth = None if credentials is None else web.BasicAuth.parse(credentials)
    async with client(options) as awa:
        app = web.create_app(
            awa,
            allow_actions=options.allow_actions,
            auth=auth,
            title=options.title or web.DEFAULT_TITLE,
            metrics=True,
        )
        config = uvicorn.Config(
            app, host=options.host, port=options.port, lifespan="off", log_config=None,
            access_log=False,
        )  # fmt: skip
        server = _server(config)
        mode = "actions enabled" if options.allow_actions else "read-only"
        log.info(
            "awa dashboard on http://%s:%d (%s%s)", options.host, options.port, mode,
            ", basic auth" if auth else "",
        )  # fmt: skip
        with _stop_on_signals(server):
            await server.serve()
        if not server.started:
            raise ConfigurationError(
                f"awa serve could not listen on {options.host}:{options.port} (see the log above)"
            )
    return Reply({"stopped": True}, ["the dashboard stopped"])


def _server(config: Any) -> Any:
    """uvicorn's server, stopped by our signal handlers (:func:`_stop_on_signals`):
    uvicorn's own raise the signal again once it has shut down, which would
    end the process before the client's pool is closed."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


@contextlib.contextmanager
def _stop_on_signals(server: Any) -> Iterator[None]:
    """SIGINT and SIGTERM ask ``server`` to finish its requests and stop."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, setattr, server, "should_exit", True)
    try:
        yield
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
