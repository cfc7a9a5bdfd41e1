"""A small Django project, configured in code (no settings module), for the
tests of awa.contrib.django: :func:`configure` sets it up in the test
process, ``manage.py`` in a worker process."""
