"""Integrations with frameworks: :mod:`awa.contrib.django`."""
