"""``python -m nas.cli``: the ``nas`` command line."""

from nas.cli import entry

entry()
