"""The run directory (selfevo.loop.rundir): a fresh run refuses a directory that holds one; opening it drops the log
lines of steps not checkpointed, writes config.yaml and records the launch with the command line it is given; log
lines, recipe files and adapters of a step (the checkpoint's own write is tested in test_faults.py)."""
import json
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from selfevo.interaction import Episode
from selfevo.loop import RunCfg
from selfevo.loop.checkpoint import CheckpointError
from selfevo.loop.rundir import RunDir, record_launch, resume_hint
from selfevo.types import Task


def config(tmp_path, **trainer):
    cfg = OmegaConf.structured(RunCfg)
    cfg.output_dir, cfg.log.tensorboard = str(tmp_path / "run"), False
    for key, value in trainer.items():
        cfg.trainer[key] = value
    return cfg


def test_a_fresh_run_starts_at_step_0_and_refuses_a_directory_that_holds_a_run(tmp_path):
    run = RunDir(config(tmp_path))
    assert run.resume(store=None) == (0, {})
    (run.path / "checkpoint").mkdir(parents=True)
    (run.path / "checkpoint" / "state.json").write_text('{"step": 3}')
    with pytest.raises(CheckpointError, match="already holds a run: pass resume=true"):
        run.resume(store=None)


def test_open_drops_steps_not_checkpointed_writes_the_config_and_records_the_command_line(tmp_path):
    run = RunDir(config(tmp_path))
    run.path.mkdir(parents=True)
    (run.path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n')
    run.open(first_step=2, dtype="float32", command_line=["selfevo", "run", "comas", "seed=3"])
    assert (run.path / "metrics.jsonl").read_text() == '{"step": 0}\n{"step": 1}\n'
    assert OmegaConf.load(run.path / "config.yaml").output_dir == str(run.path)
    (launch,) = json.loads((run.path / "run.json").read_text())
    assert launch["argv"] == ["selfevo", "run", "comas", "seed=3"] and launch["dtype"] == "float32"
    run.close()


def test_only_the_main_process_writes(tmp_path):
    run = RunDir(config(tmp_path), main=False)
    run.open(first_step=0, dtype="float32")
    assert not run.path.exists()
    run.close()


def test_record_launch_appends_and_defaults_to_this_process_argv(tmp_path):
    record_launch(tmp_path)
    record_launch(tmp_path, command_line=["python", "examples/ttrl.py"])
    first, second = json.loads((tmp_path / "run.json").read_text())
    assert first["argv"] == sys.argv and second["argv"] == ["python", "examples/ttrl.py"]
    for launch in (first, second):
        assert {"time", "cwd", "git_commit", "packages", "world_size", "dtype", "machine"} <= set(launch)
        assert "torch" in launch["packages"] and launch["machine"]["python"]


class Store:
    """Records which adapters it is asked to save and the checkpoint it writes."""

    def __init__(self):
        self.saved = []

    def save_adapter(self, agent, path):
        self.saved.append(str(path.relative_to(path.parents[2])))


def test_write_step_logs_files_adapters_then_the_checkpoint(tmp_path, monkeypatch):
    from selfevo.loop import checkpoint

    cfg = config(tmp_path, max_steps=4, save_adapters_every=2)
    run, store, saved = RunDir(cfg), Store(), []
    monkeypatch.setattr(checkpoint, "save", lambda path, st, step, state, files: saved.append((step, state, files)))
    run.open(first_step=0, dtype="float32")
    episode = Episode(Task(id="t", domain="math", question="q", reference="1"))
    for step in range(4):
        run.write_step(step, [episode], {"step": step, "reward": 0.5}, store, ["a0"], {"n": step}, {"pool.txt": "x"})
    lines = [json.loads(x) for x in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": s, "reward": 0.5} for s in range(4)]
    assert [json.loads(x)["step"] for x in (run.path / "episodes.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    assert (run.path / "pool.txt").read_text() == "x"
    assert store.saved == ["adapters/step_1/a0", "adapters/step_3/a0", "adapters/final/a0"]
    assert [(s, st["n"], st["config"]["output_dir"], f) for s, st, f in saved] == [
        (s, s, str(run.path), {"pool.txt": "x"}) for s in range(4)]
    run.close()


def test_a_failed_write_says_how_to_go_on(tmp_path, monkeypatch):
    from selfevo.loop import checkpoint

    run = RunDir(config(tmp_path))
    run.open(first_step=0, dtype="float32")

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", full)
    with pytest.raises(CheckpointError, match=r"could not write step 1 .*\(No space left on device\); the checkpoint "
                                              r"of step 0 is intact: rerun with resume=true to redo step 1"):
        run.write_step(1, [], {"step": 1}, SimpleNamespace(), [], None, None)
    assert resume_hint(0) == "no step was checkpointed: rerun without resume=true"
    run.close()
