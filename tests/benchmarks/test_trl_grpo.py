"""benchmarks/sweeps/trl_grpo.py (the effect sweep's trl_grpo row) resumes: a run stopped after one step and started
again ends with the adapter and step lines of a run that went straight through (tiny random model, 2 steps), and
run.json records both launches."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file

from benchmarks.sweeps import trl_grpo

TINY = ["model.backbones=[tiny-random]", "model.dtype=float32", "trainer.tasks_per_step=2", "trainer.prompt_reuse=2",
        "trainer.micro_batch=2", "sampling.max_new_tokens=6", "data.limit=8"]


def _run(out, steps):
    trl_grpo.main(["--preset", "cpu-learn", *TINY, f"trainer.max_steps={steps}", "seed=0", f"output_dir={out}"])


def _steps(out):
    return [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]


class _Verdict:
    def __init__(self, text):  # the tiny random model never answers right: a reward that depends on the answer
        self.score = float(len(text) % 2)


@pytest.mark.slow
def test_a_stopped_trl_run_continues_where_it_stopped(tmp_path, monkeypatch):
    # importing trl sets VLLM_LOGGING_LEVEL=ERROR in os.environ (trl/_compat.py) unless it is set: set it here, so
    # that it is gone again afterwards and vLLM servers started by later tests still log at their default level
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", os.environ.get("VLLM_LOGGING_LEVEL", "INFO"))
    pytest.importorskip("trl")
    monkeypatch.setattr("selfevo.verifiers.verify", lambda task, text: _Verdict(text))
    _run(tmp_path / "straight", 2)
    _run(tmp_path / "stopped", 1)
    first = trl_grpo.last_checkpoint(tmp_path / "stopped" / "trainer")
    assert trl_grpo.checkpoint_step(first) == 1
    one_step = load_file(str(first / "adapter_model.safetensors"))
    with (tmp_path / "stopped" / "metrics.jsonl").open("a") as f:  # a line written after the checkpoint: dropped
        f.write(json.dumps({"step": 1}) + "\n")
    _run(tmp_path / "stopped", 2)
    assert _steps(tmp_path / "stopped") == _steps(tmp_path / "straight") == [0, 1]
    a, b = (load_file(str(tmp_path / d / trl_grpo.ADAPTER / "adapter_model.safetensors"))
            for d in ("straight", "stopped"))
    assert a.keys() == b.keys() and a
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-6)
    assert any(not torch.equal(one_step[k], b[k]) for k in b)  # the second step trained
    assert [d.name for d in (tmp_path / "stopped" / "trainer").glob("checkpoint-*")] == ["checkpoint-2"]
    launches = json.loads((tmp_path / "stopped" / "run.json").read_text())  # both launches, as selfevo run records
    assert len(launches) == 2 and {x["dtype"] for x in launches} == {"float32"} and launches[0]["machine"]["cpu"]


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert trl_grpo.last_checkpoint(tmp_path / "missing") is None
    (tmp_path / "checkpoint-3").mkdir()  # no trainer_state.json: an interrupted save
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    assert trl_grpo.last_checkpoint(tmp_path).name == "checkpoint-2"
    assert trl_grpo.checkpoint_step(None) == 0


@pytest.mark.parametrize("agg, loss_type", [("token_mean", "dapo"), ("seq_mean_token_mean", "grpo")])
def test_trls_loss_type_follows_loss_agg(tmp_path, agg, loss_type):
    cfg = trl_grpo.preset_config("cpu-learn", [*TINY, f"trainer.loss_agg={agg}"])
    assert trl_grpo.grpo_config(cfg, tmp_path).loss_type == loss_type


def test_a_loss_agg_trl_lacks_is_refused(tmp_path):
    cfg = trl_grpo.preset_config("cpu-learn", [*TINY, "trainer.loss_agg=seq_mean_token_sum"])
    with pytest.raises(SystemExit, match="no TRL loss_type"):
        trl_grpo.grpo_config(cfg, tmp_path)
