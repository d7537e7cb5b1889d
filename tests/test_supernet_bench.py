"""``nas bench supernet --quick`` runs end to end and its figures are of the right kind (never how fast)."""

from __future__ import annotations

import json

from nas.cli import main


def test_the_supernet_bench_runs_and_reports_each_part(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert main(["bench", "supernet", "--quick", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for part in ("(a) rank correlation", "(b) two-stage against multi-trial", "(c) 10 sub-networks searched"):
        assert part in text
    figures = json.loads(out.read_text())
    assert [r["seed"] for r in figures["ranking"]] == [0, 1]
    for r in figures["ranking"]:
        assert -1.0 <= r["kendall"] <= 1.0 and -1.0 <= r["spearman"] <= 1.0 and len(r["archs"]) == 4
        assert all(0.0 <= a["inherited"] <= 1.0 and a["eval_seconds"] > 0 < a["epoch_seconds"] for a in r["archs"])
    for duel in figures["two_stage"]:
        assert duel["two-stage"]["training_epochs"] == duel["multi-trial"]["training_epochs"] == 2  # same compute
        assert duel["two-stage"]["trials"] == 6 and duel["multi-trial"]["trials"] == 2
    assert figures["many"]["subnetworks"] == figures["many"]["complete"] == 10 and figures["many"]["front"] >= 1
