"""What the fast commands import, checked by structure (never by timing): reading a run (``nas results``, ``best``,
``status``) and refusing bad input to ``nas search`` load neither torch nor Ray, in a fresh interpreter (the
registries name their built-ins without importing them); each built-in name is registered by the module its
registry names."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import nas
from nas.core import registry
from nas.run.lock import RunLock

HEAVY = ("torch", "ray")


def fresh(code: str) -> dict:
    """Run ``code`` in a new interpreter; it ends by printing a JSON object, to which the heavy modules that were
    imported are added."""
    tail = (f"\nimport json as _j, sys as _s\n"
            f"print(_j.dumps({{**OUT, 'heavy': [m for m in {HEAVY!r} if m in _s.modules]}}))")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code) + tail], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_reading_a_run_imports_neither_torch_nor_ray(tmp_path):
    run = tmp_path / "run"
    nas.search("nb201", "random", budget=6, executor="simulated", data=None, run_dir=run, seed=0, progress=False)
    out = fresh(f"""
        import contextlib, io
        from nas.cli import main
        OUT = {{}}
        for command in ("results", "best", "status"):
            with contextlib.redirect_stdout(io.StringIO()) as text:
                OUT[command] = (main([command, {str(run)!r}]), text.getvalue())
    """)
    assert out["heavy"] == [], out
    for command in ("results", "best", "status"):
        code, text = out[command]
        assert code == 0 and text, (command, text)
    assert "~0|+|" in out["best"][1]  # the architecture as NB201's string: the space was read, without torch


def test_bad_input_to_nas_search_is_refused_without_torch_or_ray(tmp_path):
    run = tmp_path / "held"
    nas.search("nb201", "random", budget=2, executor="simulated", data=None, run_dir=run, seed=0, progress=False)
    lock = RunLock(run).acquire()  # another search holds the run: a resume must be refused at once
    lock.write_holder()
    new = tmp_path / "new"
    bad = {
        "space": ["--space", "nb202"],
        "strategy": ["--space", "nb201", "--strategy", "evoluton"],
        "option": ["--space", "nb201", "--strategy", "evolution", "-o", "populaton=5"],
        "scheduler": ["--space", "nb201", "--scheduler", "ashaa"],
        "objective": ["--objective", "val_acc:maxx"],
        "dataset": ["--space", "nb201", "--dataset", str(tmp_path / "missing.npz")],
        "composes": ["--strategy", "pbt", "--scheduler", "asha"],
    }
    try:
        out = fresh(f"""
            import contextlib, io
            from nas.cli import main
            OUT = {{}}
            for what, argv in {bad!r}.items():
                with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
                    OUT[what] = (main(["search", "--run-dir", {str(new)!r} + what, *argv]), err.getvalue())
            with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
                OUT["locked"] = (main(["search", "--resume", {str(run)!r}]), err.getvalue())
        """)
    finally:
        lock.release()
    assert out["heavy"] == [], out
    said = {what: text for what, (_, text) in ((k, v) for k, v in out.items() if k != "heavy")}
    assert {what: code for what, (code, _) in ((k, v) for k, v in out.items() if k != "heavy")} == \
        dict.fromkeys([*bad, "locked"], 2)
    assert all(text.count("\n") == 1 and text.startswith("nas search: error: ") for text in said.values()), said
    assert "did you mean 'nb201'" in said["space"] and "did you mean 'evolution'" in said["strategy"]
    assert "did you mean 'population'" in said["option"] and "did you mean 'asha'" in said["scheduler"]
    assert "does not exist" in said["dataset"] and "in use by another search" in said["locked"]
    assert "does not compose" in said["composes"]
    assert not any(p.name.startswith("new") for p in tmp_path.iterdir())  # a refused search makes nothing


def test_each_built_in_name_is_registered_by_the_module_its_registry_names():
    for kind in ("strategies", "spaces", "schedulers", "executors", "tables"):
        reg = getattr(registry, kind)
        builtins = dict(reg._builtins)
        for name, module in builtins.items():
            obj = reg.get(name)  # its module imported: it registered the name
            assert getattr(obj, "func", obj).__module__ == module, (kind, name)
        mine = {n for n, o in reg._entries.items() if getattr(o, "func", o).__module__ in builtins.values()}
        assert mine == set(builtins), kind  # and registered no name the map lacks
        assert reg.names() == sorted(set(builtins) | set(reg._entries))


def test_listing_every_built_in_strategy_and_space_imports_neither_torch_nor_ray():
    """``nas strategies`` and ``nas spaces`` load every built-in module (each entry's options and doc line): the RL
    controller's policy and the networks live in modules imported only where one is made."""
    out = fresh("""
        import contextlib, io
        from nas.cli import main
        OUT = {}
        for command in ("strategies", "spaces"):
            with contextlib.redirect_stdout(io.StringIO()) as text:
                OUT[command] = (main([command]), text.getvalue())
    """)
    assert out["heavy"] == [], out
    assert out["strategies"][0] == 0 and "rl\n" in out["strategies"][1] and "optuna" in out["strategies"][1]
    assert out["spaces"][0] == 0 and all(f"{name}  (" in out["spaces"][1] for name in ("macro", "nb201", "toy"))
