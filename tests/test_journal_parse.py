"""The journal's fast parsing path keeps every check of the slow one, and bulk_load(freeze=True) freezes."""

from __future__ import annotations

import gc
import json

import pytest

from nas.core.types import Outcome, Result, Trial, TrialState
from nas.run.journal import JournalWriter, bulk_load, read_records


def journal(tmp_path, *extra_lines):
    path = tmp_path / "trials.jsonl"
    with JournalWriter(path) as w:
        t = Trial(0, {"a": 1})
        w.write_submit(t)
        w.write_results([(t, Result(0, Outcome.COMPLETE, score=0.5))])
    with open(path, "a") as f:
        f.writelines(line + "\n" for line in extra_lines)
    return path


def test_records_of_a_newer_version_keep_their_known_fields(tmp_path):
    newer = {"kind": "result", "trial": {"trial_id": 1, "arch": {"a": 2}, "future": 1},
             "result": {"trial_id": 1, "state": "FAILED", "error": "x", "also_future": [1]}}
    records = list(read_records(journal(tmp_path, json.dumps(newer))))
    assert [r.kind for r in records] == ["submit", "result", "result"]
    assert records[2].trial == Trial(1, {"a": 2}) and records[2].result.state is TrialState.FAILED


T = '"trial":{"trial_id":1,"arch":{"a":1}}'
R = '"result":{"trial_id":1,"outcome":"COMPLETE","score":0.5'


@pytest.mark.parametrize(("line", "why"), [
    ('{"kind":"result","trial":{"trial_id":1,"arch":{}},"result":{"trial_id":1,"state":"DONE"}}',
     "state 'DONE' is neither COMPLETE nor FAILED"),  # a format-2 record
    ('{"kind":"result","trial":{"trial_id":1,"arch":{}},"result":{"trial_id":1,"outcome":"DONE"}}',
     "result.outcome: Invalid enum value 'DONE'"),
    ('{"kind":"result","trial":{"trial_id":1,"arch":{}},"result":{"trial_id":2,"state":"FAILED"}}',
     "result.trial_id: a result of trial 2 filed under trial 1"),
    ('{"kind":"submit","trial":{"trial_id":true,"arch":{}}}', "trial.trial_id: Expected `int`, got `bool`"),
    ('{"kind":"submit","trial":{"arch":{}}}', "trial: Object missing required field `trial_id`"),
    ('{"kind":"submit","trial":[1]}', "expected an object"),
    ('["submit"]', "expected an object"),
    # wrongly typed fields of valid JSON, and numbers out of range: one line naming the field
    ('{"kind":"result",' + T + ',"result":{"trial_id":1,"outcome":"COMPLETE","score":"0.9"}}',
     r"result.score: Expected `float \| null`, got `str`"),
    ('{"kind":"submit","trial":{"trial_id":1,"arch":[1,2]}}', "trial.arch: Expected `object`, got `array`"),
    ('{"kind":"result",' + T + ',' + R + ',"history":"abc"}}', "result.history: Expected `array`, got `str`"),
    ('{"kind":"result",' + T + ',' + R + ',"history":[1]}}', r"result.history\[0\]: Expected `object`, got `int`"),
    ('{"kind":"result",' + T + ',' + R + ',"epoch":-3}}', "result.epoch: Expected `int` >= 0"),
    ('{"kind":"result",' + T + ',' + R + ',"start_time":1e999}}', "result.start_time: Number out of range"),
    ('{"kind":"submit","trial":{"trial_id":100000000000000000000000,"arch":{}}}',
     "trial.trial_id: Expected `int` <= 9223372036854775807"),
    ('{"kind":"result",' + T + ',' + R + ',"metrics":[]}}', "result.metrics: Expected `object`, got `array`"),
    ('{"kind":"result",' + T + ',' + R + ',"failure":"ERROR"}}', "a FAILED result needs a failure kind"),
    ('{"kind":"report",' + T + ',"report":{"trial_id":1,"epoch":"2"}}', "report.epoch: Expected `int`, got `str`"),
    ('{"kind":"result",' + T + ',"result":{"trial_id":1,"outcome":"COMPLETE","score":null}}',
     "result.score: a COMPLETE result carries a score, got null"),
    ('{"kind":"result",' + T + ',"result":{"trial_id":1,"outcome":"STOPPED"}}',
     "result.score: a STOPPED result carries a score, got null"),
    ('{"kind":"report",' + T + '}', "Object missing required field `report`"),
])
def test_a_wrong_shaped_line_names_the_file_the_line_and_the_field(tmp_path, line, why):
    path = journal(tmp_path, line, line)  # (not the last line: a torn last line is cut, not an error)
    with pytest.raises(ValueError, match=rf"trials.jsonl line 3 .*{why}") as info:
        list(read_records(path))
    assert "\n" not in str(info.value)


def test_bulk_load_freezes_what_it_read_only_when_asked(tmp_path):
    path = journal(tmp_path)
    gc.unfreeze()
    with bulk_load():
        list(read_records(path))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    try:
        with bulk_load(freeze=True):
            records = list(read_records(path))
        assert gc.isenabled() and gc.get_freeze_count() > 0 and len(records) == 2
    finally:
        gc.unfreeze()
