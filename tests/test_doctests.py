"""Every docstring example in the package (and in the benchmarks) runs, so the documentation cannot drift from the
code."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import nas
import nas_benchmarks


def modules() -> list[str]:
    names = []
    for package in (nas, nas_benchmarks):
        names += [info.name for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]
    for pkg in ("nas.strategies", "nas.search_spaces"):
        module = importlib.import_module(pkg)
        names += [f"{pkg}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
    return sorted(n for n in set(names) if not n.endswith(".__main__"))


@pytest.mark.parametrize("name", modules())
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
