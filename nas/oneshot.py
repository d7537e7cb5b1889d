"""Two-stage search with a supernet: train it once (``nas supernet train``), search its sub-networks with inherited
weights (``nas search --supernet DIR``, :class:`nas.train.supernet_eval.SupernetEval`), retrain the chosen ones
standalone (``nas retrain RUN --top K``). In Python: :func:`train_supernet`, ``nas.search(..., supernet=DIR)``,
:func:`retrain`.

>>> import tempfile
>>> from nas.train.settings import TrainSettings
>>> d = tempfile.mkdtemp()
>>> df = train_supernet("macro", "digits", d, epochs=1, settings=TrainSettings(device="cpu", threads=1),
...                     progress=False, executor="inprocess")
>>> df[["epoch", "steps", "paths"]].to_dict("records")
[{'epoch': 1, 'steps': 22, 'paths': 22}]
>>> found = nas.api.search("macro", "random", budget=4, executor="inprocess", supernet=d, data="digits",
...                        objectives=["val_acc", "params:min"], run_dir=f"{d}/search", settings=TrainSettings(
...                        device="cpu", threads=1, measure_costs=False))
>>> len(found), sorted(found["state"].unique()), len(found.attrs["front"]) >= 1
(4, ['COMPLETE'], True)
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

import nas.api
from nas.core.space import SearchSpace
from nas.core.spec import BUILTIN, CUSTOM, train_from_spec
from nas.core.types import Arch, check_seed, python_numbers
from nas.engine.supernet_actor import EpochDone, SupernetFailed, SupernetGang, SupernetJob
from nas.parts import check_device
from nas.run.config import DifferentSearch, RunConfig
from nas.run.lock import InUse
from nas.run.supernet_store import SupernetStore
from nas.strategies.fixed import FixedArchs
from nas.train.data import Dataset, dataset_fingerprint, load_dataset
from nas.train.settings import TrainSettings
from nas.train.supernet_spos import SAMPLINGS

EpochCallback = Callable[[Mapping[str, Any]], None]


def train_supernet(space: str | SearchSpace = "macro", data: str | Dataset = "digits",
                   run_dir: str | os.PathLike[str] | None = None, *, epochs: int = 10, sampling: str = "uniform",
                   settings: TrainSettings | None = None, seed: int = 0, resume: bool = False, progress: bool = True,
                   on_epoch: EpochCallback | None = None, executor: str = "ray", trial_workers: int = 1,
                   address: str | None = None, cpus_per_worker: float = 1.0) -> pd.DataFrame:
    """Train ``space``'s supernet on ``data`` by single-path one-shot training (:mod:`nas.train.supernet_spos`,
    ``sampling`` uniform, fair or sandwich) for ``epochs`` epochs, with ``settings``' optimizer, learning rate,
    schedule and batch size, in ``run_dir`` (:mod:`nas.run.supernet_store`: lock, journal of epochs, a checkpoint
    each epoch). ``resume=True`` continues the run there (same space, data, sampling, seed, settings and workers;
    ``epochs`` may be raised) to the weights an uninterrupted run reaches. ``on_epoch(record)`` is called once each
    epoch is on disk. Returns one row per epoch; ``df.attrs["run_dir"]`` names the directory.

    ``executor``: ``ray`` (the training on a Ray actor of ``cpus_per_worker`` CPUs; with ``trial_workers`` N > 1 a
    gang of N actors training it data-parallel, ``settings.batch_size`` rows per rank and step:
    :mod:`nas.engine.supernet_actor`; the cluster at ``address``, else a private local one) or ``inprocess`` (in
    this process). Either way this process's store writes every epoch the workers send."""
    for name, value, ok, allowed in (
            ("data", data, isinstance(data, str | Dataset), "a dataset's name (such as 'digits') or a nas Dataset"),
            ("run_dir", run_dir, run_dir is None or isinstance(run_dir, str | os.PathLike), "a path or None"),
            ("settings", settings, settings is None or isinstance(settings, TrainSettings), "a nas TrainSettings"),
            ("on_epoch", on_epoch, on_epoch is None or callable(on_epoch), "a function of each epoch's record"),
            ("address", address, address is None or isinstance(address, str), "a Ray cluster's address or None")):
        if not ok:  # (each failed inside, on_epoch only after the first epoch was trained)
            raise TypeError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    space_obj = nas.api.space_from_spec(space)
    epochs, seed, trial_workers, cpus_per_worker = python_numbers((epochs, seed, trial_workers, cpus_per_worker))
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:  # (before anything is written)
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"unknown sampling {sampling!r}; known: {', '.join(SAMPLINGS)}")
    check_seed(seed)
    if executor not in ("ray", "inprocess"):
        raise ValueError(f"executor {executor!r} cannot train a supernet; allowed: ray, inprocess")
    if isinstance(trial_workers, bool) or not isinstance(trial_workers, int) or trial_workers < 1:
        raise ValueError(f"trial_workers must be an integer >= 1, got {trial_workers!r}")
    if isinstance(cpus_per_worker, bool) or not isinstance(cpus_per_worker, int | float) \
            or not 0 < cpus_per_worker < float("inf"):
        raise ValueError(f"cpus_per_worker must be a finite number > 0, got {cpus_per_worker!r}")
    if trial_workers > 1 and executor != "ray":
        raise ValueError(f"trial_workers={trial_workers} (data-parallel training) needs executor 'ray', "
                         f"got {executor!r}")
    if executor != "ray" and address:  # (ignored: --address é trained, exit 0)
        raise ValueError(f"address {address!r} is for a Ray cluster; executor {executor!r} starts none (drop it, or "
                         f"use executor 'ray')")
    if executor == "ray" and (address or os.environ.get("RAY_ADDRESS")):
        from nas.engine.cluster import check_reachable

        check_reachable(address or os.environ["RAY_ADDRESS"])  # (Ray retries a dead one for minutes: said now)
    settings = settings or TrainSettings(seed=seed)
    if executor == "inprocess":  # (a Ray actor's GPUs are its own to see)
        check_device(settings.device, executor, 0.0)
    dataset = load_dataset(data, seed=seed) if isinstance(data, str) else data
    settings.check_data(dataset)
    task = dataset.task
    if not space_obj.has_supernet:
        space_obj.supernet(task)  # the space's own one-line refusal
    if sampling == "sandwich":  # (refused by the sampler of a supernet without sizes: before anything is written)
        from nas.train.supernet_spos import PathSampler

        PathSampler(space_obj.supernet(task), sampling)
    run_path = Path(run_dir or default_supernet_dir(space_obj))
    config = {"space": space_obj.spec()["class"], "space_spec": space_obj.spec(),
              "task": {"input_shape": list(task.input_shape), "num_classes": task.num_classes},
              "dataset": data if isinstance(data, str) else dataset.name,
              "dataset_fingerprint": dataset_fingerprint(dataset), "sampling": sampling, "seed": seed,
              "epochs": epochs, "hparams": settings.defaults(), "ranks": trial_workers, "run_dir": str(run_path),
              "created": datetime.datetime.now().isoformat(timespec="seconds")}
    job = SupernetJob(epochs, sampling, seed)
    store = SupernetStore.resume(run_path, config) if resume else SupernetStore.create(run_path, config)
    try:
        state = store.checkpoint()
        bar = tqdm(total=epochs, initial=0 if state is None else int(state["epoch"]), desc="supernet",
                   unit="epoch", file=sys.stderr, disable=not progress, dynamic_ncols=True)
        with bar:
            if executor == "inprocess":
                done = _in_process(space_obj, dataset, settings, job, state)
            else:
                done = _on_ray(space_obj, dataset, settings, job, state, trial_workers, address, cpus_per_worker)
            for item in done:
                store.on_epoch(item.record, item.state, item.weights)
                bar.set_postfix_str(f"loss {item.record['train_loss']:.4f}, acc {item.record['train_acc']:.4f}")
                bar.update(1)
                if on_epoch is not None:
                    on_epoch(item.record)
        store.write_status("finished", epochs)
        records = list(store.records)
    except SupernetFailed:
        store.write_status("failed", epochs)
        store.close()
        raise
    except BaseException:
        store.discard()  # (a new run that never trained an epoch is taken back; one with an epoch only closed)
        raise
    else:
        store.close()
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "kind"} for r in records])
    df.attrs["run_dir"] = str(run_path)
    return df


