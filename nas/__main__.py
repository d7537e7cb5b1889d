"""``python -m nas``: the ``nas`` command line."""

import sys

from nas.cli import main

sys.exit(main())
