"""benchmarks/ablations/effect_recheck.py: item-by-item agreement with the committed records (hand-worked numbers),
the settings' environment restored, and refusals."""
import os

import pytest
from helpers.ablations import load as _load

recheck = _load("effect_recheck")


def test_compare_counts_agreement_and_flips():
    # record [1, 0, 1, 0, 0], here [1, 1, 0, 0, 0]: differences [0, 1, -1, 0, 0], mean 0,
    # sd sqrt(2 / 4) = 0.707107, half = 1.959964 * 0.707107 / sqrt(5) = 0.619795
    c = recheck.compare([1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0])
    assert (c["n"], c["agree"], c["turned_right"], c["turned_wrong"]) == (5, 3, 1, 1)
    assert (c["accuracy"], c["accuracy_record"], c["diff"]) == (0.4, 0.4, 0.0)
    assert c["diff_high"] == pytest.approx(0.619795, abs=1e-6)
    assert "| base | same | 0.400 | 0.400 | 3/5 | +1/−1 |" in recheck.table({"base/same": c})


def test_compare_identical_lists_agree_everywhere_and_unequal_lengths_refuse():
    c = recheck.compare([1.0, 0.0], [1.0, 0.0])
    assert (c["agree"], c["diff_low"], c["diff_high"]) == (2, 0.0, 0.0)
    with pytest.raises(ValueError, match="2 items here, 3 in the record"):
        recheck.compare([1.0, 0.0, 1.0], [1.0, 0.0])


def test_environment_is_set_inside_and_restored_after(monkeypatch):
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    with recheck.environment({"ATEN_CPU_CAPABILITY": "default", "MKL_NUM_THREADS": "1"}):
        assert (os.environ["ATEN_CPU_CAPABILITY"], os.environ["MKL_NUM_THREADS"]) == ("default", "1")
    assert "ATEN_CPU_CAPABILITY" not in os.environ and os.environ["MKL_NUM_THREADS"] == "7"


def test_reference_is_the_base_or_a_rows_seed0_and_a_missing_row_exits():
    record = {"base": {"items": [0.0, 1.0]}, "methods": {"grpo": {"per_seed": {"0": {"items": [1.0, 1.0]}}}}}
    assert recheck.reference(record, "base") == [0.0, 1.0] and recheck.reference(record, "grpo") == [1.0, 1.0]
    with pytest.raises(SystemExit, match="no seed-0 items for row 'sage_64'"):
        recheck.reference(record, "sage_64")


def test_table_shows_a_setting_against_same_here_when_measured():
    # against the record [1, 0, 1, 0, 0]: here [1, 1, 0, 0, 0]; against `same` here [1, 1, 0, 0, 1]: 4/5 agree, +0/−1,
    # differences [0, 0, 0, 0, -1]: mean -0.2, sd sqrt(0.2) = 0.447214, half = 1.959964 * 0.447214 / sqrt(5) = 0.392
    c = recheck.compare([1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0])
    c["vs_same_here"] = recheck.compare([1.0, 1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0, 0.0])
    md = recheck.table({"base/max_batch_16": c, "base/same": recheck.compare([1.0], [1.0])})
    assert "| base | max_batch_16 | 0.400 | 0.400 | 3/5 | +1/−1 | +0.000 [-0.620, +0.620] | – (not recorded) | " \
           "4/5, +0/−1, -0.200 [-0.592, +0.192] |" in md
    assert md.rstrip().endswith("| – (not recorded) | – |")
    md = recheck.table({"base/same": {**c, "same_answers": True}, "grpo/same": {**c, "same_answers": False}})
    assert "| +0.000 [-0.620, +0.620] | the same |" in md and "| +0.000 [-0.620, +0.620] | differ |" in md


def test_the_answers_are_checked_against_the_recorded_digest_where_there_is_one():
    items = [{"correct": 1.0, "chars": 1, "answer": "a"}, {"correct": 0.0, "chars": 1, "answer": "b"}]
    digest = "3a6b2ca2823a2ec34a3e43b2bc7d2212b05a295c87d1a356e1d572f7d759f86a"  # printf 'a\n\0b' | sha256sum
    record = {"base": {"items": [1.0, 0.0], "answers_sha256": digest},
              "methods": {"grpo": {"per_seed": {"0": {"items": [1.0, 0.0]}}}}}
    assert recheck.reference_digest(record, "base") == digest and recheck.reference_digest(record, "grpo") is None
    assert recheck.same_answers(digest, items) is True
    assert recheck.same_answers(digest, [items[0], {**items[1], "answer": "c"}]) is False  # same verdicts, other text
    assert recheck.same_answers(None, items) is None