def default_supernet_dir(space: SearchSpace) -> Path:
    """Where a supernet run of ``space`` goes when no run directory is named: ``runs/<time>-supernet-<space>``."""
    return Path("runs") / f"{datetime.datetime.now():%Y%m%d-%H%M%S}-supernet-{space!r}"


def _in_process(space: SearchSpace, dataset: Dataset, settings: TrainSettings, job: SupernetJob,
                state: dict[str, Any] | None) -> Iterator[EpochDone]:
    """The epochs after ``state``, trained in this process."""
    import torch

    from nas.train.device import DeviceSide
    from nas.train.supernet_io import weights_bytes
    from nas.train.supernet_spos import SPOSTrainer

    side = DeviceSide(dataset, settings)  # (before seeding: its warm-up draws random numbers)
    with side.flags():
        torch.manual_seed(job.seed)
        supernet = space.supernet(dataset.task).to(side.device)
        trainer = SPOSTrainer(supernet, side.feed, settings.defaults(), epochs=job.epochs, sampling=job.sampling,
                              seed=job.seed, autocast=side.autocast)
        if state is not None:
            trainer.load_state_dict(state)
        while trainer.epoch < job.epochs:
            record = {**trainer.train_epoch(), "ranks": 1}
            yield EpochDone(record, trainer.state_dict(),
                            weights_bytes(supernet, space_spec=space.spec(), epoch=trainer.epoch))


