"""``python -m tests.django_project.manage <command>`` with AWA_DATABASE_URL
set: Django's manage.py for the test project."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line

from tests.django_project.configure import configure

if __name__ == "__main__":
    configure(os.environ["AWA_DATABASE_URL"])
    execute_from_command_line(["manage.py", *sys.argv[1:]])
