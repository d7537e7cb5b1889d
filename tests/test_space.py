"""The SearchSpace API, without Ray: declaration checks, sampling, one-decision mutation, encoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.core.space import InvalidArchitecture, InvalidSpace, SearchSpace, Task
from nas.core.types import arch_hash, arch_key

TASK = Task(input_shape=(1, 8, 8), num_classes=10)


class Declared(SearchSpace):
    def __init__(self, dims):
        self._dims = dims

    def dims(self):
        return self._dims

    def build(self, arch, task):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, task.num_classes))


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ({}, "declares no decisions"),
        ({"width": []}, "'width' has no options"),
        ([("a", [1, 2]), ("a", [3])], "'a' is declared twice"),
        ({"a": [1, 1, 2]}, "'a' repeats an option"),
        # (equal in Python, not by repr: one index for both, so encode, decode and mutate mixed them up)
        ({"a": [1, True]}, "'a' repeats an option: 1 and True are equal in Python"),
        ({"a": [0.0, -0.0]}, "'a' repeats an option: 0.0 and -0.0 are equal in Python"),
        ({"a": [[1], [1.0]]}, r"'a' repeats an option: \[1\] and \[1.0\] are equal in Python"),
        ({"a": "abc"}, "needs a list of options"),
        ({"": [1]}, "non-empty strings"),
        # the journal records architectures as JSON: these ended a search in a TypeError from its writer (or, for
        # nan and inf, were journaled as null and could not be resumed)
        ({"a": [1, 10**40]}, "'a' has the option 10000000000000000000000000000000000000000, which is not JSON data"),
        ({"a": [1.0, float("nan")]}, "'a' has the option nan, which is not JSON data"),
        ({"a": [1.0, float("inf")]}, "'a' has the option inf, which is not JSON data"),
        ({"a": [b"x", b"y"]}, r"'a' has the option b'x', which is not JSON data"),
        ({"a": [1, print]}, "'a' has the option <built-in function print>, which is not JSON data"),
        ({"a": [{"k": [1, {2}]}, 3]}, r"'a' has the option \{'k': \[1, \{2\}\]\}, which is not JSON data"),
        # a tuple came back from the journal as a list no option equals: the run could not be resumed
        ({"shape": [(8, 8), (16, 8)]}, r"'shape' has the option \(8, 8\), which holds a tuple: the run's journal "
                                       r"records every architecture as JSON, where a tuple comes back as a list that "
                                       r"no option equals \(a resume could not find it\); give it as a list, \[8, 8\]"),
        ({"a": [{"k": (1, [2])}]}, r"which holds a tuple: .* give it as a list, \{'k': \[1, \[2\]\]\}"),
        ({"a": [(1, {2})]}, r"'a' has the option \(1, \{2\}\), which is not JSON data"),
    ],
)
def test_broken_declarations_fail_with_a_clear_error(dims, message):
    with pytest.raises(InvalidSpace, match=message):
        _ = Declared(dims).decisions


def test_options_of_json_data_pass():
    options = [None, True, "x", 2**63 - 1, 0.5, [1, "y"], [2, 3], {"k": [1.5]}]
    assert Declared({"a": options}).decisions["a"] == tuple(options)


def test_sample_is_valid_and_seeded(toy_space):
    a = [toy_space.sample(np.random.default_rng(3)) for _ in range(2)]
    assert a[0] == a[1]
    for _ in range(50):
        toy_space.validate(toy_space.sample(np.random.default_rng()))


def test_mutate_changes_exactly_one_decision(toy_space):
    rng = np.random.default_rng(0)
    for _ in range(500):
        arch = toy_space.sample(rng)
        child = toy_space.mutate(arch, rng)
        toy_space.validate(child)
        assert sum(arch[k] != child[k] for k in arch) == 1


def test_mutate_reaches_every_option():
    space = Declared({"a": [0, 1, 2, 3]})
    rng = np.random.default_rng(0)
    children = {space.mutate({"a": 0}, rng)["a"] for _ in range(200)}
    assert children == {1, 2, 3}


def test_mutate_skips_single_option_decisions():
    space = Declared({"fixed": ["x"], "free": [1, 2]})
    child = space.mutate({"fixed": "x", "free": 1}, np.random.default_rng(0))
    assert child == {"fixed": "x", "free": 2}


def test_encode_decode_round_trip(toy_space):
    rng = np.random.default_rng(1)
    for _ in range(100):
        arch = toy_space.sample(rng)
        assert toy_space.decode(toy_space.encode(arch)) == arch
    with pytest.raises(InvalidArchitecture, match="expected 5 actions"):
        toy_space.decode([0])
    with pytest.raises(InvalidArchitecture, match="outside 0..4"):
        toy_space.decode([0, 0, 0, 0, 9])


def test_validate_names_the_bad_value(toy_space):
    with pytest.raises(InvalidArchitecture, match="'d0' has value 7; allowed: \\[0, 1, 2, 3, 4\\]"):
        toy_space.validate({"d0": 7, "d1": 0, "d2": 0, "d3": 0, "d4": 0})
    with pytest.raises(InvalidArchitecture, match="missing \\['d4'\\], unknown \\['zz'\\]"):
        toy_space.validate({"d0": 0, "d1": 0, "d2": 0, "d3": 0, "zz": 0})


def test_format_parse_round_trip(toy_space):
    arch = toy_space.sample(np.random.default_rng(0))
    assert toy_space.parse(toy_space.format(arch)) == arch


def test_arch_key_is_order_free_and_hash_stable():
    assert arch_key({"a": 1, "b": "x"}) == arch_key({"b": "x", "a": 1})
    assert arch_hash({"a": 1, "b": "x"}) == arch_hash({"b": "x", "a": 1})
    assert arch_hash({"a": 1}) != arch_hash({"a": 2})


def test_check_build_reports_a_raising_build():
    class Broken(Declared):
        def build(self, arch, task):
            raise RuntimeError("no such layer")

    with pytest.raises(InvalidSpace, match="Broken.build failed for a=1: RuntimeError: no such layer"):
        Broken({"a": [1]}).check_build({"a": 1}, TASK)


def test_check_build_rejects_a_non_module():
    class NotAModule(Declared):
        def build(self, arch, task):
            return "a string"

    with pytest.raises(InvalidSpace, match="must return a torch.nn.Module, got str"):
        NotAModule({"a": [1]}).check_build({"a": 1}, TASK)


class Own(Declared):
    """A space with methods of its own that a careless user got wrong (``how`` says which)."""

    def __init__(self, how):
        super().__init__({"h": [8, 16]})
        self.how = how

    def sample(self, rng):
        if self.how == "sample-list":
            return [8]
        if self.how == "sample-outside":
            return {"h": 12}
        if self.how == "sample-raises":
            raise RuntimeError("no sampling today")
        return super().sample(rng)

    def format(self, arch):
        if self.how == "format-raises":
            raise RuntimeError("format broken")
        return 42 if self.how == "format-int" else super().format(arch)


@pytest.mark.parametrize(("how", "message"), [
    # (a list was "cannot convert dictionary update sequence element #0" at the first ask; a raising format() killed
    # the search at its first best; one returning 42 filled the results' arch column with it)
    ("sample-list", r"space Own's sample\(\) returned list \[8\]; an architecture is a dict of each decision's option"),
    ("sample-outside", r"space Own's sample\(\) returned an architecture outside its dims\(\): decision 'h' has value "
                       r"12; allowed: \[8, 16\]"),
    ("sample-raises", r"^no sampling today$"),  # (as it is: the CLI names the user's file and line)
    ("format-raises", r"^format broken$"),
    ("format-int", r"space Own's format\(\) returned int 42, not a string"),
])
def test_a_spaces_own_sample_and_format_are_tried_before_anything_is_made(tmp_path, how, message):
    import nas
    from nas.core.spec import check_space
    from nas.train.simple import scored

    error = RuntimeError if how.endswith("raises") else nas.InvalidSpace  # (as mutate()'s: a plain ValueError)
    with pytest.raises(error, match=message):
        check_space(Own(how))
    with pytest.raises(error, match=message):
        nas.search(Own(how), "random", budget=2, executor="inprocess", data=None, train=scored(lambda a: 1.0),
                   run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    check_space(Own("fine"))


class Counting(Declared):
    """A space whose own sample() keeps state of its own: each draw is numbered."""

    def __init__(self):
        super().__init__({"h": [8, 16]})
        self.draws = 0

    def sample(self, rng):
        self.draws += 1
        return super().sample(rng)


def test_trying_a_spaces_own_sample_up_front_leaves_its_state_alone():
    """(The check used up the space's first draw: it never became a trial.)"""
    from nas.core.spec import check_space

    space = Counting()
    check_space(space)
    assert space.draws == 0
