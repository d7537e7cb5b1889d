"""The ``nas search`` flags, generated from the configuration's fields (:func:`nas.run.config_tree.leaves`: help,
type, choices, default), one argument group per section, and the config file that uses the same keys.

>>> import argparse
>>> parser = argparse.ArgumentParser(prog="nas search")
>>> _ = add_config_flags(parser)
>>> args = parser.parse_args(["--budget", "3", "--epochs", "2", "-o", "population=4", "--no-amp"])
>>> cfg = config_from_args(args)
>>> cfg.search.budget, cfg.train.settings.epochs, cfg.search.strategy_options, cfg.train.settings.amp
(3, 2, {'population': 4}, False)
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nas.cli.common import UsageError, nonempty, parse_options
from nas.run.config import RunConfig
from nas.run.config_tree import Leaf, leaves
from nas.run.files import os_error_text

#: the argument groups of ``nas search --help``: a section of the tree (the run's own leaves: "run") and its title
GROUPS = {"search": "search (what is searched and how)", "train": "training (how each candidate trains)",
          "execution": "execution (where trials run; a resume may change --address only)", "run_dir": "run"}
_SCALAR = {"int": int, "float": float, "str": nonempty}
#: what an optional number's flag takes for "no value" (``--trial-timeout none``: no limit), kept as given so that
#: it counts as a flag typed (argparse's own None is "not given")
NONE = "none"


def _or_none(kind: Any) -> Any:
    def parse(value: str) -> Any:
        return NONE if value.strip().lower() == NONE else kind(value)

    parse.__name__ = kind.__name__  # (argparse names the type in its "invalid float value" error)
    return parse


def flag_names(leaf: Leaf) -> tuple[str, ...]:
    return leaf.about.flag or ("--" + leaf.name.replace("_", "-"),)


def add_config_flags(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """A flag for every settable leaf of the configuration, in one group per section; the groups by section."""
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    for leaf in leaves(RunConfig):
        if leaf.about.fact:
            continue
        base = leaf.type.removesuffix(" | None")
        kw: dict[str, Any] = {"dest": leaf.name, "default": None, "help": leaf.about.help + _default(leaf)}
        if leaf.about.metavar:
            kw["metavar"] = leaf.about.metavar
        if leaf.about.choices:
            kw["metavar"] = "{" + ",".join(leaf.about.choices) + "}"
        if base == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif base.startswith(("dict", "list", "tuple")):
            kw["action"] = "append"
        else:
            kw["type"] = str if leaf.name == "run_dir" else _SCALAR.get(base, str)  # (run_dir: its own check)
            if leaf.type.endswith("| None") and base in ("int", "float"):
                kw["type"] = _or_none(kw["type"])
        groups[leaf.path[0]].add_argument(*flag_names(leaf), **kw)
    return groups


def _default(leaf: Leaf) -> str:
    d = leaf.default
    if d is None or d == {} or d == []:
        return ""
    shown = ("on" if d else "off") if isinstance(d, bool) else ", ".join(map(str, d)) if isinstance(d, list) else d
    return f" (default: {shown})"


def given_flags(args: argparse.Namespace, argv: Sequence[str] = ()) -> list[str]:
    """The configuration flags given on the command line, in the order typed."""
    given = [leaf for leaf in leaves(RunConfig) if not leaf.about.fact and getattr(args, leaf.name, None) is not None]

    def typed_at(leaf: Leaf) -> int:
        names = flag_names(leaf) + ("--no-" + flag_names(leaf)[-1][2:],)
        hits = [i for i, a in enumerate(argv) if a.split("=")[0] in names]
        return hits[0] if hits else len(argv)

    def shown(leaf: Leaf) -> str:  # (--no-amp as typed, not --amp)
        name = flag_names(leaf)[0]
        return "--no-" + name[2:] if getattr(args, leaf.name) is False else name

    return [shown(leaf) for leaf in sorted(given, key=typed_at)]


def read_config_file(path: str) -> dict[str, Any]:
    """A TOML or YAML config file's table (its keys checked when the config is made)."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"config file {path!r} is a directory; name a .toml, .yaml or .yml file")
    if not p.is_file():  # (a device, a pipe or a loop of links "did not exist")
        what = "does not exist" if not os.path.lexists(p) else "is not a regular file"
        raise UsageError(f"config file {path!r} {what}; name a .toml, .yaml or .yml file")
    try:
        text = p.read_text(encoding="utf-8-sig")  # (a byte-order mark: TOML's "Invalid statement" at 1, 1)
    except UnicodeDecodeError as e:
        raise UsageError(f"config file {path!r} is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UsageError(f"cannot read config file {path!r}: {os_error_text(e)}") from None
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            data = _load_yaml(text, path) or {}
        else:
            raise UsageError(f"config file {path!r} must end in .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, ImportError) as e:
        raise UsageError(f"config file {path!r} is malformed: {e}") from None
    except Exception as e:  # yaml.YAMLError and friends
        if isinstance(e, UsageError):
            raise
        raise UsageError(f"config file {path!r} is malformed: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path!r} must hold a table of options, got {type(data).__name__}")
    if not data:  # (it ran the whole default search: a truncated or wrong file more likely than "all defaults")
        raise UsageError(f"config file {path!r} holds no options; give at least one (e.g. space = \"toy\"), or "
                         "leave out --config for every default")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:  # (YAML's `1: 2` or `null:`: str.replace's AttributeError)
        raise UsageError(f"config file {path!r}: option names are strings, got {bad[0]!r}")
    out: dict[str, Any] = {}
    for k, v in data.items():
        name = k.replace("-", "_")
        if name in out:  # (max-params and max_params: the last one silently won)
            spelt = next(other for other in data if other != k and other.replace("-", "_") == name)
            raise UsageError(f"config file {path!r} gives option {name!r} twice, as {spelt!r} and {k!r}")
        out[name] = v
    return out


def _load_yaml(text: str, path: str) -> Any:
    """YAML as plain data (SafeLoader: no tags that build objects), refusing what a config has no use for and a
    careless or hostile file can do harm with: an alias (``*name``: nine nested aliases of nine expand a 1 KB file
    into 387 million strings, gigabytes and minutes before any option is checked) and a key given twice (the
    last one silently won)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise UsageError(f"config file {path!r} line {event.start_mark.line + 1}: the alias *{event.anchor} "
                                 "is refused (an alias can expand a small file into gigabytes); write the value out")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):
                    continue  # (the config's own check names a key that is no name)
                if key in seen:
                    raise UsageError(f"config file {path!r} line {key_node.start_mark.line + 1}: key {key!r} is "
                                     "given twice")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=Loader)  # noqa: S506  (a SafeLoader: plain data only)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The configuration of ``args``: the config file's values (``--config``), the flags given over them (a table
    option such as ``-o`` adds its keys to the file's table)."""
    cfg = RunConfig.from_mapping(read_config_file(args.config)) if getattr(args, "config", None) else RunConfig()
    values: dict[str, Any] = {}
    for leaf in leaves(RunConfig):
        given = getattr(args, leaf.name, None)
        if given is None or leaf.about.fact:
            continue
        if leaf.type.startswith("dict"):
            current = getattr(getattr(cfg, leaf.path[0]), leaf.path[1]) if len(leaf.path) == 2 else {}
            given = {**current, **parse_options(given, flag_names(leaf)[0])}
        values[leaf.name] = None if given == NONE else given
    try:
        return cfg.updated(values)
    except ValueError as e:
        raise ValueError(as_flag(str(e), {leaf.name: flag_names(leaf)[0] for leaf in leaves(RunConfig)
                                           if leaf.name in values})) from None


def as_flag(message: str, flags: dict[str, str]) -> str:
    """A value's error named as the user gave it: ``config key 'budget' must be ...`` or ``epochs must be ...`` of a
    value typed as a flag says ``--budget must be ...`` (a config file's value keeps "config key")."""
    m = re.match(r"(?:config key '(\w+)'|(\w+)) ((?:must|may only) .*)", message, re.DOTALL)
    name = m and (m.group(1) or m.group(2))
    if not (m and name in flags):
        return message
    return f"{flags[name]} {m.group(3).replace('None (', 'none (')}"  # (a flag's "no value" is none: None is Python's)


__all__ = ["NONE", "add_config_flags", "as_flag", "config_from_args", "given_flags", "read_config_file"]
