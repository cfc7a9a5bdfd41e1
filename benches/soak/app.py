"""The soak's application: ``python -m awa worker --app benches.soak.app:client``.

One task, ``soak_tick``, that does nothing. ``AWA_SOAK_DATABASE_URL`` is
where it connects; ``AWA_SOAK_WORKER`` (a JSON object) holds worker settings
(``awa.WorkerConfig``) added to the CLI's ``client.start(queues)``, which
takes none of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import awa

QUEUE = "soak"
KIND = "soak_tick"


class SoakClient(awa.AsyncClient):
    """An ``AsyncClient`` whose worker takes the soak's settings."""

    async def start(
        self,
        queues: Sequence[tuple[str, int]] | Mapping[str, int] | None = None,
        **settings: Any,
    ) -> None:
        configured = json.loads(os.environ.get("AWA_SOAK_WORKER", "{}"))
        await super().start(queues, **{**configured, **settings})


client = SoakClient(os.environ.get("AWA_SOAK_DATABASE_URL"))


@client.task(dict, kind=KIND, queue=QUEUE)
async def tick(job: awa.Job[dict[str, Any]]) -> None:
    return None
