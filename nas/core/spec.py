"""What a space name in ``run.json`` (or on the command line) may resolve to: nothing read from a file runs code.

A spec is a registered space name (``nb201``) or ``module:Class`` naming a :class:`nas.SearchSpace` subclass.
Read-only commands (results, best, status, report) call with ``allow_import=False``: a ``module:Class`` spec is then
refused without importing anything. Running or resuming a search (the user points at the run) calls with
``allow_import=True``: the module is imported and its attribute must be a SearchSpace subclass (or instance);
functions and other callables (``os:system``, ``sys:exit``, ``code:interact``) are refused, never called.

>>> resolve_space_spec("toy", allow_import=False).__name__
'ToySpace'
>>> def refusal(spec, allow_import):
...     try:
...         resolve_space_spec(spec, allow_import=allow_import)
...     except ValueError as e:
...         return str(e).split(";")[0]
>>> refusal("os:system", allow_import=True)
"space 'os:system' names a builtin_function_or_method"
>>> refusal("mymodule:Tiny", allow_import=False)
"space 'mymodule:Tiny' is user code"
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from nas.core import registry
from nas.core.space import SearchSpace

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_NAME = re.compile(r"[A-Za-z_]\w*")
ALLOWED = "a registered name (see `nas spaces`) or module:Class of a nas.SearchSpace subclass"


def plain_format(arch: Mapping[str, Any]) -> str:
    """SearchSpace.format's default form (``hidden=8,act=relu``), for a space that is not imported."""
    return ",".join(f"{k}={v}" for k, v in arch.items())


def is_import_spec(spec: object) -> bool:
    """Whether ``spec`` names user code (``module:Class``) rather than a registered space."""
    return isinstance(spec, str) and ":" in spec


def resolve_space_spec(spec: object, *, allow_import: bool) -> type[SearchSpace] | SearchSpace:
    """The SearchSpace class (or module-level instance) that ``spec`` names; ValueError for anything else."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"space {spec!r} is not a space name; allowed: {ALLOWED}")
    if not is_import_spec(spec):
        cls: type[SearchSpace] = registry.spaces.get(spec)
        return cls
    module_name, _, attr = spec.partition(":")
    if not _DOTTED.fullmatch(module_name) or not _NAME.fullmatch(attr):
        raise ValueError(f"space {spec!r} is not module:Class; allowed: {ALLOWED}")
    if not allow_import:
        raise ValueError(f"space {spec!r} is user code; this command does not import code named by a run directory")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import module {module_name!r} for space {spec!r}: {e}") from None
    if not hasattr(module, attr):
        raise ValueError(f"module {module_name!r} has no attribute {attr!r} (space {spec!r})")
    obj = getattr(module, attr)
    if isinstance(obj, SearchSpace) or (isinstance(obj, type) and issubclass(obj, SearchSpace)):
        return obj
    raise ValueError(f"space {spec!r} names a {type(obj).__name__}; allowed: {ALLOWED}")
