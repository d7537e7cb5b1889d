"""``nas best RUN_DIR --pareto [--export DIR]``: a run's Pareto front, listed and exported.

The objectives are run.json's ``objectives`` (default ``["val_acc:max"]``), read from each result's
metrics; the front is :func:`nas.pareto_front`'s (COMPLETE trials only: infeasible and failed ones never
join). The hypervolume is measured against :func:`~nas.core.front.reference_point` of every ranked trial
of the run (each objective's worst value less a tenth of its range), printed beside it.

``--export DIR`` writes ``DIR/front.json`` (objectives, reference, hypervolume, and per member its trial
id, architecture, objective values, metrics and hparams) and, for every member whose trained weights the
run directory kept (``checkpoints/<id>.pt``, or ``best.pt`` for the best trial), ``DIR/weights/<id>.pt``,
checked to load with ``torch.load(weights_only=True)`` first. Nothing read can run code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from nas.core.front import DEFAULT_OBJECTIVES, objective_frame, pareto_front, reference_point, scores_of
from nas.core.objectives import Objectives, hypervolume
from nas.run.config import RunConfig
from nas.run.export import check_export_dir, check_not_owned, write_export
from nas.run.files import check_regular, os_error_text
from nas.run.layout import first_missing, remove_made


def run_objectives(cfg: RunConfig) -> Objectives:
    """The run's objectives, from run.json."""
    return Objectives(cfg.search.objectives or list(DEFAULT_OBJECTIVES))


def front_status(cfg: RunConfig, df: pd.DataFrame) -> dict[str, Any]:
    """``objectives``, ``front_size`` and ``hypervolume`` for ``nas status`` (the last two None for a run with
    one objective, or with a malformed objectives entry)."""
    objectives = cfg.search.objectives
    out: dict[str, Any] = {"objectives": list(objectives), "front_size": None, "hypervolume": None}
    if len(objectives) < 2:
        return out
    try:
        obj = Objectives(objectives)
    except ValueError:
        return out
    ranked = objective_frame(df, obj)
    if not ranked.empty:
        scores = scores_of(ranked, obj)
        front = scores_of(pareto_front(df, obj), obj)
        out.update(front_size=len(front), hypervolume=hypervolume(front, reference_point(scores)))
    else:
        out["front_size"] = 0
    return out


def format_front_status(st: dict[str, Any]) -> str | None:
    """The ``nas status`` line of a multi-objective run, or None.

    >>> format_front_status({"objectives": ["val_acc:max", "params:min"], "front_size": 3, "hypervolume": 12.5})
    'front     3 trials on the Pareto front of val_acc:max, params:min; hypervolume 12.5'
    """
    if st.get("front_size") is None:
        return None
    from nas.core.terminal import visible

    hv = f"; hypervolume {st['hypervolume']:.6g}" if st.get("hypervolume") is not None else ""
    return (f"front     {st['front_size']} trial{'s' if st['front_size'] != 1 else ''} on the Pareto front of "
            f"{', '.join(map(visible, st['objectives']))}{hv}")


def run_front(run_dir: str | os.PathLike[str]) -> tuple[Objectives, pd.DataFrame, list[float] | None, float]:
    """(objectives, the front's rows, reference, hypervolume) of a run directory."""
    from nas.run.reader import load_run

    cfg, df = load_run(run_dir)
    obj = run_objectives(cfg)
    ranked = objective_frame(df, obj)
    if ranked.empty:
        return obj, ranked, None, 0.0
    scores = scores_of(ranked, obj)
    ref = reference_point(scores)
    front = pareto_front(df, obj)
    return obj, front, ref, hypervolume(scores_of(front, obj), ref)


def format_front(obj: Objectives, front: pd.DataFrame, reference: list[float] | None, hv: float) -> str:
    """The front as an aligned table (trial, each objective in its own sign, architecture) and its hypervolume."""
    from nas.core.terminal import visible  # (the run's text: its control characters shown)

    if front.empty:
        return "no trial completed with every objective (" + visible(", ".join(obj.to_list())) + "): no front yet"
    cols = ["trial", *[visible(f"{o.metric} ({o.mode})") for o in obj], "architecture"]
    rows = [[str(int(r["trial_id"])), *[f"{r[o.metric]:.4g}" for o in obj], visible(r["arch"])]
            for r in front.to_dict("records")]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols[:-1])]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols[:-1], widths)) + "  " + cols[-1]]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row[:-1], widths)) + "  " + row[-1] for row in rows]
    shown = obj.values(reference) if reference is not None else {}
    ref = ", ".join(f"{visible(k)}={v:.4g}" for k, v in shown.items())
    lines.append(f"\nPareto front: {len(front)} trial{'s' if len(front) != 1 else ''} of "
                 f"{visible(', '.join(obj.to_list()))}; hypervolume {hv:.6g} (reference {ref})")
    return "\n".join(lines)


def kept_weights(run_dir: Path, trial_id: int) -> Path | None:
    """The kept weights of ``trial_id`` in a run directory, or None."""
    from nas.run.weights import CHECKPOINTS, best_weights_path

    ckpt = run_dir / CHECKPOINTS / f"{trial_id}.pt"
    if ckpt.exists():
        check_regular(ckpt)  # (a folder in its place is refused, not taken as no weights)
        return ckpt
    try:  # (whether they load as data is checked as they are copied: weights that do not are refused, not skipped)
        return best_weights_path(run_dir, trial_id)
    except ValueError:  # (none kept, or best.pt holds another trial's)
        return None


