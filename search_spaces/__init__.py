"""Built-in search spaces, one file each, registered by name (``nas spaces`` lists them).

Nothing is imported here: :data:`nas.core.registry.spaces` names the module of each built-in space and imports it
when that name is first looked up.
"""
