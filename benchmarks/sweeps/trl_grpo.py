"""TRL's GRPOTrainer with the settings of a ``grpo`` preset: the ``trl_grpo`` row of benchmarks/sweeps/effect.yaml,
beside selfevo's own ``grpo`` row (does selfevo's GRPO match TRL's on the same task and settings?).

    selfevo sweep benchmarks/sweeps/effect.yaml --only grpo trl_grpo              # both trained, evaluated, paired
    .venv/bin/python -m benchmarks.sweeps.trl_grpo --preset cpu-learn seed=0 output_dir=runs/trl_grpo/seed0

It takes ``selfevo run grpo``'s arguments (``--preset`` and ``key=value``; the sweep adds ``seed`` and
``output_dir``) and reads the grpo recipe's config from them: the model, LoRA r/alpha/dropout on the same modules,
``data.tasks`` (first ``data.limit`` items), the evaluation's own prompt (``format_prompt``), ``tasks_per_step``
prompts × ``prompt_reuse`` answers per step at the config's temperature and token limit, the verifier's 1/0 reward
alone, group-normalised advantages, one parameter update per rollout batch at a constant learning rate, KL β to
the backbone as a k3 loss term, the loss aggregated as ``trainer.loss_agg`` (token_mean: TRL's ``loss_type="dapo"``;
seq_mean_token_mean: ``"grpo"``), truncated answers trained on, micro-batches of ``micro_batch`` rows. TRL sees
exactly selfevo's task batches in selfevo's order (``shuffle_dataset=False`` over the concatenated step batches of
the same seed). Differences that remain: TRL's group std is the sample std (selfevo: population), and it generates
with ``model.generate`` (selfevo: its continuous-batching engine).

Writes ``config.yaml`` (the config it read), ``run.json`` (every launch, as ``selfevo run`` records it: command
line, time, git commit, packages, machine, the model's dtype), ``metrics.jsonl`` (per step: ``reward.agent0``,
``train.agent0.kl``, ``length_by_role.solver``, ``step_s``: the keys the sweep's table and curves read) and, last,
the adapter in ``adapters/final/agent0``. A Trainer checkpoint is saved after every step in ``trainer/`` (the
previous one removed); started again, the run continues from the newest (weights, optimizer, RNG: the adapter a
straight run gives).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

ADAPTER = Path("adapters") / "final" / "agent0"


def preset_config(preset: str | None, overrides: list[str]):
    """The grpo recipe's config of ``preset`` (null: its default) with ``overrides``."""
    from selfevo.algorithms import RECIPES
    from selfevo.config import load_config

    recipe = RECIPES.get("grpo")
    recipe.load()
    return load_config(recipe.config_class(), "grpo", preset or recipe.default_preset, overrides)


