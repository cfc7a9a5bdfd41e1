"""Django settings for the tests, from a database URL."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import django
from django.conf import settings

#: The AsyncClient the worker command runs and the inserts take tasks from.
AWA_APP = "tests.django_project.tasks:client"


def database(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a ``postgresql://`` URL."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def configure(url: str) -> None:
    """Configures Django once per process: ``default`` is the test
    database, ``other`` an SQLite one (which awa refuses)."""
    if settings.configured:
        return
    settings.configure(
        DATABASES={
            "default": database(url),
            "other": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
        },
        INSTALLED_APPS=["awa.contrib.django"],
        AWA_APP=AWA_APP,
        USE_TZ=True,
        LOGGING_CONFIG=None,
    )
    django.setup()
