"""benchmarks/ablations/maestro_sweep.py: the settings of a sweep, the counts and intervals on hand-worked numbers,
and the script end to end on tiny-random (its JSON, table and plot written; a second run evaluates nothing)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "ablations" / "maestro_sweep.py"
_spec = importlib.util.spec_from_file_location("ablation_maestro_sweep", SCRIPT)
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def last(covered: bool, correct: bool, parsed: bool = True) -> list[dict]:
    """One question's rounds: an earlier round (ignored) and the last one."""
    earlier = {"covered": True, "chosen_correct": True, "parsed": True}
    return [earlier, {"covered": covered, "chosen_correct": correct, "parsed": parsed}]


def test_settings_hold_the_other_sizes_and_share_a_folder():
    assert sweep.setting_of("K", 4, [2, 3, 1]) == {"N": 2, "K": 4, "R": 1}
    assert sweep.setting_dir(Path("o"), sweep.setting_of("N", 2, [2, 2, 2]), 1) == Path("o/N2-K2-R2/seed1")
    assert sweep.setting_dir(Path("o"), sweep.setting_of("R", 2, [2, 2, 2]), 1) == Path("o/N2-K2-R2/seed1")


def test_counts_read_the_last_round():
    rounds = [last(True, True), last(True, False), last(False, False), last(True, False, parsed=False),
              last(True, True)]
    assert sweep.counts(rounds) == {"n": 5, "covered": 4, "identified": 2, "correct": 2, "no_answer": 1}


def test_one_seed_gets_wilson_intervals():
    s = sweep.summarise([{"n": 5, "covered": 5, "identified": 3, "correct": 3, "no_answer": 1}])
    # Wilson 3/5: centre (0.6 + 1.96²/10) / (1 + 1.96²/5) = 0.55655, half 1.96·√(0.24/5 + 1.96²/100) / 1.76829
    # = 0.32582: [0.23072, 0.88237]; coverage 5/5: [1 - 0.43449, 1] (Wilson at k = n)
    assert s["accuracy"]["value"] == 0.6 and s["accuracy"]["method"] == "wilson"
    assert (s["accuracy"]["low"], s["accuracy"]["high"]) == (pytest.approx(0.23072, abs=1e-5),
                                                             pytest.approx(0.88237, abs=1e-5))
    assert s["identification"] == s["accuracy"]  # 3 identified of 5 covered
    assert s["coverage"]["value"] == 1.0 and s["coverage"]["high"] == 1.0
    assert s["coverage"]["low"] == pytest.approx(0.56551, abs=1e-5)
    assert s["no_answer_rate"] == 0.2
    none = sweep.summarise([{"n": 2, "covered": 0, "identified": 0, "correct": 0, "no_answer": 0}])
    assert none["identification"] is None and none["accuracy"]["value"] == 0.0


def test_several_seeds_get_the_t_interval_of_their_rates():
    seeds = [{"n": 10, "covered": 8, "identified": 5, "correct": 5, "no_answer": 0},
             {"n": 10, "covered": 8, "identified": 7, "correct": 7, "no_answer": 2},
             {"n": 10, "covered": 0, "identified": 0, "correct": 0, "no_answer": 1}]
    s = sweep.summarise(seeds)
    # accuracy 0.5, 0.7, 0.0: mean 0.4, sd √((0.01 + 0.09 + 0.16) / 2) = 0.36056, half 4.3027·0.36056/√3 = 0.89568
    acc = s["accuracy"]
    assert acc["value"] == pytest.approx(0.4) and (acc["method"], acc["seeds"]) == ("t over seeds", 3)
    assert (acc["low"], acc["high"]) == (0.0, 1.0)  # clipped
    # identification: the third seed covers nothing and is left out: 5/8, 7/8 -> mean 0.75, sd 0.17678,
    # half 12.7062·0.17678/√2 = 1.58828 -> clipped to [0, 1]
    ident = s["identification"]
    assert ident["value"] == pytest.approx(0.75) and ident["seeds"] == 2 and (ident["low"], ident["high"]) == (0, 1)
    # coverage 0.8, 0.8, 0: mean 0.53333, sd 0.46188, half 4.3027·0.46188/√3 = 1.14738
    assert s["coverage"]["value"] == pytest.approx(0.53333, abs=1e-5)
    assert s["no_answer_rate"] == pytest.approx(0.1)
    tight = sweep.summarise([{"n": 4, "covered": 4, "identified": 2, "correct": 2, "no_answer": 0}] * 2)
    assert (tight["accuracy"]["low"], tight["accuracy"]["high"]) == (0.5, 0.5)  # equal seeds: no spread


def test_table_cells():
    row = {"value": 2, "seeds": {"0": {"n": 5, "covered": 5, "identified": 3, "correct": 3, "no_answer": 1}}}
    row["summary"] = sweep.summarise(list(row["seeds"].values()))
    md = sweep.table({"N": [row]}, {"limit": 5, "benchmark": "arith", "seeds": [0], "at": [2, 2, 2],
                                    "central_adapter": None})
    assert "| 2 | 1 | 5 | 0.600 [0.231, 0.882] | 1.000 [0.566, 1.000] | 0.600 [0.231, 0.882] | 0.200 |" in md
    assert "the other sizes at N=2, K=2, R=2" in md and "### execution agents N" in md


@pytest.mark.slow
def test_sweep_end_to_end_on_tiny_random(tmp_path):
    """N ∈ {1, 2} and R ∈ {1, 2} around N=K=R=1: three evals (the point N=1, R=1 is shared), then the files; a
    second run finds every eval done and evaluates nothing; --table-only rebuilds the same JSON."""
    results = tmp_path / "results" / "maestro_sweep"
    cmd = [sys.executable, str(SCRIPT), "--sweep", "N", "R", "--N", "1", "2", "--R", "1", "2", "--at", "1", "1", "1",
           "--limit", "2", "--out", str(tmp_path / "runs"), "--results", str(results),
           "model.backbones=[tiny-random]", "model.dtype=float32", "sampling.max_new_tokens=4", "reason_tokens=4"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("+ ") == 3 and sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "N1-K1-R1", "N1-K1-R2", "N2-K1-R1"]
    data = json.loads(Path(f"{results}.json").read_text())
    assert [r["value"] for r in data["sweeps"]["N"]] == [1, 2] and [r["value"] for r in data["sweeps"]["R"]] == [1, 2]
    assert data["sweeps"]["R"][1]["setting"] == {"N": 1, "K": 1, "R": 2}
    assert all(r["seeds"]["0"]["n"] == 2 for rows in data["sweeps"].values() for r in rows)
    png = Path(f"{results}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "### rounds R" in Path(f"{results}.md").read_text()
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0 and "+ " not in again.stdout
    table_only = subprocess.run(cmd + ["--table-only"], capture_output=True, text=True, env=env, timeout=600)
    assert table_only.returncode == 0 and json.loads(Path(f"{results}.json").read_text()) == data
