"""benchmarks/clpo_packing.py: the timed path (the layouts updated on a real model, interleaved after a warm-up round)
writes what the count-only path counts, on a clock the test moves; a chained selection's slate runs fewer positions
by its shared prompt."""
import json
import sys
import types

import pytest

from benchmarks import clpo_packing as cp
from benchmarks import common

SHAPES = ["--slates", "2", "--rows", "2", "--prompt", "12", "--rationale", "4", "--decision", "2",
          "--candidates", "2"]


@pytest.mark.slow  # a benchmark script's test, four updates of tiny-random: not needed for a quick check
def test_timed_layouts_write_medians_and_the_counted_positions(monkeypatch, tmp_path):
    """Each update takes 1 s more than the one before on the test's clock: the warm-up triple 1, 2 and 3 s, then
    before 4 and 7 s, by_row_prompt 5 and 8 s, clpo 6 and 9 s: medians 5.5 and 7.5, ratios to before 6/4 and 9/7,
    to by_row_prompt 6/5 and 9/8 (median of two: their mean)."""
    clock = [0.0]
    ticks = iter(range(1, 100))

    def perf_counter():
        return clock[0]

    real_update = cp.PolicyStore.update

    def update(self, agent, batch, loss_fn):
        out = real_update(self, agent, batch, loss_fn)
        clock[0] += next(ticks)
        return out

    monkeypatch.setattr(cp, "MODEL", "tiny-random")
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(cp, "time", types.SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(cp.PolicyStore, "update", update)
    monkeypatch.setattr(sys, "argv", ["clpo_packing.py", *SHAPES, "--count-only"])
    cp.main()
    counted = json.loads((tmp_path / "clpo_packing_positions.json").read_text())
    monkeypatch.setattr(sys, "argv", ["clpo_packing.py", *SHAPES, "--repeats", "2", "--dtype", "float32"])
    cp.main()
    out = json.loads((tmp_path / "clpo_packing.json").read_text())
    assert out["layouts"]["before"]["all_s"] == [4.0, 7.0] and out["layouts"]["clpo"]["all_s"] == [6.0, 9.0]
    assert out["layouts"]["before"]["median_s"] == 5.5 and out["layouts"]["clpo"]["median_s"] == 7.5
    assert out["time_ratio"] == round((6 / 4 + 9 / 7) / 2, 3)
    assert out["slate_prefix_time_ratio"] == round((6 / 5 + 9 / 8) / 2, 3)
    for name in ("before", "by_row_prompt", "clpo"):  # the timed path counts what the count-only path counts
        assert out["layouts"][name]["positions"] == counted["positions"][name]
    assert out["positions_ratio"] == counted["positions_ratio"] and out["dtype"] == "float32"


def test_a_chained_slate_counts_fewer_positions_by_its_shared_prompt(monkeypatch, tmp_path):
    """The chained selection's rows (each sample a rationale row and a decision row with the rationale given), a
    prompt long beside the rationales: by the slate's prompt fewer token positions than by each row's prompt, in
    the update and the reference's pass (with a short prompt the optimizer keeps the rows' own prompts); in
    the single-stage selection every row of a slate has the slate's prompt, so the two layouts are one."""
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["clpo_packing.py", *SHAPES, "--prompt", "60", "--candidates", "3", "--count-only",
                                      "--chained"])
    cp.main()
    chained = json.loads((tmp_path / "clpo_packing_positions_chained.json").read_text())
    assert chained["positions"]["clpo"] < chained["positions"]["by_row_prompt"] < chained["positions"]["before"]
    assert chained["reference_positions"]["clpo"] < chained["reference_positions"]["by_row_prompt"]
    assert chained["rows_in_update"] == 2 * 2 * 2 + 2 * 2 * 3  # two rows a sample, three candidate rows a decision
    # GRPO's or SFT's pass over a slate's four rows (one micro-batch): by each row's prompt the rationale rows pack
    # (60 + 4 + 4) and each decision row (60 + 4 + 6 given, + 2) runs alone: 3 rows of width 72; by the slate's
    # prompt one row: 60, the rationale rows' 4 + 4, the decision rows' 12 + 12 (rationale, given, number) = 92
    assert chained["selector_positions"] == {"by_row_prompt": 2 * 3 * 72, "by_slate_prefix": 2 * 92}
    monkeypatch.setattr(sys, "argv", ["clpo_packing.py", *SHAPES, "--count-only"])
    cp.main()
    single = json.loads((tmp_path / "clpo_packing_positions.json").read_text())
    assert single["positions"]["clpo"] == single["positions"]["by_row_prompt"] and single["slate_prefix_ratio"] == 1.0
    # a slate's rows have one prompt (12): one packed row of 12 + 6 + 6 per slate either way
    assert single["selector_positions"] == {"by_row_prompt": 2 * 24, "by_slate_prefix": 2 * 24}
