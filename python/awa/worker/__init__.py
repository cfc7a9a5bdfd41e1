"""The worker: claims jobs, runs their handlers, writes their outcomes.

One room per concern, values flowing one way (see ``pipeline.py``):
``producer`` (claims), ``attempt`` (the running job a handler receives),
``executor`` (runs one handler), ``outcome`` (what it came to),
``completer`` (buffers and writes outcomes), and the services around them:
``notifier``, ``heartbeat``, ``control``, ``supervisor`` and ``worker``.
"""

from awa.worker.worker import Worker

__all__ = ["Worker"]
