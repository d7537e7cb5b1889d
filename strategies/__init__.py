"""Built-in search strategies, one file each, registered by name (``nas strategies`` lists them)."""

from nas.strategies import evolution, random  # noqa: F401  (importing registers them)
