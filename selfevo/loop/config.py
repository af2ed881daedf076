"""Config sections every recipe shares: the run (seed, output dir, resume, n_agents, model, engine, sampling), the
trainer (schedule, optimizer, learning rate: :class:`~selfevo.optimizers.trainer.TrainerCfg`, declared beside the
optimizers that read it), the data (``data.tasks``) and periodic held-out evaluation.

A recipe's config (``CoMASCfg``, ...) subclasses :class:`RunCfg` and adds its own sections (``protocol``,
``reward``, ...); the loop kit (:class:`selfevo.loop.Loop`) reads only these common keys.
"""
from __future__ import annotations

from dataclasses import dataclass

from selfevo.config import ConfigError, EngineCfg, ModelCfg, SamplingCfg, opt
from selfevo.optimizers.trainer import TrainerCfg, parse_logprob_temperature


@dataclass
class DataCfg:
    tasks: list[str] = opt([], "training tasks: registered benchmarks ('gsm8k', 'math:train') or JSONL files of "
                               "tasks; empty: the recipe's own training set")
    limit: int = opt(0, "keep the first n tasks of each data.tasks entry (0: all)", ge=0)
    source: str = opt("local", "where benchmarks come from: local files (the hub where none exist) or the HF hub",
                      choices=("local", "hub"))
    data_root: str | None = opt(None, "folder of local benchmark files, then the only place read (default: "
                                      "$SELFEVO_DATA, the cache of `selfevo prepare data`, ../shared/data)")


@dataclass
class EvalCfg:
    every: int = opt(0, "evaluate every agent on held-out tasks every k steps (0: never)", ge=0)
    at_start: bool = opt(False, "also evaluate before the first step (logged as eval_start)")
    tasks: list[str] = opt(["gsm8k:test"], "held-out tasks (benchmarks or JSONL files)")
    limit: int = opt(50, "held-out tasks used (first n of each entry)", ge=1)
    max_new_tokens: int = opt(256, "answer length of an evaluation", ge=1)
    temperature: float = opt(0.0, "sampling temperature of an evaluation (0: greedy)", ge=0)


@dataclass
class LogCfg:
    tensorboard: bool = opt(True, "write TensorBoard event files to RUN_DIR/tensorboard (tensorboard --logdir runs/)")
    wandb: bool = opt(False, "also log to Weights & Biases (extra [wandb])")
    wandb_project: str = opt("selfevo", "the W&B project", nonempty=True)


@dataclass
class RunCfg:
    recipe: str = opt("", "the recipe this config belongs to (set by each recipe)")
    seed: int = opt(0, "seed of everything: adapters, data order, request seeds", ge=0)
    output_dir: str = opt("runs/run", "run directory: config, logs, checkpoint, adapters", nonempty=True)
    resume: bool = opt(False, "continue the run in output_dir from its checkpoint")
    n_agents: int = opt(4, "number of agents (one LoRA adapter each)", ge=1)
    model: ModelCfg = opt(ModelCfg, "backbones (agent i uses backbones[i % n]), dtype, LoRA settings")
    engine: EngineCfg = opt(EngineCfg, "the generation engine")
    sampling: SamplingCfg = opt(SamplingCfg, "sampling of every generation (a role may override)")
    trainer: TrainerCfg = opt(TrainerCfg, "schedule, optimizer and update settings")
    data: DataCfg = opt(DataCfg, "training tasks")
    eval: EvalCfg = opt(EvalCfg, "periodic held-out evaluation inside the loop")
    log: LogCfg = opt(LogCfg, "scalar logs beside metrics.jsonl")

    @staticmethod
    def check(cfg) -> None:
        """Rules across the common sections (a recipe's own ``check`` calls this first)."""
        parse_logprob_temperature(cfg.trainer.logprob_temperature)
        if cfg.trainer.kl_reference == "initial" and not cfg.model.init_adapters:
            raise ConfigError("trainer.kl_reference=initial needs model.init_adapters (the adapters to start from "
                              "and keep as the reference)")
