"""Scalar logs beside ``metrics.jsonl``: TensorBoard event files (default) and, optionally, Weights & Biases.

Every numeric leaf of a step's metrics line becomes a scalar named by its dotted path (``reward.agent0``,
``train.agent1.clip_frac``, ``eval.accuracy.agent0``); ``tensorboard --logdir runs/`` shows every run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from selfevo.config import ConfigError


def flatten(metrics: dict, prefix: str = "") -> Iterator[tuple[str, float]]:
    """(dotted name, value) of every int/float leaf (bools and None left out)."""
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from flatten(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, float(value)


class ScalarLog:
    """``log(step, metrics)`` to TensorBoard (``RUN_DIR/tensorboard``) and/or W&B; ``close()`` at the end."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: bool = False, project: str = "selfevo",
                 config: dict[str, Any] | None = None):
        self.writer = self.wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                raise ConfigError("log.wandb=true needs Weights & Biases: pip install 'selfevo[wandb]'") from None
            self.wandb = wandb_module.init(project=project, name=run_dir.name, dir=str(run_dir), config=config,
                                           resume="allow")

    def log(self, step: int, metrics: dict) -> None:
        scalars = dict(flatten({k: v for k, v in metrics.items() if k != "step"}))
        if self.writer is not None:
            for name, value in scalars.items():
                self.writer.add_scalar(name, value, step)
            self.writer.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()
