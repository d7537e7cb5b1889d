"""Imports the built-in executors so that they register themselves in :data:`nas.registry.executors`."""

from nas import executor, ray_executor, simulated  # noqa: F401
