"""Built-in search strategies, one file each, registered by name (``nas strategies`` lists them).

Nothing is imported here: :data:`nas.core.registry.strategies` names the module of each built-in strategy and
imports it when that name is first looked up (so checking ``--strategy evolution`` loads neither torch nor Optuna).
"""
