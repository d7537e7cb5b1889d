"""What every command shares and nothing heavy: the one-line usage error and ``KEY=VALUE`` options.

>>> parse_options(["population=20", "mode=fast", "weights=[1, 2]"])
{'population': 20, 'mode': 'fast', 'weights': [1, 2]}
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


class UsageError(ValueError):
    """Raised for bad input; main() prints it on one line and exits 2."""


def parse_value(text: str) -> Any:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, ``"true"`` -> True, ``"[1,2]"`` -> [1, 2], anything else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(pairs: Sequence[str], flag: str = "-o") -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"option {pair!r} is not KEY=VALUE (e.g. {flag} population=20)")
        out[key] = parse_value(value)
    return out


def path_arg(value: str) -> str:
    """An argparse ``type`` for a path the user names (a file or folder to write): an empty one is refused, where
    it would mean "skip" to one command and "here" to another, and so is one of a run directory's own files
    (:func:`nas.run.export.owned_by_run`; the write checks again)."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is an empty path; name a file or folder")
    from nas.run.export import check_not_owned

    try:  # (refused here, before a benchmark runs for minutes only to be refused its output)
        check_not_owned(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    except OSError as e:  # (e.g. a name past the file system's 255 bytes: Path.exists raises it on Python 3.11)
        raise argparse.ArgumentTypeError(f"cannot use {value!r}: {e.strerror or e}") from None
    return value


def file_arg(value: str) -> str:
    """An argparse ``type`` for a file the user names to write (a benchmark's ``--json``): refused at once where a
    write there cannot succeed (:func:`nas.run.export.check_export_file`: a folder, a missing folder, /dev/full),
    not after the benchmark ran for minutes and lost its figures."""
    path_arg(value)
    from nas.run.export import check_export_file

    try:
        check_export_file(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def folder_arg(value: str) -> str:
    """An argparse ``type`` for a folder the user names to write into (a benchmark's outputs): refused at once where
    it is empty, a file, a run directory or inside one, before a benchmark runs for minutes only to be refused."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is an empty path; name a folder")
    from nas.run.export import check_export_folder

    try:
        check_export_folder(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot use {value!r}: {e.strerror or e}") from None
    return value


def nonempty(value: str) -> str:
    """An argparse ``type`` for a value a flag must give: an empty one is refused, where it was read as "not given"
    and ignored (``--config ''`` searched the defaults; ``--resume ''`` started a new search)."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is empty; give a value")
    return value


def seed_arg(value: str) -> int:
    """An argparse ``type`` for ``--seed``: an integer from 0 below 2**63, as numpy's and torch's generators take
    (a negative one reached numpy's "expected non-negative integer", a larger one "Overflow when unpacking long
    long", neither naming the flag)."""
    from nas.core.types import check_seed

    try:
        seed = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {value!r}") from None
    try:
        return check_seed(seed, "the seed")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


__all__ = ["UsageError", "file_arg", "folder_arg", "nonempty", "parse_options", "parse_value", "path_arg", "seed_arg"]