def export_front(run_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> tuple[Path, int]:
    """Write ``out/front.json`` and ``out/weights/<id>.pt`` of each member with kept weights; returns the
    JSON's path and how many weight files were written. A failed export (a full disk, a weights file that fails
    its check) takes back the files it made and the folders it made for them."""
    run = Path(run_dir)
    obj, front, ref, hv = run_front(run)
    out_dir = Path(out)
    check_export_dir(out_dir)
    ours = earlier_export(out_dir)
    made = first_missing(out_dir / "weights")
    wrote: list[Path] = []  # (new files: a failed export takes them back, and the folders it made)
    try:
        path, copied = _write_front(run, out_dir, obj, front, ref, hv, wrote, ours)
    except BaseException:
        for p in wrote:
            p.unlink(missing_ok=True)
        remove_made(out_dir / "weights", made)
        raise
    return path, copied


def earlier_export(out_dir: Path) -> set[Path]:
    """The files of an earlier export of a front in ``out_dir`` (its front.json and the weight files it lists),
    which a new export may replace; a front.json there that is not one is refused (a user's file)."""
    prior = out_dir / "front.json"
    if not prior.is_file():
        return set()
    check_not_owned(prior)  # (a symlink to a run's own file: said as such)
    try:
        doc = json.loads(prior.read_bytes())
    except (ValueError, RecursionError):
        doc = None
    if not (isinstance(doc, dict) and isinstance(doc.get("members"), list) and "objectives" in doc):
        raise ValueError(f"refusing to write {str(prior)!r}: a file of that name is there and is no front this "
                         f"command exported; choose a new or empty folder")
    listed = [m.get("weights") for m in doc["members"] if isinstance(m, dict)]
    return {prior, *(out_dir / w for w in listed if isinstance(w, str) and w.startswith("weights/"))}


def _write_front(run: Path, out_dir: Path, obj: Objectives, front: pd.DataFrame, ref: Any, hv: float,
                 wrote: list[Path], ours: set[Path]) -> tuple[Path, int]:
    from nas.run.reader import read_journal
    from nas.run.store import check_checkpoint

    trials = {t.trial_id: t for t, _ in read_journal(run)}
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create export directory {str(out_dir)!r}: {os_error_text(e)}") from None
    members, copied = [], 0
    for row in front.to_dict("records"):
        tid = int(row["trial_id"])
        trial = trials[tid]
        weights = kept_weights(run, tid)
        rel = None
        if weights is not None:
            into = out_dir / "weights"
            check_export_dir(into)  # (it may be a symlink into a run directory)
            try:
                into.mkdir(exist_ok=True)
            except OSError as e:
                raise ValueError(f"cannot create export directory {str(into)!r}: {os_error_text(e)}") from None
            data = weights.read_bytes()
            check_checkpoint(data, weights)
            _write_new(into / f"{tid}.pt", data, wrote, ours)
            rel, copied = f"weights/{tid}.pt", copied + 1
        members.append({"trial_id": tid, "arch": dict(trial.arch), "arch_str": str(row["arch"]),
                        **{o.metric: float(row[o.metric]) for o in obj}, "metrics": row.get("metrics"),
                        "hparams": dict(trial.hparams), "weights": rel})
    doc = {"run": str(run), "objectives": obj.to_list(), "hypervolume": hv,
           "reference": obj.values(ref) if ref is not None else None, "members": members}
    path = out_dir / "front.json"
    _write_new(path, (json.dumps(doc, indent=2, default=str) + "\n").encode(), wrote, ours)
    return path, copied


def _write_new(path: Path, data: bytes, wrote: list[Path], ours: set[Path]) -> None:
    """:func:`write_export`, noting ``path`` in ``wrote`` where it is a new file (before it is written: a Ctrl-C
    inside the write left it behind); one already there is replaced only where an earlier export wrote it (``ours``)
    or it holds these very bytes (left by an export of the same front that was killed before its front.json)."""
    new = not path.exists()
    if not new and path not in ours and not _holds(path, data):
        raise ValueError(f"refusing to write {str(path)!r}: a file of that name is there and no earlier export of "
                         f"a front wrote it; choose a new or empty folder")
    if new:
        wrote.append(path)
    write_export(path, data)


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def cmd_pareto(run_dir: str, export: str | None) -> int:
    """What ``nas best RUN_DIR --pareto [--export DIR]`` prints and writes."""
    obj, front, ref, hv = run_front(run_dir)
    if export is not None:  # (first: an export that fails is the command's one line)
        path, copied = export_front(run_dir, export)
    print(format_front(obj, front, ref, hv))
    if export is not None:
        print(f"wrote {path} ({len(front)} members) and {copied} weight file{'s' if copied != 1 else ''} "
              f"in {Path(export) / 'weights'} (torch.load(..., weights_only=True))")
    return 0


__all__ = ["cmd_pareto", "earlier_export", "export_front", "format_front", "format_front_status", "front_status",
           "kept_weights", "run_front", "run_objectives"]
