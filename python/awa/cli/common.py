"""What every command that talks to a database shares: its options, its
client, and the event loop it runs on."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

from awa.client import AsyncClient
from awa.connecting import DEFAULT_CONNECT_TIMEOUT_S
from awa.errors import ConfigurationError


def add_database_options(parser: argparse.ArgumentParser) -> None:
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


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json`` after the command too (``awa jobs show 5 --json``). Its
    default is left unset, so it does not undo ``awa --json jobs show 5``."""
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON object (docs/cli.md) instead of lines for a person",
    )


#: Jobs a listing gives when not told how many.
DEFAULT_PAGE = 50


def add_page_options(parser: argparse.ArgumentParser, most: int) -> None:
    """``--limit`` and ``--payload`` of a listing of jobs."""
    parser.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_PAGE,
        metavar="N",
        help=f"at most N jobs (default {DEFAULT_PAGE}, at most {most})",
    )
    parser.add_argument(
        "--payload", action="store_true", help="also give args and metadata (may be personal)"
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


def client(options: argparse.Namespace) -> AsyncClient:
    return AsyncClient(required_url(options), connect_timeout=options.connect_timeout)


def event_loop_runner(choice: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
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
