"""Scalar logs: every numeric leaf of a metrics line becomes a TensorBoard scalar that TensorBoard reads back."""
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from selfevo.loop.scalars import ScalarLog, flatten


def test_flatten_keeps_numeric_leaves_by_dotted_name():
    metrics = {"step": 3, "reward": {"agent0": 0.5, "agent1": None}, "train": {"agent0": {"loss": 1, "skipped": False}},
               "rejected": {"format": 2}, "note": "x"}
    assert dict(flatten(metrics)) == {"step": 3.0, "reward.agent0": 0.5, "train.agent0.loss": 1.0,
                                      "rejected.format": 2.0}


def test_tensorboard_reads_the_logged_scalars(tmp_path):
    log = ScalarLog(tmp_path)
    log.log(0, {"step": 0, "reward": {"agent0": 0.25}})
    log.log(1, {"step": 1, "reward": {"agent0": 0.75}})
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward.agent0")] == [(0, 0.25), (1, 0.75)]
    assert "step" not in acc.Tags()["scalars"]


def test_wandb_without_the_extra_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    from selfevo.config import ConfigError

    with pytest.raises(ConfigError, match=r"selfevo\[wandb\]"):
        ScalarLog(tmp_path, tensorboard=False, wandb=True)
