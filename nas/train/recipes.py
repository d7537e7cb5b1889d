"""Training recipes: named sets of :class:`nas.train.settings.TrainSettings` values, as data, each with its source.

``nas search --recipe nb201`` fills the settings from a recipe; options given explicitly (``--epochs 12``,
a config file's ``lr``) win over it. ``nas recipes`` lists them.

>>> RECIPES["nb201"]["settings"]["lr"], RECIPES["nb201"]["settings"]["schedule"]
(0.1, 'cosine')
>>> recipe_settings("nb201-12")["epochs"]
12
"""

from __future__ import annotations

from typing import Any

from nas.core.nearest import did_you_mean

_NB201_SOURCE = ("Dong & Yang, \"NAS-Bench-201: Extending the Scope of Reproducible Neural Architecture Search\", "
                 "ICLR 2020, Sec. 2.3 \"Architecture performance\", Table 1 (the training hyper-parameter set H)")

#: The NAS-Bench-201 schedule, Table 1: SGD with Nesterov momentum 0.9, initial lr 0.1 annealed by cosine to
#: 0, weight decay 5e-4, batch 256, no warm-up, 200 epochs; augmentation: random flip (p = 0.5) and random
#: 32x32 crop with 4 pixels of padding on each border, inputs normalised per RGB channel.
_NB201 = {"optimizer": "sgd", "nesterov": True, "momentum": 0.9, "lr": 0.1, "schedule": "cosine", "min_lr": 0.0,
          "warmup_epochs": 0.0, "weight_decay": 5e-4, "batch_size": 256, "crop_padding": 4, "flip": True,
          "cutout": 0, "label_smoothing": 0.0, "grad_clip": None, "epochs": 200}

RECIPES: dict[str, dict[str, Any]] = {
    "nb201": {"about": "NAS-Bench-201's full training of a cell: 200 epochs (H in the paper)",
              "source": _NB201_SOURCE, "settings": _NB201},
    "nb201-12": {"about": "NAS-Bench-201's short schedule: the same with 12 epochs (the 12-epoch results the "
                          "benchmark reports for fast searches)",
                 "source": _NB201_SOURCE + "; the 12-epoch variant of Sec. 2.3", "settings": {**_NB201, "epochs": 12}},
}


def recipe_settings(name: str) -> dict[str, Any]:
    """The settings of recipe ``name`` (a copy); an unknown name is a ValueError listing the known ones."""
    if not isinstance(name, str) or name not in RECIPES:  # (a list: "unhashable type")
        raise ValueError(f"unknown recipe {name!r}{did_you_mean(name, RECIPES)}; known: {', '.join(RECIPES)}")
    return dict(RECIPES[name]["settings"])
