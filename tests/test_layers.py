"""The layers hold: every import in the product points down (core < plugins < train < engine < run < monitor <
cli/api), no import loop, no module flat in nas/ but those that put the layers together, no two modules with one
name. The graph is read from the code (``ast``), run-time imports inside functions included, type-only imports
(``if TYPE_CHECKING``) left out."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"nas": ROOT / "nas", "nas.strategies": ROOT / "strategies", "nas.search_spaces": ROOT / "search_spaces"}
LAYERS = [("nas.core", 0), ("nas.schedulers", 1), ("nas.strategies", 1), ("nas.search_spaces", 1), ("nas.train", 2),
          ("nas.engine", 3), ("nas.run", 4), ("nas.monitor", 5), ("nas.parts", 6), ("nas.session", 6),
          ("nas.oneshot", 6), ("nas.cli", 6), ("nas.api", 6), ("nas.__main__", 6)]
#: imports allowed to run up a layer, each with its reason
ALLOWED_UP: dict[tuple[str, str], str] = {}
#: the modules that put the layers together (a search opened from its config, the API, the entry point)
ENTRY_MODULES = {"nas.parts", "nas.session", "nas.oneshot", "nas.api", "nas.__main__"}


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def layer(module: str) -> int | None:
    return next((n for prefix, n in LAYERS if module == prefix or module.startswith(prefix + ".")), None)


def graph() -> dict[str, set[str]]:
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        tree = ast.parse(path.read_text())
        type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                     and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                target = resolve(name) or (resolve(node.module) if isinstance(node, ast.ImportFrom) else None)
                if target and target not in (module, "nas"):
                    edges[module].add(target)
    return edges


def test_imports_point_down():
    up = {(m, t) for m, targets in graph().items() for t in targets
          if m != "nas" and layer(m) is not None and layer(t) is not None and layer(t) > layer(m)}  # type: ignore[operator]
    assert up <= set(ALLOWED_UP), sorted(up - set(ALLOWED_UP))


def test_no_import_loops():
    edges, index, low, stack, on, loops = graph(), {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on.discard(w)
                component.append(w)
            on.discard(v)
            if component:
                loops.append(sorted([v, *component]))

    for v in list(edges):
        if v not in index:
            visit(v)
    assert loops == []


def test_no_flat_modules_and_no_two_modules_with_one_name():
    mods = modules()
    flat = {m for m, p in mods.items() if p.parent == ROOT / "nas" and p.name != "__init__.py"}
    assert flat <= ENTRY_MODULES, flat
    leaves = defaultdict(list)
    for m, p in mods.items():
        if p.name not in ("__init__.py", "__main__.py"):
            leaves[p.stem].append(m)
    assert {k: v for k, v in leaves.items() if len(v) > 1} == {}
