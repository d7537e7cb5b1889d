"""What a space or a training function named in ``run.json`` (or on the command line) may resolve to: nothing read
from a file runs code, and the one function that rebuilds a space from its spec, constructor arguments included.

A spec is a registered space name (``nb201``) or ``module:Class`` naming a :class:`nas.SearchSpace` subclass.
Read-only commands (results, best, status, report) call with ``allow_import=False``: a ``module:Class`` spec is then
refused without importing anything. Running or resuming a search (the user points at the run) calls with
``allow_import=True``: the module is imported and its attribute must be a SearchSpace subclass (or instance);
functions and other callables (``nas.cli:main``) are refused, never called; a module of Python's standard library
(``os:system``, ``this:s``, whose import alone prints) or a ``__main__`` is refused before anything is imported.

>>> resolve_space_spec("toy", allow_import=False).__name__
'ToySpace'
>>> def refusal(spec, allow_import):
...     try:
...         resolve_space_spec(spec, allow_import=allow_import)
...     except ValueError as e:
...         return str(e).split(";")[0]
>>> refusal("nas.cli:main", allow_import=True)
"space 'nas.cli:main' names a function"
>>> refusal("os:system", allow_import=True)
"space 'os:system' names a module of Python's standard library, which is not imported"
>>> refusal("mymodule:Tiny", allow_import=False)
"space 'mymodule:Tiny' is user code"
>>> space_from_spec({"class": "nb201", "args": {"channels": 4}}).channels
4

A training function is recorded as ``builtin`` (:func:`nas.train.fit.fit`), as ``module:function`` when it is a
top-level function that module defines (a resume imports it again), and otherwise as ``custom, not importable``
with what it is (a closure, a lambda, an object such as ``scored(...)``, a function of ``__main__``) and a fingerprint
of what it computes with (:func:`_digest`): only a Python caller that hands in the same function again can resume
such a run, and another lambda or closure (other code, or other values captured) is refused.

>>> train_spec(None), train_spec(plain_format)
('builtin', 'nas.core.spec:plain_format')
>>> train_spec(lambda ctx: None)
'custom, not importable (nas.core.spec:<lambda>; code ...)'
>>> train_from_spec("os:system")
Traceback (most recent call last):
...
ValueError: training function 'os:system' names a module of Python's standard library, which is not imported; ...
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.core import registry
from nas.core.types import InvalidSpace

if TYPE_CHECKING:
    from nas.core.space import SearchSpace

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_NAME = re.compile(r"[A-Za-z_]\w*")
ALLOWED = "a registered name (see `nas spaces`) or module:Class of a nas.SearchSpace subclass"
BUILTIN = "builtin"  # the built-in training function, nas.train.fit.fit
CUSTOM = "custom, not importable"
_TRAIN_ALLOWED = "builtin, or module:function naming a train(ctx) that module defines (not the standard library's)"


def plain_format(arch: Mapping[str, Any]) -> str:
    """SearchSpace.format's default form (``hidden=8,act=relu``), for a space that is not imported."""
    return ",".join(f"{k}={v}" for k, v in arch.items())


def is_import_spec(spec: object) -> bool:
    """Whether ``spec`` names user code (``module:Class``) rather than a registered space."""
    return isinstance(spec, str) and ":" in spec


def resolve_space_spec(spec: object, *, allow_import: bool,
                       outside: str | os.PathLike[str] | None = None) -> type[SearchSpace] | SearchSpace:
    """The SearchSpace class (or module-level instance) that ``spec`` names; ValueError for anything else
    (``outside``: a run directory the module must not be imported from, :func:`check_outside`)."""
    from nas.core.space import SearchSpace

    if not isinstance(spec, str) or not spec:
        raise ValueError(f"space {spec!r} is not a space name; allowed: {ALLOWED}")
    if not is_import_spec(spec):
        cls: type[SearchSpace] = registry.spaces.get(spec)
        return cls
    if not allow_import:
        raise ValueError(f"space {spec!r} is user code; this command does not import code named by a run directory")
    module_name, _, attr = spec.partition(":")
    if module_name == "__main__" or "<locals>" in attr:  # (how SearchSpace.spec names such a class)
        where = "in a script (__main__)" if module_name == "__main__" else "inside a function"
        raise ValueError(f"space {spec!r} was defined {where}, so it cannot be imported again: hand in the same "
                         f"space from Python (nas.search(space, ..., resume=True) resumes its run, "
                         f"nas.retrain(run_dir, space=space) retrains its best)")
    obj = _imported(spec, "space", "module:Class", ALLOWED, outside)
    if isinstance(obj, SearchSpace) or (isinstance(obj, type) and issubclass(obj, SearchSpace)):
        return obj
    raise ValueError(f"space {spec!r} names {_a(type(obj).__name__)}; allowed: {ALLOWED}")


