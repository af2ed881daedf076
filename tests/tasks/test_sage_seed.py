"""The SAGE seed set (selfevo.tasks.sage_seed): Table 5 counts and unique ids, the verifiers its items carry, their
validation, one set per seed, count overrides, and the training splits its questions come from."""
from __future__ import annotations

import pytest

from helpers.paths import DATA, needs_data
from selfevo.tasks import load_tasks, sage_seed_set
from selfevo.tasks.sage_seed import SAGE_COUNTS, sage_part_counts
from selfevo.verifiers.validate import explain_item, validate_item


@pytest.fixture(scope="module")
def seeds():
    return sage_seed_set(seed=0, data_root=DATA)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@needs_data
def test_seed_set_has_table5_counts_and_unique_ids(seeds):
    assert SAGE_COUNTS == {"math": 156, "gsm8k": 148, "humaneval_substitute": 87, "mbpp": 109}
    assert sage_part_counts(seeds) == SAGE_COUNTS and len(seeds) == 500
    assert len({t.id for t in seeds}) == 500
    splits = {(t.meta["sage_part"], t.meta["benchmark"], t.meta["split"]) for t in seeds}
    assert splits == {("math", "math", "train"), ("gsm8k", "gsm8k", "train"),
                      ("humaneval_substitute", "mbpp_full", "validation"), ("mbpp", "mbpp", "train")}


@needs_data
def test_seed_set_items_carry_their_verifiers(seeds):
    for task in seeds:
        if task.domain == "code":
            assert task.tests.strip() and task.entry_point and task.meta["reference_solution"]
            assert task.meta["reference_solution"] == task.meta["solution"]
        else:
            assert task.domain == "math" and task.reference


@pytest.mark.slow
@needs_data
def test_seed_code_items_validate(seeds):
    code = [t for t in seeds if t.domain == "code"]
    sample = [t for t in code if t.meta["sage_part"] == "mbpp"][:5] + \
        [t for t in code if t.meta["sage_part"] == "humaneval_substitute"][:5]
    assert len(sample) == 10
    assert [explain_item(t) for t in sample] == [""] * 10


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@needs_data
def test_seed_math_items_validate(seeds):
    assert all(validate_item(t) is None for t in seeds if t.domain == "math")


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@needs_data
def test_seed_set_is_deterministic_for_a_seed(seeds):
    again = sage_seed_set(seed=0, data_root=DATA)
    assert [t.id for t in again] == [t.id for t in seeds]
    other = sage_seed_set(seed=1, data_root=DATA)
    assert {t.id for t in other} != {t.id for t in seeds} and sage_part_counts(other) == SAGE_COUNTS


@needs_data
def test_seed_set_counts_override_and_errors():
    small = sage_seed_set(seed=0, data_root=DATA, counts={"math": 3, "gsm8k": 2, "humaneval_substitute": 0,
                                                          "mbpp": 1})
    assert sage_part_counts(small) == {"math": 3, "gsm8k": 2, "mbpp": 1}
    big = sage_seed_set(seed=0, data_root=DATA, counts={"math": 0, "gsm8k": 0, "humaneval_substitute": 500,
                                                        "mbpp": 0})
    assert len(big) == 90  # all of MBPP validation (logged)
    with pytest.raises(ValueError, match="unknown part"):
        sage_seed_set(counts={"humaneval": 87})
    with pytest.raises(ValueError, match="integers >= 0"):
        sage_seed_set(counts={"math": -1})


@needs_data
def test_seed_questions_are_the_training_items(seeds):
    mbpp = {t.id: t for t in load_tasks("mbpp", "train", data_root=DATA)}
    for task in seeds:
        if task.meta["sage_part"] == "mbpp":
            assert task.question == mbpp[task.id].question
