"""Walking the configuration tree (:class:`nas.run.config.RunConfig`) by its fields' metadata: its leaves (each a
flag and a flat config-file key, under a name no other leaf has), the type check of one value, the flat or tabled
mapping a config file gives, and one section read back from ``run.json``.

>>> from nas.run.config import RunConfig
>>> [leaf.path for leaf in leaves(RunConfig) if leaf.name in ("budget", "epochs", "workers", "run_dir")]
[('search', 'budget'), ('train', 'settings', 'epochs'), ('execution', 'workers'), ('run_dir',)]
>>> flat_values(RunConfig, {"search": {"budget": 3}, "epochs": 2, "train_options": {"nesterov": True}})
{'budget': 3, 'epochs': 2, 'nesterov': True}
>>> check_type("workers", "int", True)
Traceback (most recent call last):
...
ValueError: config key 'workers' must be an integer, got True (bool)
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from nas.core.fields import About, about
from nas.core.nearest import did_you_mean
from nas.core.types import within_int64

BUILTIN = "builtin"  # the training function nas.train.fit.fit
_KIND = {"int": "an integer", "float": "a number", "str": "a string", "bool": "a boolean (true or false)",
         "dict[str, Any]": "a table (mapping)", "list[str]": "a list of strings",
         "tuple[str, ...]": "a list of strings"}


class Leaf(NamedTuple):
    """One settable value of the tree: its flat ``name`` (flag and config-file key), where it sits (``path``), its
    type (as annotated), its default and what it says of itself."""

    name: str
    path: tuple[str, ...]
    type: str
    default: Any
    about: About


def _section_type(f: dataclasses.Field[Any]) -> type | None:
    factory = f.default_factory
    return factory if isinstance(factory, type) and dataclasses.is_dataclass(factory) else None


def sections(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that are sections (dataclasses made by their default factory), by name."""
    return {f.name: t for f in dataclasses.fields(cls) if (t := _section_type(f)) is not None}


@functools.cache
def leaves(cls: type) -> tuple[Leaf, ...]:
    """Every leaf of the tree ``cls``, in order, sections walked depth first. A name the tree already has is not
    a second leaf (TrainSettings' ``seed`` and ``objectives`` are the search's own)."""
    out: list[Leaf] = []
    seen: set[str] = set()

    def walk(owner: type, path: tuple[str, ...]) -> None:
        for f in dataclasses.fields(owner):
            inner = _section_type(f)
            if inner is not None:
                walk(inner, (*path, f.name))
                continue
            a = about(f)
            if a is None or (a.name or f.name) in seen:
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            seen.add(a.name or f.name)
            out.append(Leaf(a.name or f.name, (*path, f.name), str(f.type), default, a))

    walk(cls, ())
    return tuple(out)


def check_type(key: str, typ: str, value: Any) -> None:
    """A ValueError naming ``key`` and the type it needs when ``value`` is not of type ``typ`` (as annotated)."""
    optional = typ.endswith(" | None")
    base = typ.removesuffix(" | None")
    if (value is None and optional) or base not in _KIND:
        return
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "dict[str, Any]": isinstance(value, Mapping) and all(isinstance(k, str) for k in value),
        "list[str]": isinstance(value, list | tuple) and all(isinstance(v, str) for v in value),
        "tuple[str, ...]": isinstance(value, list | tuple) and all(isinstance(v, str) for v in value),
    }[base]
    if ok and base == "dict[str, Any]":
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(f"{key} must be JSON data, got {value!r}") from None
    if not ok:
        raise ValueError(f"config key {key!r} must be {_KIND[base]}{' or null' if optional else ''}, "
                         f"got {value!r} ({type(value).__name__})")
    if base in ("int", "float") and isinstance(value, int) and not within_int64(value):  # (what the run's
        raise ValueError(f"config key {key!r} must be below 2**63 in size, got {value!r}")  # readers can read)


def plain(value: Any) -> Any:
    """``value`` as JSON data (tuples become lists, keys sorted): what run.json holds and what identities compare."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def flat_values(cls: type, values: Mapping[str, Any], fills: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """A config file's (or keywords') mapping as ``{leaf name: value}``: flat keys, section tables (``[search]``,
    ``[train]`` with or without its ``[train.settings]``...) and ``train_options`` (a table of TrainSettings fields)
    all accepted; facts, unknown keys and a key given twice refused by name; a ``recipe`` fills the training
    settings not given (and, where ``fills`` is given, only those it says yes to)."""
    settable = [leaf for leaf in leaves(cls) if not leaf.about.fact]
    by_name = {leaf.name: leaf for leaf in settable}
    known = sorted({*by_name, *sections(cls)})
    out: dict[str, Any] = {}

    def take(prefix: tuple[str, ...], table: Mapping[str, Any]) -> None:
        unknown = []
        for key, value in table.items():
            path = (*prefix, key)
            leaf = by_name.get(key) if not prefix else next((x for x in settable if x.path == path), None)
            if leaf is None and prefix:  # a leaf deeper in this table by its own name: [train] epochs = 5
                found = by_name.get(key)
                leaf = found if found is not None and found.path[:len(prefix)] == prefix else None
            if leaf is not None and (not prefix or leaf.path[:len(prefix)] == prefix):
                if leaf.name in out:
                    raise ValueError(f"config key {leaf.name!r} is given twice")
                out[leaf.name] = value
            elif key == "train_options" and not prefix:
                check_type(key, "dict[str, Any]", value)
                take(("train", "settings"), value)
            elif any(x.path[:len(path)] == path for x in settable) and len(path) < 3:
                check_type(".".join(path), "dict[str, Any]", value)
                take(path, value)
            else:
                unknown.append(".".join(map(str, path)))  # (a key of another type: {1: 2})
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}{did_you_mean(sorted(unknown), known)}; "
                             f"known: {known}")

    take((), values)
    if out.get("recipe"):
        from nas.train.recipes import recipe_settings

        recipe = recipe_settings(out["recipe"])
        if out.get("optimizer", recipe.get("optimizer")) != "sgd":  # (SGD's alone: --recipe nb201 --optimizer adam
            recipe.pop("nesterov", None)  # was refused, telling the user to drop a nesterov they never gave)
        out = {**{k: v for k, v in recipe.items() if k in by_name and (fills is None or fills(k))}, **out}
    return out


def section_from_json(section: type, data: Any, where: str) -> Any:
    """The section ``section`` that run.json holds as ``data`` under ``where`` (unknown keys refused by name,
    values type-checked by the section itself)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"config key {where!r} must be a table (mapping), got {data!r}")
    names = {f.name: f for f in dataclasses.fields(section)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ValueError(f"unknown keys {[f'{where}.{k}' for k in unknown]}")
    values = {}
    for name, value in data.items():
        inner = _section_type(names[name])
        if inner is not None:
            value = section_from_json(inner, value, f"{where}.{name}")
        elif about(names[name]) is not None:
            check_type(name, str(names[name].type), value)
            value = tuple(value) if str(names[name].type).startswith("tuple") else value
        values[name] = value
    return section(**values)


__all__ = ["BUILTIN", "Leaf", "check_type", "flat_values", "leaves", "plain", "section_from_json", "sections"]