def last_checkpoint(folder: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` of a TRL run (saved after every step, the one before removed), or None.
    A checkpoint is complete once the Trainer wrote its ``trainer_state.json``, which comes last."""
    done = [d for d in folder.glob("checkpoint-*") if d.name.split("-")[-1].isdigit()
            and (d / "trainer_state.json").exists()] if folder.is_dir() else []
    return max(done, key=checkpoint_step, default=None)


def checkpoint_step(checkpoint: Path | None) -> int:
    """Optimizer steps a checkpoint holds (0 without one)."""
    return int(checkpoint.name.split("-")[-1]) if checkpoint else 0


# selfevo's trainer.loss_agg as TRL's loss_type (TRL has no sum over an answer's tokens)
TRL_LOSS_TYPE = {"token_mean": "dapo", "seq_mean_token_mean": "grpo"}


def grpo_config(cfg, out: Path):
    """TRL's GRPOConfig with the recipe config's settings."""
    from trl import GRPOConfig

    t, s = cfg.trainer, cfg.sampling
    rows = t.tasks_per_step * t.prompt_reuse
    if rows % t.micro_batch:
        raise SystemExit(f"tasks_per_step × prompt_reuse ({rows}) must be a multiple of micro_batch ({t.micro_batch})")
    if t.loss_agg not in TRL_LOSS_TYPE:
        raise SystemExit(f"trainer.loss_agg={t.loss_agg} has no TRL loss_type; take one of {', '.join(TRL_LOSS_TYPE)}")
    return GRPOConfig(
        output_dir=str(out / "trainer"), per_device_train_batch_size=t.micro_batch,
        gradient_accumulation_steps=rows // t.micro_batch, num_generations=t.prompt_reuse,
        max_completion_length=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, top_k=0,
        max_steps=t.max_steps, learning_rate=t.lr, lr_scheduler_type="constant", beta=t.kl_coef,
        epsilon=t.clip_eps, loss_type=TRL_LOSS_TYPE[t.loss_agg], scale_rewards="group",
        mask_truncated_completions=t.mask_truncated,
        num_iterations=t.epochs, max_grad_norm=t.max_grad_norm, adam_beta1=t.adam_beta1, adam_beta2=t.adam_beta2,
        weight_decay=t.weight_decay, shuffle_dataset=False, seed=cfg.seed, logging_steps=1, report_to="none",
        save_strategy="steps", save_steps=1, save_total_limit=1, use_cpu=True, bf16=False, dataloader_num_workers=0)


def train(cfg) -> Path:
    """TRL's GRPOTrainer on selfevo's task batches (see the module docstring); the adapter's folder."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer

    from selfevo import models
    from selfevo.loop import load_entries, task_batch
    from selfevo.loop.rundir import record_launch
    from selfevo.tasks import format_prompt
    from selfevo.verifiers import verify

    out, t, lora = Path(cfg.output_dir), cfg.trainer, cfg.model.lora
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / "config.yaml")
    torch.manual_seed(cfg.seed)
    tasks = load_entries(list(cfg.data.tasks), cfg.data.limit, cfg.data.data_root, cfg.data.source)
    order = [task for step in range(t.max_steps) for task in task_batch(tasks, step, t.tasks_per_step, cfg.seed)]
    by_id = {task.id: task for task in order}
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": format_prompt(task)}], "task_id": task.id}
                              for task in order])

    def reward(completions, task_id, **_):
        return [verify(by_id[i], c[0]["content"]).score for c, i in zip(completions, task_id)]

    args = grpo_config(cfg, out)
    model = models.load_model(cfg.model.backbones[0], dtype=cfg.model.dtype, attn_implementation="sdpa")
    record_launch(out, dtype=str(model.dtype).removeprefix("torch."))
    checkpoint = last_checkpoint(out / "trainer")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=models.load_tokenizer(cfg.model.backbones[0]),
                          callbacks=[step_timer(out / "metrics.jsonl", done=checkpoint_step(checkpoint))],
                          peft_config=LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora.target_modules, task_type="CAUSAL_LM"))
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    trainer.model.save_pretrained(str(out / ADAPTER))
    return out / ADAPTER


def step_line(step: int, logs: dict, seconds: float) -> dict:
    """One TRL log entry in the shape of selfevo's metrics.jsonl (the keys the sweep's table and curves read)."""
    return {"step": step, "reward": {"agent0": logs.get("reward")}, "train": {"agent0": {"kl": logs.get("kl")}},
            "length_by_role": {"solver": logs.get("completions/mean_length")}, "step_s": round(seconds, 2)}


def step_timer(path: Path, done: int = 0):
    """A callback that writes one line per optimizer step: TRL's logged reward, KL and length, and the step's wall
    time (TRL generates inside the step). A run resumed after ``done`` steps keeps the lines of those steps and drops
    any later ones (written after the checkpoint it resumes from)."""
    from transformers import TrainerCallback

    class _Timer(TrainerCallback):
        def __init__(self):
            self.start, self.seconds = 0.0, 0.0
            lines = path.read_text().splitlines() if done and path.exists() else []
            path.write_text("".join(x + "\n" for x in lines if x.strip() and json.loads(x)["step"] < done))

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds = time.perf_counter() - self.start

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                with path.open("a") as f:
                    f.write(json.dumps(step_line(state.global_step - 1, logs, self.seconds)) + "\n")

    return _Timer()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=None, help="the grpo recipe's preset (default: its default)")
    ap.add_argument("overrides", nargs="*", help="config key=value (the sweep adds seed= and output_dir=)")
    args = ap.parse_args(argv)
    print(train(preset_config(args.preset, args.overrides)))


if __name__ == "__main__":
    sys.exit(main())
