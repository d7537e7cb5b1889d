"""Tabular benchmarks a simulated executor answers trials from, registered by name in
:data:`nas.core.registry.tables` (the NAS-Bench-201 table: :mod:`nas.engine.tabular.nb201_table`)."""