def _imported(spec: str, what: str, form: str, allowed: str, outside: str | os.PathLike[str] | None = None) -> Any:
    module_name, _, attr = spec.partition(":")
    if not _DOTTED.fullmatch(module_name) or not _NAME.fullmatch(attr):
        raise ValueError(f"{what} {spec!r} is not {form}; allowed: {allowed}")
    if outside is not None:
        check_outside(module_name, outside, f"{what} {spec!r}")
    if _stdlib(module_name) or module_name.rpartition(".")[2] == "__main__":  # (refused before import: importing
        kind = "a program's entry point (__main__)" if module_name.endswith("__main__") else \
            "a module of Python's standard library"  # `this`, `antigravity` or a __main__ runs code on its own)
        raise ValueError(f"{what} {spec!r} names {kind}, which is not imported; allowed: {allowed}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        where = ""
        if e.name == module_name.partition(".")[0] or e.name == module_name:  # (the module itself is not found)
            where = (f"; run nas from the folder that holds {module_name.partition('.')[0]}, or put that folder on "
                     "PYTHONPATH")
        raise ValueError(f"cannot import module {module_name!r} for {what} {spec!r}: {e}{where}") from None
    except SyntaxError as e:  # (its traceback holds no frame of the file: it was never run)
        raise ValueError(f"cannot import module {module_name!r} for {what} {spec!r}: SyntaxError: {e.msg} "
                         f"({e.filename}, line {e.lineno})") from None
    if not hasattr(module, attr):
        raise ValueError(f"module {module_name!r} has no attribute {attr!r} ({what} {spec!r})")
    return getattr(module, attr)


def check_outside(module_name: str, run_dir: str | os.PathLike[str], what: str = "module") -> None:
    """Refuse ``module_name`` where it would be imported from inside ``run_dir``: a run directory holds data, never
    code, so a resume must not run a file someone put there (``cd RUN && nas search --resume .`` would find it
    first). Only the top-level package is located (``importlib.util.find_spec`` of a top-level name runs nothing);
    one already imported is judged by where it came from.

    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "planted.py").write_text("raise SystemExit('ran')")
    >>> sys.path.insert(0, str(run))
    >>> check_outside("planted", run, "space 'planted:Space'")
    Traceback (most recent call last):
    ...
    ValueError: space 'planted:Space' would be imported from inside the run directory .../planted.py): ...
    >>> check_outside("json", run)  # the standard library's, not the run's
    >>> sys.path.remove(str(run))
    """
    top = module_name.partition(".")[0]
    module = sys.modules.get(top)
    if module is not None:
        places = [getattr(module, "__file__", None), *list(getattr(module, "__path__", []) or [])]
    else:
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return  # (the import that follows says why it fails)
        if found is None:
            return
        places = [found.origin, *list(found.submodule_search_locations or [])]
    root = Path(run_dir).resolve()
    for place in places:
        if isinstance(place, str) and place not in ("built-in", "frozen"):
            path = Path(place).resolve()
            if path == root or root in path.parents:
                raise ValueError(f"{what} would be imported from inside the run directory {str(run_dir)!r} "
                                 f"({path}): a run directory holds data, never code; run from another folder, "
                                 "with the module on PYTHONPATH")


def space_from_spec(spec: str | Mapping[str, Any] | SearchSpace, args: Mapping[str, Any] | None = None, *,
                    allow_import: bool = True, outside: str | os.PathLike[str] | None = None) -> SearchSpace:
    """The space ``spec`` names, built with its constructor arguments: a SearchSpace (returned as it is), a registered
    name or ``module:Class`` (with ``args``), or a recorded spec ``{"class": ..., "args": {...}}``
    (:meth:`nas.core.space.SearchSpace.spec`). Every path that rebuilds a space comes here; a space that cannot be
    built, or that declares no decisions (an abstract one), is a ValueError. ``outside``: the run directory the spec
    was read from, whose code is never imported (:func:`check_outside`)."""
    from nas.core.space import SearchSpace

    if isinstance(spec, SearchSpace):
        return spec
    if isinstance(spec, Mapping):
        name, recorded = spec.get("class"), spec.get("args") or {}
        if not isinstance(name, str) or not isinstance(recorded, Mapping):
            raise ValueError(f"space spec {dict(spec)!r} is not a space specification ({{'class': ..., 'args': ...}})")
        spec, args = name, {**recorded, **(args or {})}
    found = resolve_space_spec(spec, allow_import=allow_import, outside=outside)
    if isinstance(found, SearchSpace):
        if args:
            raise ValueError(f"space {spec!r} is an instance: it takes no arguments, got {dict(args)!r}")
        return check_space(found, spec)
    _check_space_args(spec, found, dict(args or {}))
    try:
        space = found(**dict(args or {}))
    except TypeError as e:
        raise ValueError(f"space {spec!r} cannot be built with arguments {dict(args or {})!r}: {e}") from None
    return check_space(space, spec)


def check_space(space: SearchSpace, name: str | None = None, *, builds: bool = False) -> SearchSpace:
    """``space`` with its decisions checked (:attr:`nas.core.space.SearchSpace.decisions`: an empty, malformed or
    unimplemented ``dims()`` is a one-line ValueError) and, where ``builds`` (the built-in trainer will build
    its models), its ``build`` implemented: before anything is made, not at the first ask or the first trial."""
    from nas.core.space import SearchSpace

    shown = repr(name) if name is not None else type(space).__name__
    try:
        space.decisions  # noqa: B018  (checked once, then cached)
    except NotImplementedError:
        raise ValueError(f"space {shown} declares no decisions (dims() is not implemented); allowed: "
                         f"{ALLOWED}") from None
    _check_own_methods(space, shown)
    if builds and type(space).build is SearchSpace.build:
        raise ValueError(f"space {shown} does not implement build(arch, task), which the built-in trainer calls "
                         f"for every trial; implement it, or give a training function of your own that builds "
                         f"its models (--train-function MODULE:FUNCTION, train= in Python)")
    return space


def _a(noun: str) -> str:
    """``noun`` with its article: "an int", "a module"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _check_own_methods(space: SearchSpace, shown: str) -> None:
    """A space's own ``sample`` and ``format``, tried once on an architecture it samples (from a generator of its own),
    before anything is made (they failed at the first ask, or killed the search at its first best): what they raise
    comes out as it is (the CLI names the user's file and line), and one that returns what is not an architecture of
    the space, or (``format``) not a string, is a one-line ValueError naming it."""
    import numpy as np

    from nas.core.space import SearchSpace

    own = [m for m in ("sample", "format") if getattr(type(space), m) is not getattr(SearchSpace, m)]
    if not own or type(space).__module__.partition(".")[0] == "nas":  # (the package's own spaces: its tests try them)
        return
    with contextlib.suppress(Exception):  # (a copy: a space with state of its own would lose its first draw here;
        space = copy.deepcopy(space)  # one that cannot be copied is tried itself)
    arch = space.sample(np.random.default_rng(0))
    if not isinstance(arch, Mapping):
        raise InvalidSpace(f"space {shown}'s sample() returned {type(arch).__name__} {arch!r:.80}; an architecture "
                           "is a dict of each decision's option")
    try:
        space.validate(arch)
    except ValueError as e:
        raise InvalidSpace(f"space {shown}'s sample() returned an architecture outside its dims(): {e}") from None
    if "format" in own:
        text = space.format(arch)
        if not isinstance(text, str):
            raise InvalidSpace(f"space {shown}'s format() returned {type(text).__name__} {text!r:.60}, not a "
                               "string: the one line the tables and best.json show for an architecture")


def _check_space_args(spec: str, cls: Any, args: Mapping[str, Any]) -> None:
    """An argument the space's constructor does not take, named with the nearest it does take and all it takes (it
    was Python's "got an unexpected keyword argument", which named neither)."""
    import inspect

    from nas.core.nearest import did_you_mean

    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # (no signature to read: the constructor's own error says it)
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    allowed = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for space {spec!r}{did_you_mean(unknown, allowed)}; allowed: "
                         f"{', '.join(allowed) or 'none'}")


def train_spec(fn: object) -> str:
    """How run.json names the training function ``fn`` (None: the built-in one); see the module docstring."""
    if fn is None:
        return BUILTIN
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if (module, qualname) == ("nas.train.fit", "fit"):
        return BUILTIN
    if inspect.isfunction(fn) and isinstance(module, str) and isinstance(qualname, str) \
            and _NAME.fullmatch(qualname) and module != "__main__" and not _stdlib(module) \
            and getattr(sys.modules.get(module), qualname, None) is fn:
        return f"{module}:{qualname}"
    digest = hashlib.sha256(_digest(fn).encode()).hexdigest()[:12]
    return f"{CUSTOM} ({_described(fn)}; {_CODE}{digest})"


def same_function(recorded: str, current: str) -> bool:
    """Whether a run that recorded the training function ``recorded`` may go on with ``current``: the same spec;
    for a run recorded before custom functions had a fingerprint, the same description."""
    if recorded == current:
        return True
    old = recorded.startswith(CUSTOM) and f"; {_CODE}" not in recorded
    return old and current.startswith(CUSTOM) and recorded[:-1] == current.rpartition(f"; {_CODE}")[0]


_CODE = "code "  # before a custom training function's fingerprint, in its spec
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _described(fn: object) -> str:
    """What a custom training function is, in words that stay the same from one process to the next (no address)."""
    if inspect.isfunction(fn):
        return f"{fn.__module__}:{fn.__qualname__}"
    if isinstance(fn, functools.partial):
        return f"functools.partial of {_described(fn.func)}"
    if inspect.ismethod(fn):
        return f"method {_described(fn.__func__)} of a {type(fn.__self__).__qualname__} object"
    if type(fn).__repr__ is not object.__repr__:
        return _ADDRESS.sub("", repr(fn))
    return f"a {type(fn).__module__}:{type(fn).__qualname__} object"


def _digest(value: object, depth: int = 0) -> str:
    """What a custom training function computes with, as text: its code (bytecode, constants, names; not its file
    or lines, which a notebook's cell changes), its defaults, what its closure holds, a partial's arguments, an
    object's attributes, as data (other objects by type, so that the same function in a new process is the same).
    Two closures of other captured values, two lambdas, ``T(0.4)`` and ``T(0.02)`` differ here."""
    if depth > 6:
        return "..."
    more = depth + 1
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        return repr(value)
    if isinstance(value, tuple | list):
        return f"{type(value).__name__}[{','.join(_digest(v, more) for v in value)}]"
    if isinstance(value, set | frozenset):
        return f"set[{','.join(sorted(_digest(v, more) for v in value))}]"
    if isinstance(value, dict):
        return f"dict[{','.join(sorted(f'{_digest(k, more)}:{_digest(v, more)}' for k, v in value.items()))}]"
    if inspect.iscode(value):
        consts = ",".join(_digest(c, more) for c in value.co_consts)
        return f"code[{value.co_code.hex()};{','.join(value.co_names)};{consts}]"
    if inspect.isfunction(value):
        cells = [c.cell_contents if c.cell_contents is not value else "<self>" for c in value.__closure__ or ()
                 if _filled(c)]
        return (f"function[{value.__qualname__};{_digest(value.__code__, more)};{_digest(value.__defaults__, more)};"
                f"{_digest(value.__kwdefaults__, more)};{_digest(cells, more)}]")
    if isinstance(value, functools.partial):
        return f"partial[{_digest(value.func, more)};{_digest(value.args, more)};{_digest(value.keywords, more)}]"
    if inspect.ismethod(value):
        return f"method[{_digest(value.__func__, more)};{_digest(value.__self__, more)}]"
    kind = f"{type(value).__module__}:{type(value).__qualname__}"
    if depth > 1 or inspect.ismodule(value) or inspect.isclass(value) or not hasattr(value, "__dict__"):
        return f"<{kind}>" if not (inspect.ismodule(value) or inspect.isclass(value)) else f"<{value.__name__}>"
    call = inspect.getattr_static(type(value), "__call__", None)  # (a callable object: its code, attributes)
    return f"object[{kind};{_digest(call, more) if inspect.isfunction(call) else ''};{_digest(vars(value), more)}]"


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def train_from_spec(spec: str, *, outside: str | os.PathLike[str] | None = None) -> Callable[..., Any] | None:
    """The training function run.json's ``spec`` names (None for the built-in one); a ValueError for one that
    cannot be imported (``custom, not importable``), that is no top-level function of its module, or whose module
    would come from inside the run directory ``outside``."""
    if spec == BUILTIN:
        return None
    if spec.startswith(CUSTOM):
        raise ValueError(f"the training function is {spec}")
    obj = _imported(spec, "training function", "module:function", _TRAIN_ALLOWED, outside)
    module_name = spec.partition(":")[0]
    if inspect.isfunction(obj) and obj.__module__ == module_name and not _stdlib(module_name):
        check_train(obj, repr(spec))
        return obj  # type: ignore[no-any-return]
    raise ValueError(f"training function {spec!r} names {_a(type(obj).__name__)}; allowed: {_TRAIN_ALLOWED}")


def check_train(fn: Callable[..., Any], name: str) -> None:
    """A one-line ValueError, before anything starts, unless ``fn`` can be called as ``train(ctx)`` and returns when
    it is done: one positional argument, a plain function (every trial failed on a ``def train(ctx, data)`` or a
    ``def train()``, an ``async def`` or a generator, the whole budget long). A callable without a signature to read
    (a builtin) is taken as it is."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise ValueError(f"training function {name} is async (async def); it must be a plain def train(ctx)")
    if inspect.isgeneratorfunction(fn):
        raise ValueError(f"training function {name} is a generator (it yields); it must report with "
                         "ctx.report(...) and return")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise ValueError(f"training function {name} cannot be called as train(ctx): it takes {signature}") from None


def _stdlib(module: str) -> bool:
    return module.partition(".")[0] in sys.stdlib_module_names
