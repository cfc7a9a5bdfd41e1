"""awa's web dashboard: queues, jobs, dead letters, periodic schedules,
quarantine and the doctor's warnings, as server-rendered pages
(docs/dashboard.md).

``create_app(client)`` returns a Starlette application to mount in any ASGI
app, or to run with ``awa serve``. It needs the ``web`` extra
(``pip install 'awa-queue[web]'``): importing this package without it raises
:class:`awa.ConfigurationError` naming that command.
"""

from __future__ import annotations

from awa.errors import ConfigurationError

try:
    import jinja2  # noqa: F401
    import python_multipart  # noqa: F401  (the action forms)
    import starlette  # noqa: F401
except ImportError as missing:
    raise ConfigurationError(
        f"the awa dashboard needs the web extra ({missing.name} is not installed): "
        "pip install 'awa-queue[web]'"
    ) from None

from awa.web.app import DEFAULT_TITLE, create_app
from awa.web.security import Auth, AuthCallback, BasicAuth

__all__ = ["DEFAULT_TITLE", "Auth", "AuthCallback", "BasicAuth", "create_app"]
