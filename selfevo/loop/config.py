"""Config sections every recipe shares: the run (seed, output dir, resume, agents, model, engine, sampling), the
trainer (schedule, optimizer, learning rate), the data (``data.tasks``) and periodic held-out evaluation.

A recipe's ``Config`` subclasses :class:`RunCfg` and adds its own sections (``protocol``, ``reward``, ...); the
loop kit (:class:`selfevo.loop.Loop`) reads only these common keys.
"""
from __future__ import annotations

from dataclasses import dataclass

from selfevo.config import EngineCfg, ModelCfg, SamplingCfg, opt
from selfevo.optimizers import OPTIMIZERS


def _optimizers() -> list[str]:
    return OPTIMIZERS.names()


@dataclass
class TrainerCfg:
    max_steps: int = opt(20, "steps of the run (one step: roll out, reward, update, log, checkpoint)", ge=1)
    tasks_per_step: int = opt(8, "tasks rolled out per step", ge=1)
    prompt_reuse: int = opt(1, "independent episodes of each task per step (CoMAS Table 2: 4)", ge=1)
    optimizer: str = opt("reinforce_pp", "how rewarded turns update each agent", choices=_optimizers)
    train_batch: int = opt(0, "rows per optimizer step (0: all of an agent's rows of the step in one optimizer "
                              "step, on-policy, ratio 1)", ge=0)
    epochs: int = opt(1, "passes over an agent's rows per step (old log-probs from the rollout policy)", ge=1)
    lr: float = opt(1e-5, "AdamW peak learning rate of every adapter", gt=0)
    lr_schedule: str = opt("constant", "learning rate over the run's steps", choices=("constant", "cosine"))
    warmup_steps: int = opt(0, "linear warm-up steps of the learning rate", ge=0)
    min_lr_ratio: float = opt(0.0, "cosine: the last step's learning rate as a fraction of lr", ge=0, le=1)
    adam_beta1: float = opt(0.9, "AdamW β1", ge=0, lt=1)
    adam_beta2: float = opt(0.999, "AdamW β2 (released CoMAS code: 0.95)", ge=0, lt=1)
    weight_decay: float = opt(0.0, "AdamW weight decay", ge=0)
    optim_state_dtype: str = opt("float32", "dtype of every agent's AdamW moments between steps; bfloat16 halves "
                                 "the optimizer memory per agent (the update itself is computed in float32)",
                                 choices=("float32", "bfloat16"))
    micro_batch: int = opt(8, "rows per forward/backward pass of an update", ge=1)
    max_grad_norm: float = opt(1.0, "gradient-norm clip per optimizer step", gt=0)
    mask_truncated: bool = opt(True, "leave completions cut by the token limit out of training (released code)")
    kl_coef: float = opt(0.0, "β: weight of the KL to the reference policy (adapter disabled)", ge=0)
    kl_estimator: str = opt("k1", "KL estimator", choices=("k1", "k2", "k3"))
    kl_in_reward: bool = opt(True, "fold the KL into the return (CoMAS Eq. 9) instead of a loss term")
    clip_eps: float = opt(0.2, "PPO clip range ε", gt=0, lt=1)
    save_adapters_every: int = opt(0, "also export PEFT adapters every k steps (0: only at the end)", ge=0)


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
    agents: int = opt(4, "number of agents (one LoRA adapter each)", ge=1)
    model: ModelCfg = opt(ModelCfg, "backbones (agent i uses backbones[i % n]), dtype, LoRA settings")
    engine: EngineCfg = opt(EngineCfg, "the generation engine")
    sampling: SamplingCfg = opt(SamplingCfg, "sampling of every generation (a role may override)")
    trainer: TrainerCfg = opt(TrainerCfg, "schedule, optimizer and update settings")
    data: DataCfg = opt(DataCfg, "training tasks")
    eval: EvalCfg = opt(EvalCfg, "periodic held-out evaluation inside the loop")
    log: LogCfg = opt(LogCfg, "scalar logs beside metrics.jsonl")
