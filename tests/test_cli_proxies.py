"""``nas proxies``: zero-cost proxies against a run's finished trials (a real search whose trials were scored by a
proxy on real data, so the ranking it must print is known), of a space's samples, and its one-line refusals; and the
proxy as an objective (``--train-function nas.train.proxies:score``) and as a constraint (``--proxy-screen``) of a
search from the command line (in-process executor; Ray: tests/test_proxies_ray.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nas.cli import main
from nas.run.reader import read_journal

NB201 = ["--space", "nb201", "--space-option", "channels=4", "--executor", "inprocess", "--threads", "1",
         "--epochs", "1", "--quiet", "--dataset", "digits", "--strategy", "random"]


@pytest.fixture(scope="module")
def params_run(tmp_path_factory):
    """A search whose objective is the ``params`` proxy, scored (not trained) on the workers."""
    run_dir = str(tmp_path_factory.mktemp("proxies") / "run")
    code = main(["search", *NB201, "--budget", "6", "--run-dir", run_dir,
                 "--train-function", "nas.train.proxies:score", "--objective", "params", "--batch-size", "16"])
    assert code == 0
    return run_dir


def test_the_proxy_objective_scores_candidates_instead_of_training(params_run):
    results = read_journal(params_run)
    assert len(results) == 6
    for _, r in results:
        assert r.ok and r.score == r.metrics["params"] > 0 and "val_acc" not in r.metrics
    config = json.loads((Path(params_run) / "run.json").read_text())
    assert config["train"]["function"] == "nas.train.proxies:score"


def test_nas_proxies_ranks_a_run_s_trials(params_run, nas_cli):
    code, out, err = nas_cli("proxies", params_run, "--proxies", "params,synflow,naswot", "--batch", "16")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("6 scored trials of") and "objective params:max" in lines[0]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert list(rows) == ["params", "synflow", "naswot"]
    assert rows["params"][:2] == ["1.000", "1.000"]  # the run's score is params itself: a perfect ranking
    for rho, tau, sec in rows.values():
        assert -1 <= float(rho) <= 1 and -1 <= float(tau) <= 1 and float(sec) > 0


def test_nas_proxies_of_a_space_s_samples(nas_cli):
    code, out, err = nas_cli("proxies", "--space", "nb201", "--space-option", "channels=4", "--sample", "3",
                             "--proxies", "synflow,params", "--batch", "8")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("3 architectures of NB201Space (seed 0)") and len(lines) == 1 + 1 + 3 + 1
    assert lines[1].split() == ["arch", "synflow", "params"] and lines[-1].split()[0] == "s/cell"
    assert all(float(v) > 0 for line in lines[2:] for v in line.split()[1:])


@pytest.mark.parametrize("argv, message", [
    ([], "give a run directory, or --space S --sample N (not both)"),
    (["--space", "nb201"], "--space needs --sample N with N from 1 to 100,000, got None"),
    # (a list of that many architectures was made first: memory grew until killed)
    (["--space", "nb201", "--sample", str(2**70)], "--space needs --sample N with N from 1 to 100,000, got "
                                                   "1180591620717411303424"),
    (["--space", "nope", "--sample", "2"], "unknown search space 'nope'; known:"),
    (["--space", "nb201", "--sample", "2", "--proxies", "flops"], "unknown proxy 'flops'; known: synflow"),
    (["--space", "nb201", "--sample", "2", "--batch", "1"], "--batch must be at least 2"),
    (["/nonexistent/run"], "'/nonexistent/run' is not a run directory (no run.json)"),
    (["--space", "nb201", "--sample", "2", "--seed", "-1"],  # (numpy's "expected non-negative integer")
     "argument --seed: the seed must be an integer from 0 to 2**63 - 1, got -1"),
    (["--space", "nb201", "--sample", "2", "--seed", str(10**23)],  # ("Overflow when unpacking long long")
     f"argument --seed: the seed must be an integer from 0 to 2**63 - 1, got {10**23}"),
])
def test_bad_input_is_one_line_and_exit_2(nas_cli, argv, message):
    code, out, err = nas_cli("proxies", *argv)
    said = [line for line in err.strip().splitlines() if not line.startswith(("usage:", " "))]  # (argparse's usage)
    assert code == 2 and out == "" and len(said) == 1 and message in said[0], err


def test_a_run_s_trials_are_ranked_over_a_seeded_sample(params_run, nas_cli, monkeypatch):
    """(Every scored trial was ranked, about 0.5 s each: a 100,000-trial run took 13 hours.) At most RUN_SAMPLE of
    them, or --sample N, drawn by --seed."""
    from nas.cli import zero_cost

    code, out, err = nas_cli("proxies", params_run, "--sample", "4", "--proxies", "params", "--batch", "16")
    assert code == 0 and out.startswith("a seeded sample of 4 of the 6 scored trials of"), err
    monkeypatch.setattr(zero_cost, "RUN_SAMPLE", 5)
    code, out, err = nas_cli("proxies", params_run, "--proxies", "params", "--batch", "16")
    assert code == 0 and out.startswith("a seeded sample of 5 of the 6 scored trials of"), err
    code, _, err = nas_cli("proxies", params_run, "--sample", "2")
    assert code == 2 and "--sample with a run directory ranks N of its scored trials, N from 3 to 100,000; got 2" in err
    code, _, err = nas_cli("proxies", params_run, "--space-option", "channels=4")
    assert code == 2 and "--space-option goes with --space, not with a run directory" in err


def test_the_proxy_constraint_makes_low_scorers_infeasible_before_training(tmp_path, nas_cli):
    run_dir = str(tmp_path / "screened")
    assert main(["search", *NB201, "--budget", "2", "--run-dir", run_dir, "--proxy-screen", "synflow:1e300"]) == 0
    for _, r in read_journal(run_dir):
        assert r.failure is not None and r.failure.name == "INFEASIBLE" and "synflow" in r.error
        assert "epochs_trained" not in r.metrics
    code, _, err = nas_cli("proxies", run_dir)
    assert code == 2 and "has 0 scored trial(s); ranking proxies needs at least 3" in err
    code, _, err = nas_cli("search", *NB201, "--proxy-screen", "flops:3")
    assert code == 2 and "--proxy-screen must be PROXY:MIN with PROXY one of synflow" in err


def test_a_naswot_screen_keeps_the_gelu_and_silu_networks_of_the_macro_space(tmp_path):
    """(naswot coded ReLUs only: every GELU and SiLU network of the default space scored -inf, and a screen
    ``naswot:0`` made two thirds of the space INFEASIBLE for a reason unrelated to quality.)"""
    run_dir = str(tmp_path / "macro")
    assert main(["search", "--space", "macro", "--executor", "inprocess", "--threads", "1", "--epochs", "1",
                 "--quiet", "--dataset", "digits", "--strategy", "random", "--seed", "0", "--budget", "6",
                 "--run-dir", run_dir, "--proxy-screen", "naswot:0"]) == 0
    results = read_journal(run_dir)
    assert {t.arch["activation"] for t, _ in results} == {"relu", "gelu", "silu"}  # (seed 0: 3, 2 and 1 of them)
    for t, r in results:
        assert r.ok and r.metrics["naswot"] > 0 and r.metrics["epochs_trained"] == 1, (t.arch, r.error)


def test_nas_proxies_scores_the_minibatch_a_search_s_screen_scores(tmp_path, nas_cli, monkeypatch):
    """(``nas proxies`` scaled uint8 images to [0, 1] where the search's workers normalise them per channel: a
    threshold read off it was on another scale than ``--proxy-screen``'s.) A tiny uint8 dataset, smaller than a
    minibatch: both see its whole training split, in their own order (sorted here by a pixel unique to each)."""
    import numpy as np
    import torch

    from nas.train import proxies

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (40, 3, 8, 8), dtype=np.uint8)
    x[:, 0, 0, 0] = np.arange(40) * 6
    np.savez(tmp_path / "u8.npz", x=x, y=np.arange(40) % 10)
    seen = {}
    compute, rank_against = proxies.compute, proxies.rank_against

    def screen_compute(model, x=None, y=None, **kw):
        seen.setdefault("screen", (x, y))
        return compute(model, x, y, **kw)

    def nas_proxies_rank(*args, **kw):
        seen.setdefault("nas proxies", (kw["x"], kw["y"]))
        return rank_against(*args, **kw)

    monkeypatch.setattr(proxies, "compute", screen_compute)
    monkeypatch.setattr(proxies, "rank_against", nas_proxies_rank)
    run_dir = str(tmp_path / "run")
    assert main(["search", *NB201, "--dataset", str(tmp_path / "u8.npz"),  # (the last --dataset counts)
                 "--budget", "3", "--run-dir", run_dir, "--proxy-screen", "naswot:-1e300"]) == 0
    code, _, err = nas_cli("proxies", run_dir, "--proxies", "naswot")
    assert code == 0, err
    (xs, ys), (xp, yp) = (seen[k] for k in ("screen", "nas proxies"))
    assert len(xs) == len(xp) == 30 and xs.dtype == xp.dtype == torch.float32  # (the training split: 3/4 of 40)
    assert abs(float(xs.mean())) < 0.1 and abs(float(xs.std()) - 1) < 0.1  # normalised, not in [0, 1]
    a, b = xs[:, 0, 0, 0].argsort(), xp[:, 0, 0, 0].argsort()
    assert torch.equal(xs[a], xp[b]) and torch.equal(ys[a], yp[b])
