"""The project's awa tasks (settings.AWA_APP)."""

from __future__ import annotations

import os

from pydantic import BaseModel

import awa

client = awa.AsyncClient(os.environ.get("AWA_DATABASE_URL"))


class SendReceipt(BaseModel):
    order: str


@client.task(SendReceipt, kind="send_receipt", queue="receipts")
async def send_receipt(job: awa.Job[SendReceipt]) -> None:
    """Does nothing: the tests look for the job completed."""
