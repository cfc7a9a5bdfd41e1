"""Hosts of their own on this machine, for workers that must not share one:
a network namespace each, joined to this one by a veth pair, with a hostname
of its own.

A :class:`Host` reaches PostgreSQL only through its gateway, the address of
this namespace's end of the pair: :meth:`Host.database_url` starts a proxy
there (:class:`tests.faults.ReplyCutter`) to the server the suite uses.
:meth:`Host.unplug` takes its link down, as a host cut off from the network.
Every address is a private one on this machine; the namespace, the pair and
the proxies go when the host is closed. Needs root (``ip netns``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Sequence

from tests.faults import ReplyCutter

#: The private range the hosts' /30 links come from.
LINKS = ipaddress.IPv4Network("10.231.0.0/16")


def unavailable() -> str | None:
    """Why hosts of their own cannot be made here, or None."""
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "network namespaces need iproute2's ip and util-linux's unshare"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _link_addresses(number: int) -> tuple[str, str]:
    """The two addresses of /30 number ``number`` of LINKS: ours, the host's."""
    base = LINKS.network_address + number * 4
    return str(base + 1), str(base + 2)


def _free_link() -> tuple[str, str]:
    """The addresses of a /30 of LINKS that no interface of this namespace uses."""
    used = subprocess.run(
        ["ip", "-o", "-4", "addr"], check=True, capture_output=True, text=True, timeout=10
    ).stdout
    for _ in range(100):
        gateway, address = _link_addresses(uuid.uuid4().int % (LINKS.num_addresses // 4))
        if f" {gateway}/" not in used:
            return gateway, address
    raise RuntimeError(f"no free /30 left in {LINKS}")


class Host:
    """A network namespace named ``awa-<tag>`` with hostname ``name``."""

    def __init__(self, name: str) -> None:
        tag = uuid.uuid4().hex[:8]
        self.name = name
        self.namespace = f"awa-{tag}"
        self._outside = f"awa{tag}o"  # interface names: at most 15 characters
        self._inside = f"awa{tag}i"
        self.gateway, self.address = _free_link()
        self._proxies: list[ReplyCutter] = []

    def open(self) -> None:
        _ip("netns", "add", self.namespace)
        try:
            _ip("link", "add", self._outside, "type", "veth", "peer", "name", self._inside)
            _ip("link", "set", self._inside, "netns", self.namespace)
            _ip("addr", "add", f"{self.gateway}/30", "dev", self._outside)
            _ip("link", "set", self._outside, "up")
            inside = ("netns", "exec", self.namespace, "ip")
            _ip(*inside, "addr", "add", f"{self.address}/30", "dev", self._inside)
            _ip(*inside, "link", "set", self._inside, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            self._remove()
            raise

    async def close(self) -> None:
        for proxy in self._proxies:
            await proxy.close()
        self._remove()

    def _remove(self) -> None:
        # Deleting the namespace deletes its end of the pair, and with it ours.
        subprocess.run(["ip", "link", "del", self._outside], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, timeout=10)

    async def database_url(self, server_url: str) -> str:
        """A URL for ``server_url``'s database that works from this host."""
        proxy = ReplyCutter(server_url, listen_host=self.gateway)
        self._proxies.append(proxy)
        return await proxy.start()

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host: in its namespace, under its hostname."""
        return [
            "ip", "netns", "exec", self.namespace,
            "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *argv,
        ]  # fmt: skip

    def unplug(self) -> None:
        """Takes the host's link down: nothing reaches it or leaves it."""
        _ip("link", "set", self._outside, "down")

    def plug(self) -> None:
        _ip("link", "set", self._outside, "up")


@contextlib.asynccontextmanager
async def hosts(*names: str) -> AsyncIterator[list[Host]]:
    """Hosts named ``names``, removed afterwards whatever happened."""
    made: list[Host] = []
    try:
        for name in names:
            host = Host(name)
            await asyncio.to_thread(host.open)
            made.append(host)
        yield made
    finally:
        for host in made:
            await host.close()