def _on_ray(space: SearchSpace, dataset: Dataset, settings: TrainSettings, job: SupernetJob,
            state: dict[str, Any] | None, ranks: int, address: str | None, cpus: float) -> Iterator[EpochDone]:
    """The epochs after ``state``, trained by a gang of ``ranks`` Ray actors (one: a single trainer actor)."""
    from nas.parts import connect

    connect(address, run_name="supernet")
    gang = SupernetGang(space, dataset, settings, job, ranks=ranks, cpus=cpus)
    try:
        yield from gang.train(state)
    finally:
        gang.shutdown()


def chosen(run_dir: str | os.PathLike[str], top: int) -> tuple[RunConfig, list[Arch], list[int]]:
    """A search run's config, its ``top`` architectures and the trial each was first scored by: by score; with
    several objectives, the Pareto front first (best first objective first), then the rest by score."""
    from nas.core.front import pareto_front
    from nas.run.reader import load_run, read_journal

    cfg, df = load_run(run_dir)
    archs = {t.trial_id: t.arch for t, _ in read_journal(run_dir)}
    ok = df[df["state"] == "COMPLETE"].sort_values("score", ascending=False, kind="stable")
    order = list(ok["trial_id"])
    if len(cfg.search.objectives) > 1:
        front = list(pareto_front(df, cfg.search.objectives)["trial_id"])
        order = [t for t in order if t in front] + [t for t in order if t not in front]
    picked: list[Arch] = []
    ids: list[int] = []
    for tid in order:
        if archs[tid] not in picked:
            picked.append(archs[tid])
            ids.append(int(tid))
        if len(picked) == top:
            break
    return cfg, picked, ids


