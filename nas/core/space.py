"""Declarative search spaces: a subclass lists its decisions and builds a model for an architecture.

Everything a strategy needs (sampling, one-decision mutation, integer encoding for the RL controller)
follows from :meth:`SearchSpace.dims`, so a custom space is a few lines:

>>> import torch
>>> class Widths(SearchSpace):
...     def dims(self):
...         return {"width": [16, 32, 64], "act": ["relu", "tanh"]}
...     def build(self, arch, task):
...         act = torch.nn.ReLU() if arch["act"] == "relu" else torch.nn.Tanh()
...         return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(arch["width"]), act,
...                                    torch.nn.Linear(arch["width"], task.num_classes))
>>> space = Widths()
>>> space.size
6
>>> import numpy as np
>>> arch = space.sample(np.random.default_rng(0))
>>> space.decode(space.encode(arch)) == arch
True
>>> space.validate({"width": 48, "act": "relu"})
Traceback (most recent call last):
...
nas.core.types.InvalidArchitecture: decision 'width' has value 48; allowed: [16, 32, 64]
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.core.types import Arch, InvalidArchitecture, InvalidSpace, within_int64

if TYPE_CHECKING:
    import torch

    from nas.core.weight_sharing import Supernet


_NONE = object()


def _json_data(value: Any) -> bool:
    """Whether ``value`` is what JSON holds as it is (the journal's numbers: 64-bit integers, finite floats)."""
    if value is None or isinstance(value, bool | str):
        return True
    if isinstance(value, int):
        return within_int64(value)
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):  # (a tuple comes back from JSON as a list, which no tuple equals: not an option)
        return all(_json_data(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _json_data(v) for k, v in value.items())
    return False


def _tuples_as_lists(value: Any) -> Any:
    """``value`` with every tuple in it a list (as JSON gives it back)."""
    if isinstance(value, list | tuple):
        return [_tuples_as_lists(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _tuples_as_lists(v) for k, v in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Task:
    """What a model is built for: the shape of one input (without the batch) and the class count."""

    input_shape: tuple[int, ...]
    num_classes: int


def _equal_options(options: Sequence[Any]) -> tuple[Any, Any] | None:
    """Two of ``options`` that are equal (``==``), where there are: by hash for hashable ones, else pairwise."""
    seen: dict[Any, Any] = {}
    unhashable: list[Any] = []
    for o in options:
        try:
            if o in seen:
                return seen[o], o
            seen[o] = o
        except TypeError:  # (a list or a table)
            twin = next((u for u in unhashable if u == o), _NONE)
            if twin is not _NONE:
                return twin, o
            unhashable.append(o)
    return None


class SearchSpace:
    """Base class of all spaces. Subclasses implement :meth:`dims` and :meth:`build`."""

    registered_name: str = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> SearchSpace:
        if (args or kwargs) and cls.__init__ is object.__init__:  # (object's own __init__ ignores them here)
            given = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            raise TypeError(f"{cls.__name__}() takes no arguments, got {given}")
        obj = super().__new__(cls)
        obj._init_args = (args, kwargs)  # type: ignore[attr-defined]  # what :meth:`spec` records, so run.json can rebuild this space
        return obj

    def spec(self) -> dict[str, Any]:
        """How to rebuild this space: its class (registered name, else ``module:Class``) and the arguments
        it was constructed with, as JSON data.

        >>> import nas
        >>> from nas.search_spaces.nb201 import NB201Space
        >>> NB201Space(channels=32).spec()
        {'class': 'nb201', 'args': {'channels': 32}}
        """
        import inspect
        import json

        args, kwargs = getattr(self, "_init_args", ((), {}))
        cls = type(self)
        try:
            bound = inspect.signature(cls).bind(*args, **kwargs)
        except TypeError:
            bound = None
        values = dict(bound.arguments) if bound is not None else dict(kwargs)
        for name, p in (inspect.signature(cls).parameters.items() if bound is not None else ()):
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                values.update(values.pop(name, {}))
            elif p.kind is inspect.Parameter.VAR_POSITIONAL and values.pop(name, ()):
                raise ValueError(f"space {cls.__name__} takes *{name}: run.json cannot record its arguments")
        try:
            json.dumps(values, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(f"space {cls.__name__}'s constructor arguments {values!r} are not JSON data, "
                             "so run.json cannot record them") from None
        from nas.core import registry

        name = self.registered_name
        known = name and name in registry.spaces.names() and registry.spaces.get(name) is cls
        return {"class": name if known else f"{cls.__module__}:{cls.__qualname__}", "args": values}

    # -- what a subclass provides ------------------------------------------------------------
    def dims(self) -> Mapping[str, Sequence[Any]] | Sequence[tuple[str, Sequence[Any]]]:
        """Every decision and its options, in a fixed order (the RL controller's action order)."""
        raise NotImplementedError

    def build(self, arch: Arch, task: Task) -> torch.nn.Module:
        """A fresh, untrained model for ``arch``."""
        raise NotImplementedError

    def supernet(self, task: Task) -> Supernet:
        """Optional: a weight-sharing :class:`nas.core.weight_sharing.Supernet` that runs every architecture of this
        space for ``task``. A space without one refuses with one line:

        >>> from nas.search_spaces.toy import ToySpace
        >>> ToySpace().supernet(Task((4,), 2))
        Traceback (most recent call last):
        ...
        ValueError: space 'toy' (ToySpace) has no supernet; spaces with one: macro, nb201
        """
        from nas.core import registry

        have = sorted(n for n in registry.spaces.names() if registry.spaces.get(n).supernet is not SearchSpace.supernet)
        name = f"{self.registered_name!r} ({type(self).__name__})" if self.registered_name else type(self).__name__
        raise ValueError(f"space {name} has no supernet; spaces with one: {', '.join(have) or 'none'}")

    @property
    def has_supernet(self) -> bool:
        """Whether :meth:`supernet` is implemented."""
        return type(self).supernet is not SearchSpace.supernet

    def format(self, arch: Arch) -> str:
        """A human-readable one-line form of ``arch`` (spaces with a standard notation override it)."""
        return ",".join(f"{k}={v}" for k, v in arch.items())

    def parse(self, text: str) -> Arch:
        """The inverse of :meth:`format`."""
        arch: dict[str, Any] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            options = self.decisions.get(key)
            if options is None:
                raise InvalidArchitecture(f"unknown decision {key!r} in {text!r}")
            arch[key] = next((o for o in options if str(o) == value), value)
        self.validate(arch)
        return arch

    # -- derived -------------------------------------------------------------------------------
    @cached_property
    def decisions(self) -> dict[str, tuple[Any, ...]]:
        """:meth:`dims`, checked: names are unique non-empty strings, options non-empty and distinct."""
        raw = self.dims()
        try:
            pairs = list(raw.items()) if isinstance(raw, Mapping) else [(name, options) for name, options in raw]
        except (TypeError, ValueError):  # (not iterable, or not of pairs)
            raise InvalidSpace(f"{type(self).__name__}.dims() must return a dict of decision names to lists of "
                               f"options, got {reprlib.repr(raw)}") from None
        if not pairs:
            raise InvalidSpace(f"{type(self).__name__}.dims() declares no decisions")
        out: dict[str, tuple[Any, ...]] = {}
        for name, options in pairs:
            if not isinstance(name, str) or not name:
                raise InvalidSpace(f"decision names must be non-empty strings, got {name!r}")
            if name in out:
                raise InvalidSpace(f"decision {name!r} is declared twice")
            if isinstance(options, (str, bytes)) or not isinstance(options, Sequence):
                raise InvalidSpace(f"decision {name!r} needs a list of options, got {options!r}")
            opts = tuple(options)
            if not opts:
                raise InvalidSpace(f"decision {name!r} has no options")
            same = _equal_options(opts)
            if same is not None:  # (1 and True, or 0.0 and -0.0: one index each, so encode and mutate mixed them up)
                raise InvalidSpace(f"decision {name!r} repeats an option: {same[0]!r} and {same[1]!r} are equal in "
                                   f"Python, so an architecture cannot tell them apart; options {list(opts)}")
            bad = next((o for o in opts if not _json_data(o)), _NONE)
            if bad is not _NONE and _json_data(listed := _tuples_as_lists(bad)):
                raise InvalidSpace(f"decision {name!r} has the option {bad!r}, which holds a tuple: the run's journal "
                                   "records every architecture as JSON, where a tuple comes back as a list that no "
                                   f"option equals (a resume could not find it); give it as a list, {listed!r}")
            if bad is not _NONE:
                raise InvalidSpace(f"decision {name!r} has the option {bad!r}, which is not JSON data (a string, "
                                   "finite number, 64-bit integer, boolean or null, or a list or table of them): the "
                                   "run's journal records every architecture as JSON")
            out[name] = opts
        return out

    @property
    def size(self) -> int:
        """The number of distinct architectures."""
        return math.prod(len(o) for o in self.decisions.values())

    def validate(self, arch: Arch) -> None:
        """Raise :class:`InvalidArchitecture` unless ``arch`` picks an allowed option for every decision."""
        if not isinstance(arch, Mapping):
            raise InvalidArchitecture(f"an architecture is a mapping of decisions, got {arch!r}")
        decisions = self.decisions
        missing = [k for k in decisions if k not in arch]
        extra = [k for k in arch if k not in decisions]
        if missing or extra:
            raise InvalidArchitecture(
                f"architecture keys do not match the space: missing {missing}, unknown {extra}"
            )
        for name, options in decisions.items():
            if arch[name] not in options:
                raise InvalidArchitecture(
                    f"decision {name!r} has value {arch[name]!r}; allowed: {list(options)}"
                )

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        """A uniformly random architecture."""
        return {name: opts[int(rng.integers(len(opts)))] for name, opts in self.decisions.items()}

    def mutate(self, arch: Arch, rng: np.random.Generator) -> dict[str, Any]:
        """A copy of ``arch`` with exactly one decision changed to a different option."""
        mutable = [name for name, opts in self.decisions.items() if len(opts) > 1]
        if not mutable:
            return dict(arch)
        name = mutable[int(rng.integers(len(mutable)))]
        options = self.decisions[name]
        current = options.index(arch[name])
        new = int(rng.integers(len(options) - 1))
        child = dict(arch)
        child[name] = options[new + (new >= current)]
        return child

    def encode(self, arch: Arch) -> list[int]:
        """The option index of every decision, in declaration order."""
        self.validate(arch)
        return [opts.index(arch[name]) for name, opts in self.decisions.items()]

    def decode(self, actions: Sequence[int]) -> dict[str, Any]:
        """The inverse of :meth:`encode`."""
        decisions = self.decisions
        if len(actions) != len(decisions):
            raise InvalidArchitecture(f"expected {len(decisions)} actions, got {len(actions)}")
        arch = {}
        for (name, opts), a in zip(decisions.items(), actions):
            if not 0 <= int(a) < len(opts):
                raise InvalidArchitecture(f"action {a} for {name!r} is outside 0..{len(opts) - 1}")
            arch[name] = opts[int(a)]
        return arch

    @property
    def cardinalities(self) -> list[int]:
        return [len(o) for o in self.decisions.values()]

    def check_build(self, arch: Arch, task: Task) -> torch.nn.Module:
        """:meth:`build`, with its failures turned into errors that name the space and architecture."""
        import torch  # (here, not at the top: a space's names and decisions are read without torch)

        self.validate(arch)
        try:
            model = self.build(arch, task)
        except Exception as e:  # a user's build: any failure is reported, not hidden
            raise InvalidSpace(
                f"{type(self).__name__}.build failed for {self.format(arch)}: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(model, torch.nn.Module):
            raise InvalidSpace(
                f"{type(self).__name__}.build must return a torch.nn.Module, got {type(model).__name__}"
            )
        return model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.decisions)} decisions, {self.size} architectures)"
