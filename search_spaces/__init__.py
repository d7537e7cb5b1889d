"""Built-in search spaces, one file each, registered by name (``nas spaces`` lists them)."""

from nas.search_spaces import macro, nb201, toy  # noqa: F401  (importing registers them)
