"""``python -m awa``: see :mod:`awa.cli`."""

import sys

from awa.cli import main

sys.exit(main())
