"""The Django app (``INSTALLED_APPS = [..., "awa.contrib.django"]``): it
brings the ``awa_worker`` management command."""

from __future__ import annotations

from django.apps import AppConfig


class AwaConfig(AppConfig):
    name = "awa.contrib.django"
    label = "awa"
    verbose_name = "awa job queue"
