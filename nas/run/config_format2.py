"""Reading the flat ``run.json`` of format 2 (main at c00758a; ``tests/fixtures/run_format2``) as the configuration
tree of format 3. Format 2 had every :class:`nas.run.config.RunConfig` leaf at the top level, plus ``space_spec``
(the space's class and arguments), ``data`` (the dataset spec, null for a Dataset object or no data), ``settings``
(the complete TrainSettings), ``dataset_fingerprint``, ``executor_class``, ``created`` and ``resumed``.

Format 2 did not record the training function: a run with a dataset spec is taken to use the built-in one (the
command line could run no other); a run without one (a Dataset object, or no data at all) is recorded as a custom
function that cannot be imported, so only Python (with the same ``train=``) resumes it.

>>> from nas.run.config import RunConfig
>>> cfg = RunConfig.from_json({"space": "toy", "budget": 3, "epochs": 2, "data": None, "dataset": "none",
...                            "format": 2})
>>> cfg.search.budget, cfg.train.settings.epochs, cfg.train.dataset, cfg.train.function
(3, 2, None, 'custom, not importable (format 2 did not record it)')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nas.run.config_tree import BUILTIN, section_from_json
from nas.train.settings import TrainSettings

if TYPE_CHECKING:
    from nas.run.config import RunConfig

#: keys of format 2 that are no leaf of the tree: the record of what the run was given
_RECORD = ("space_spec", "data", "settings", "dataset_fingerprint", "executor_class", "created", "resumed", "format")


def from_format2(saved: Mapping[str, Any], config_class: type[RunConfig]) -> RunConfig:
    """The :class:`RunConfig` (``config_class``, passed in: this module is the config's helper, below it) a
    format-2 ``run.json`` (or any flat mapping of leaves) describes."""
    values = {k: v for k, v in saved.items() if k not in _RECORD}
    settings = saved.get("settings")
    if isinstance(settings, Mapping):  # the complete settings: the flat training keys repeat them
        trained = {f.name for f in dataclasses.fields(TrainSettings)} - {"seed", "objectives"}
        values = {k: v for k, v in values.items() if k not in trained and k != "train_options"}
    spec = saved.get("space_spec")
    if isinstance(spec, Mapping):
        values["space"], values["space_args"] = spec.get("class", values.get("space")), dict(spec.get("args") or {})
    data, fingerprint = saved.get("data"), saved.get("dataset_fingerprint")
    named = values.get("dataset")
    if "data" in saved:  # (format 2 wrote "none" for no data, a Dataset object's name for an object)
        values["dataset"] = data if isinstance(data, str) else None
    cfg = config_class.from_mapping(values)
    no_spec = "data" in saved and not isinstance(data, str)
    train = dataclasses.replace(
        cfg.train, dataset_fingerprint=fingerprint,
        data_object=named if no_spec and fingerprint is not None and isinstance(named, str) else None,
        function="custom, not importable (format 2 did not record it)" if no_spec else BUILTIN)
    if isinstance(settings, Mapping):
        known = {f.name for f in dataclasses.fields(TrainSettings)}
        train.settings = section_from_json(TrainSettings, {k: v for k, v in settings.items() if k in known},
                                           "settings")
    resumed = saved.get("resumed") or []
    return dataclasses.replace(
        cfg, train=train, created=saved.get("created"), resumed=[str(r) for r in resumed],
        execution=dataclasses.replace(cfg.execution, executor_class=saved.get("executor_class")))


__all__ = ["from_format2"]
