"""Imports point down the layers (core < train < engine < run < monitor < cli/api), read from the source: nothing
in nas/run, nas/train, nas/engine or nas/core imports nas.api, nas.cli or what they open a search with."""

from __future__ import annotations

import ast
from pathlib import Path

import nas

ROOT = Path(nas.__file__).parent
#: each layer of the package by its folder (or top-level module); a module imports only its own layer and below
LAYER = {"core": 0, "schedulers": 0, "train": 1, "engine": 2, "run": 3, "monitor": 4, "parts": 5, "session": 5,
         "api": 5, "cli": 6}


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if parts[0] == "nas" and len(parts) > 1 else None


def test_imports_point_down():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        name = ".".join(("nas", *path.relative_to(ROOT).with_suffix("").parts))
        mine = layer(name)
        if mine is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            upward += [f"{name} -> {t}" for t in targets if (layer(t) or 0) > mine]
    assert upward == []
    assert set(LAYER) == {p.stem for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()} - {
        "__init__", "__main__"}  # every folder and module has its layer
