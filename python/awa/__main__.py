"""``python -m awa``: see :mod:`awa.cli`."""

import sys

from awa.cli import main

if __name__ == "__main__":
    sys.exit(main())
