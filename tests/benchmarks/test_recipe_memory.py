"""benchmarks/recipe_memory.py: a phase's peak resident size is credited to that phase alone, and a recipe step on
the tiny model is measured phase by phase with the loop's own methods restored afterwards."""
import json
import platform
import subprocess
import sys

import pytest

import helpers.golden_engine  # noqa: F401  (registers engine "golden")
from benchmarks import recipe_memory as rm

pytestmark = pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self")


def test_a_peak_counts_for_the_phase_it_happened_in():
    peaks = rm.PhasePeaks()
    with peaks.phase("update"):
        block = bytearray(300 * 2**20)
        block[::4096] = b"\x01" * len(block[::4096])  # touch every page: resident
        del block
    with peaks.phase("rollout"):
        with peaks.phase("reward"):  # nested: the inner phase's own peak
            small = bytearray(20 * 2**20)
            small[::4096] = b"\x01" * len(small[::4096])
            del small
    got = peaks.finish()
    assert got["phases"]["update"] - got["phases"]["rollout"] > 0.25  # GiB: the 300 MiB block is update's alone
    assert got["phases"]["reward"] < got["phases"]["update"] - 0.25
    assert got["peak_gib"] == max(got["phases"].values())
    assert list(got["phases"]) == [p for p in rm.PHASES if p in got["phases"]]


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_one_tiny_step_is_measured_by_phase(tmp_path):
    from selfevo.loop.loop import Loop

    methods = {k: v for k, v in vars(Loop).items() if callable(v)}
    tasks = tmp_path / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "domain": "math", "question": f"What is {i} + 1?",
                                         "reference": str(i + 1)}) + "\n" for i in range(4)))
    got = rm.measure("grpo", ["model.backbones=[tiny-random]", "model.dtype=float32", "engine.name=golden",
                              "trainer.tasks_per_step=2", "trainer.prompt_reuse=2", f"data.tasks=[{tasks}]"])
    assert {"load", "rollout", "reward", "update", "checkpoint", "step"} <= set(got["phases"])
    assert "eval" not in got["phases"]  # grpo's cpu preset evaluates nothing in the loop
    assert all(v > 0 for v in got["phases"].values())
    assert got["peak_gib"] == max(got["phases"].values())
    assert {k: v for k, v in vars(Loop).items() if callable(v)} == methods  # the loop is left as it was
    assert "update" in rm.table({"grpo": got}).splitlines()[0]


def test_a_failed_recipe_loses_no_other_row_and_each_row_is_saved_when_it_is_measured(monkeypatch):
    """The rows are saved after every recipe (a run killed later keeps them); a failure is recorded, the next recipe
    still runs, and the script ends with a one-line error naming the failures."""
    row = {"phases": {"update": 1.5}, "peak_gib": 1.5}

    real_run = subprocess.run

    def child(cmd, **kw):
        if "--child" not in cmd:
            return real_run(cmd, **kw)  # machine() asks the system
        recipe = cmd[cmd.index("--child") + 1]
        if recipe == "sage":
            return subprocess.CompletedProcess(cmd, -9, "", "")  # killed: no stderr at all
        return subprocess.CompletedProcess(cmd, 0, json.dumps(row) + "\n", "")

    saved = []
    monkeypatch.setattr(rm.subprocess, "run", child)
    monkeypatch.setattr(rm, "save", lambda name, result: saved.append(json.loads(json.dumps(result))))
    monkeypatch.setattr(sys, "argv", ["recipe_memory.py", "--recipes", "comas", "sage", "grpo"])
    with pytest.raises(SystemExit, match="sage failed"):
        rm.main()
    assert [sorted(s["recipes"]) for s in saved] == [["comas"], ["comas"], ["comas", "grpo"]]
    assert saved[-1]["failed"] == {"sage": "exit code -9: exit code -9"}


def test_overrides_after_the_recipe_list_are_overrides_and_an_unknown_recipe_is_one_line(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(rm.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(
        cmd, 0, '{"phases": {"update": 1.0}, "peak_gib": 1.0}\n', ""))
    monkeypatch.setattr(rm, "save", lambda name, result: None)
    monkeypatch.setattr(sys, "argv", ["recipe_memory.py", "--recipes", "grpo", "model.dtype=float32"])
    rm.main()
    assert calls[0][-3:] == ["--child", "grpo", "model.dtype=float32"]
    monkeypatch.setattr(sys, "argv", ["recipe_memory.py", "--recipes", "gpro"])
    with pytest.raises(SystemExit) as exc:
        rm.main()
    assert exc.value.code == 2 and "unknown recipe 'gpro'" in capsys.readouterr().err