def retrain(run_dir: str | os.PathLike[str], *, top: int = 1, epochs: int | None = None,
            data: str | Dataset | None = None, out_dir: str | os.PathLike[str] | None = None,
            settings: TrainSettings | None = None, space: SearchSpace | None = None, out_flag: str = "out_dir",
            **search_options: Any) -> pd.DataFrame:
    """Train the ``top`` architectures of the search in ``run_dir`` standalone, from scratch, with the search's
    training function (:func:`chosen` picks them; the built-in one, the ``module:function`` the run names, imported
    again, or, for one that cannot be imported, the same one handed in as ``train=``): a search of its own
    (``out_dir``, default ``RUN/retrain``: a new or empty folder, refused naming ``out_flag`` otherwise) whose
    strategy asks exactly those, for ``epochs`` epochs each (default: the search's ``epochs`` setting) on the
    search's data (or ``data``), in the search's space (rebuilt from its record; ``space``: the same space handed
    in, where it cannot be imported, as a class defined in a script). ``search_options`` go to
    :func:`nas.api.search` (``executor``, ``workers``, ...). Returns its results, with the search trial each
    architecture was first scored by (``search_trial``)."""
    from nas.parts import check_run_dir

    top, epochs = python_numbers((top, epochs))
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be an integer >= 1, got {top!r}")
    if space is not None and not isinstance(space, SearchSpace):  # (an AttributeError on 'spec')
        raise TypeError(f"space is the run's space as a nas.SearchSpace object (left out, it is rebuilt from the run's "
                        f"record), got {space!r} ({type(space).__name__})")
    own = sorted(set(search_options) & {"seed", "budget", "strategy", "config", "resume", "run_dir"})
    if own:  # (search()'s "got multiple values for keyword argument")
        raise ValueError(f"retrain sets {', '.join(own)} itself (the search's seed; a budget of the architectures "
                         f"chosen, top; its own strategy; out_dir): leave {'them' if len(own) > 1 else 'it'} out")
    cfg, archs, sources = chosen(run_dir, top)
    if not archs:
        raise ValueError(f"run {str(run_dir)!r} has no COMPLETE trial to retrain")
    out_dir = out_dir or Path(run_dir) / "retrain"
    again = _earlier_retraining(out_dir)  # (one interrupted, or finished: the same command continues it)
    check_run_dir(out_dir, resume=again, flag=out_flag)  # (as the caller names it, before anything starts)
    if space is None:
        space = nas.api.space_from_spec(cfg.search.space, cfg.search.space_args, outside=run_dir)
    elif space.spec() != {"class": cfg.search.space, "args": dict(cfg.search.space_args)}:
        raise ValueError(f"space {space.spec()} is not the space run {str(run_dir)!r} searched "
                         f"({ {'class': cfg.search.space, 'args': dict(cfg.search.space_args)} })")
    if data is None:
        if cfg.train.data_object is not None:
            raise ValueError(f"run {str(run_dir)!r} searched a Dataset given in Python ({cfg.train.data_object}); "
                             f"pass the same as data= to retrain")
        data = cfg.train.dataset  # (None: the run searched no data, and so does its retraining)
    function = cfg.train.function
    if "train" not in search_options and function != BUILTIN:  # (the built-in trainer scored another task)
        if function.startswith(CUSTOM):
            raise ValueError(f"run {str(run_dir)!r} trained with a function that is {function}: retrain it from "
                             f"Python with the same one: nas.retrain({str(run_dir)!r}, train=<that function>)")
        search_options["train"] = train_from_spec(function, outside=run_dir)
    if settings is None:  # (the search's trial_timeout bounded its short trials, not a longer retraining)
        settings = dataclasses.replace(cfg.train.settings, objectives=tuple(cfg.search.objectives), trial_timeout=None)
    if epochs is not None:
        settings = dataclasses.replace(settings, epochs=epochs)
    try:
        df = nas.api.search(space, FixedArchs(space, archs), budget=len(archs), data=data, settings=settings,
                            run_dir=out_dir, seed=cfg.search.seed, resume=again, **search_options)
    except InUse as e:  # (another retraining took the folder after our check)
        raise InUse(e.dir, e.holder, out_flag) from None
    except DifferentSearch as e:
        if not again:
            raise
        raise ValueError(f"{out_flag} {str(out_dir)!r} holds a retraining of other settings ({'; '.join(e.diffs)}); "
                         f"choose another {out_flag}") from None
    # (its trials are numbered from 0 in the order asked: which search trial each retrained was not said anywhere)
    df.insert(1, "search_trial", df["trial_id"].map(dict(enumerate(sources))))
    return df

def _earlier_retraining(out_dir: str | os.PathLike[str]) -> bool:
    """Whether ``out_dir`` holds a retraining :func:`retrain` made (its run.json names the strategy FixedArchs): the
    same call continues it (a retraining killed or stopped by a full disk could be neither made again, "already
    holds a run", nor resumed with ``nas search --resume``, which knows no strategy FixedArchs). Whether it is the
    same retraining (run, architectures, settings) the resume's own check of the config says."""
    from nas.run.store import read_config

    if not (Path(out_dir) / "run.json").is_file():
        return False
    try:
        return read_config(Path(out_dir)).search.strategy == FixedArchs.__name__
    except (ValueError, OSError):
        return False  # (not a run: check_run_dir says what it is)


__all__ = ["SupernetFailed", "chosen", "default_supernet_dir", "retrain", "train_supernet"]
