"""The ``nas`` command line: one module per command group, imported only when its command runs (so ``nas --version``
and ``nas --help`` load neither torch, Ray nor pandas).

- ``nas search`` (:mod:`nas.cli.search`; its flags come from the configuration's fields, :mod:`nas.cli.flags`)
- ``nas results``, ``nas best`` (:mod:`nas.cli.results`)
- ``nas spaces``, ``nas strategies``, ``nas schedulers`` (:mod:`nas.cli.listings`)
- ``nas status``, ``nas report``, ``nas serve``, ``nas dashboard`` (:mod:`nas.cli.monitor`),
  ``nas recipes`` (:mod:`nas.cli.train`),
  ``nas bench`` (:mod:`nas.cli.bench`)

Errors in what you asked for print one line and exit with status 2; so does an error raised in your own code (a
space, a training function or a callback the command imports), naming its file, line and function.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import os
import signal
import sys
import sysconfig
import threading
import traceback
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from nas.cli.common import UsageError, parse_options, parse_value

#: every command: the module that adds it (``register(subparsers)``; handlers are ``args.handler``) and its help
COMMANDS: dict[str, tuple[str, str]] = {
    "search": ("nas.cli.search", "run a search"),
    "results": ("nas.cli.results", "a run's trials as a table, CSV or JSON; export CSV/parquet"),
    "best": ("nas.cli.results", "a run's best architecture; export it and its weights"),
    "spaces": ("nas.cli.listings", "list the search spaces, their options and defaults"),
    "strategies": ("nas.cli.listings", "list the search strategies, their options (-o) and defaults"),
    "schedulers": ("nas.cli.listings", "list the early-stopping schedulers, their options and defaults"),
    "bench": ("nas.cli.bench", "benchmarks: strategies on NAS-Bench-201, scaling, overhead, training"),
    "dashboard": ("nas.cli.monitor", "print the Grafana dashboard of the search metrics (JSON)"),
    "status": ("nas.cli.monitor", "a run's progress: trials by state, best so far, throughput, ETA"),
    "report": ("nas.cli.monitor", "an interactive HTML page about one run, or comparing several"),
    "serve": ("nas.cli.monitor", "a run's live page in the browser, on 127.0.0.1 (a printed URL with a secret token)"),
    "recipes": ("nas.cli.train", "list the training recipes (nas search --recipe NAME)"),
    "supernet": ("nas.cli.one_shot", "train a weight-sharing supernet (then: nas search --supernet DIR)"),
    "retrain": ("nas.cli.one_shot", "train a search's best architectures standalone, from scratch"),
    "proxies": ("nas.cli.zero_cost", "zero-cost proxies: their rank correlation with a run's trials, or of samples"),
}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return f"nas-ray {dist_version('nas-ray')}"
    except PackageNotFoundError:
        return "nas-ray (not installed)"


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed; the modules of ``commands`` (default: all) add their arguments."""
    parser = argparse.ArgumentParser(prog="nas", description="Parallel neural architecture search on Ray.")
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = {COMMANDS[c][0] for c in (COMMANDS if commands is None else commands)}
    loaded: set[str] = set()
    for name, (module, help_) in COMMANDS.items():
        if module in wanted and module not in loaded:
            loaded.add(module)
            importlib.import_module(module).register(sub)
        if name not in sub.choices:
            sub.add_parser(name, help=help_)
    from nas.monitor.listing import tidy_help

    tidy_help(parser)  # docstring markup out, no default named twice
    _no_abbreviations(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    with _sigterm_as_ctrl_c():  # (from the start: the command's module, torch with it, takes seconds to import)
        try:
            parser = build_parser([command] if command in COMMANDS else [])
            args, unknown = parser.parse_known_args(argv)
        except KeyboardInterrupt:  # (Ctrl-C or SIGTERM there was a traceback, or a silent death)
            print(f"\nnas{f' {command}' if command in COMMANDS else ''}: interrupted", file=sys.stderr)
            return 130
        if unknown:  # (said by the command's own parser, with its usage: the top one showed `nas COMMAND ...`)
            _refuse_unknown(parser, argv, unknown)
        args.argv = argv
        return _run(args)


def entry() -> None:
    """The ``nas`` executable: :func:`main`, then the process's end. Where an in-process trial's training thread is
    still inside torch (a search that stopped on an error with a trial training), the interpreter's exit would kill
    that thread in C++ code, which aborts the process ("terminate called without an active exception", exit 134,
    after our one line): such a process ends at once, its output flushed."""
    code = main()
    ray = sys.modules.get("ray")
    if any(t.name == "nas-trial" and t.is_alive() for t in threading.enumerate()) and not (
            ray is not None and ray.is_initialized()):  # (Ray's own exit hooks stop the cluster it started)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _run(args: argparse.Namespace) -> int:
    try:
        rc = int(args.handler(args) or 0)
        sys.stdout.flush()  # (here, where a reader that left is caught, not in the interpreter's exit)
        return rc
    except BrokenPipeError:  # (`nas status RUN | head`: the reader left; end quietly, as Python's docs advise)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (so the exit's flush has somewhere to go)
        return 0
    except Exception as e:
        where = your_code(e)
        told = isinstance(e, ValueError | TimeoutError) or (isinstance(e, OSError) and e.errno is not None)
        if where is None and not told:
            raise  # (a bug of ours: its traceback is what we need to see)
        said = f"{type(e).__name__} in your code ({where}): " if where else ""
        print(f"nas {args.command}: error: {said}{_said(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nnas {args.command}: interrupted", file=sys.stderr)
        return 130


def _said(e: Exception) -> str:
    """An error's line: an OSError met on a user's path (a missing file, a name too long for the file system, a
    read-only one) as errno's text and the path, without Python's ``[Errno N]``."""
    if isinstance(e, OSError) and e.errno is not None and e.filename is not None:
        from nas.run.files import os_error_text

        return f"{os_error_text(e)}: {e.filename!r}" + (f" -> {e.filename2!r}" if e.filename2 is not None else "")
    return str(e)


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command ``argv`` gives (``nas bench scaling``'s, not ``nas``'s)."""
    own, rest = parser, list(argv)
    while (sub := next((a for a in own._actions if isinstance(a, argparse._SubParsersAction)), None)) is not None:
        name = next((a for a in rest if a in sub.choices), None)
        if name is None:
            break
        own, rest = sub.choices[name], rest[rest.index(name) + 1:]
    return own


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Every parser of the tree takes a flag only as spelt (argparse took a unique prefix: ``--max-param 5`` was
    ``--max-params``, and a flag added later would change what an old command line means)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _no_abbreviations(sub)


def _refuse_unknown(parser: argparse.ArgumentParser, argv: list[str], unknown: list[str]) -> None:
    """The error of the parser of the command given (``nas bench scaling``'s, not ``nas``'s: usage and one line,
    exit 2) naming the arguments it does not take, with the nearest flag it has for a mistyped one (``--budjet``:
    ``--budget``; compared without the dashes, which made ``--json`` look like ``--sort``)."""
    from nas.core.nearest import did_you_mean, nearest

    own = _command_parser(parser, argv)
    bare = {f.lstrip("-"): f for action in own._actions for f in action.option_strings}
    typed = [a.partition("=")[0] for a in unknown if a.startswith("--")]
    near = [bare[hit] for t in typed if (hit := nearest(t.lstrip("-"), bare))]
    own.error(f"unrecognized arguments: {' '.join(unknown)}{did_you_mean(typed, near) if near else ''}")


def your_code(e: BaseException) -> str | None:
    """Where ``e`` was raised in the user's own code, as ``file:line, in function``: the last frame of its
    traceback in a file outside this package, Python's library and the installed packages, with no frame of this
    package after it (then the error is ours to word); None where there is no such frame."""
    paths = sysconfig.get_paths()
    libraries = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    where = None
    for frame, line in traceback.walk_tb(e.__traceback__):
        path = Path(frame.f_code.co_filename).resolve()
        if any(path.is_relative_to(folder) for folder in _our_folders()):
            where = None
        elif path.is_file() and not any(path.is_relative_to(lib) for lib in libraries):
            where = f"{path}:{line}, in {frame.f_code.co_name}"
    return where


@functools.cache
def _our_folders() -> tuple[Path, ...]:
    """The folders of this distribution's packages (four in a source checkout: nas, strategies, search_spaces and
    benchmarks; one site-packages folder each where installed)."""
    names = ("nas", "nas.strategies", "nas.search_spaces", "nas_benchmarks")
    found = (importlib.util.find_spec(name) for name in names)
    return tuple(Path(p).resolve() for spec in found if spec is not None
                 for p in spec.submodule_search_locations or ())


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (``kill``, a batch scheduler's stop) ends a command as Ctrl-C does, with what it saves on the way
    out (``nas search`` sets its own graceful stop over it); the handler before is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["COMMANDS", "UsageError", "build_parser", "entry", "main", "parse_options", "parse_value", "version",
           "your_code"]
