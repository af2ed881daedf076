"""The trainer section (``trainer.*``) of every recipe: schedule, optimizer, learning rate, AdamW, KL, clipping.
Declared beside the optimizers, which take it whole (``OPTIMIZERS.get(name)(cfg.trainer)``); the loop kit's
:class:`~selfevo.loop.RunCfg` holds it."""
from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import MISSING

from selfevo.config import ConfigError, opt


def _optimizers() -> list[str]:
    from selfevo.optimizers.base import OPTIMIZERS  # the optimizers take this section: at module level, a cycle

    return OPTIMIZERS.names()


def _loss_agg() -> tuple[str, ...]:
    from selfevo.optimizers.objectives import LOSS_AGG  # loads torch: only when a config is checked or described

    return LOSS_AGG


@dataclass
class TrainerCfg:
    max_steps: int = opt(20, "steps of the run (one step: roll out, reward, update, log, checkpoint)", ge=1)
    tasks_per_step: int = opt(8, "tasks rolled out per step", ge=1)
    prompt_reuse: int = opt(1, "independent episodes of each task per step (CoMAS Table 2: 4)", ge=1)
    optimizer: str = opt(MISSING, "how rewarded turns update each agent: each recipe names its own (its config's "
                                  "trainer default); no default for all", choices=_optimizers)
    train_batch: int = opt(0, "rows per parameter update (0: all of an agent's rows of the step in one optimizer "
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
    gradient_checkpointing: bool = opt(True, "an update keeps each decoder layer's input only and recomputes the "
                                            "layer in the backward pass: a micro-batch's activations take one "
                                            "layer's memory instead of all layers', for one more forward pass "
                                            "(the same gradients; measured: ~3x less update memory for ~1.2x its "
                                            "time; false where memory is plentiful)")
    shared_prompts: bool = opt(True, "rows of an update that begin with the same prompt (a group's completions, a "
                                     "slate's candidates) run that prompt's forward once: packed into one sequence "
                                     "under a mask that keeps each row to the prompt and its own tokens (the same "
                                     "log-probs up to float rounding; a group shares the prompt's LoRA dropout "
                                     "mask)")
    packed_attention: str = opt("auto", "how packed rows (shared_prompts) attend: ranges (one attention call per "
                                        "prompt and per row, only their own blocks: the least arithmetic, the most "
                                        "calls; selfevo's attention only), mask (one call per layer under an L x L "
                                        "mask: the fewest calls), auto (ranges on the CPU; on a GPU, where an "
                                        "update of a small model is bound by launching operations, the mask for "
                                        "packed rows up to 2,048 tokens, ranges beyond: docs/scale.md)",
                                choices=("auto", "ranges", "mask"))
    map_layer_blocks: bool = opt(False, "during an update, blocks the size of one layer's input get their own "
                                        "memory mapping, returned when freed (selfevo.heap.layer_threshold): a small "
                                        "micro-batch's blocks stop fragmenting the heap (MAESTRO cpu step: 3.89 -> "
                                        "2.08 GiB peak) for page faults on every fresh block (its update 1.5x "
                                        "slower; docs/benchmarks.md); false: blocks of 8 MB and more only")
    max_grad_norm: float = opt(1.0, "gradient-norm clip per parameter update", gt=0)
    mask_truncated: bool = opt(True, "leave completions cut by the token limit out of training (released code)")
    kl_coef: float = opt(0.0, "β: weight of the KL to the reference policy (adapter disabled)", ge=0)
    kl_estimator: str = opt("k1", "KL estimator", choices=("k1", "k2", "k3"))
    kl_reference: str = opt("base", "the KL's reference policy: base (the backbone, adapter disabled) or initial "
                                    "(each agent's starting adapter from model.init_adapters, kept frozen: MAESTRO's "
                                    "SFT reference)", choices=("base", "initial"))
    kl_in_reward: bool = opt(True, "fold the KL into the return (CoMAS Eq. 9) instead of a loss term")
    clip_eps: float = opt(0.2, "PPO clip range ε", gt=0, lt=1)
    loss_agg: str = opt("token_mean", "how the clipped-surrogate optimizers (reinforce_pp, task_relative, grpo) "
                                      "average per-token losses (KL loss term included) over a parameter update: "
                                      "token_mean (every token alike: OpenRLHF, verl, TRL's loss_type=dapo), "
                                      "seq_mean_token_mean (each answer's token mean, then the mean over answers: "
                                      "DeepSeekMath Eq. 3, TRL's loss_type=grpo), seq_mean_token_sum (each answer's "
                                      "token sum, then the mean over answers)", choices=_loss_agg)
    logprob_temperature: str = opt("sampling", "the temperature tokens are scored at (old log-probs, current "
                                               "policy, KL reference, entropy: logits / T, as verl and TRL do): "
                                               "sampling = each turn's own sampling temperature (a role's override "
                                               "included; greedy turns at 1), or a number > 0 for every turn (1: "
                                               "the model's own distribution); SFT always scores at 1")
    save_adapters_every: int = opt(0, "also export PEFT adapters every k steps (0: only at the end)", ge=0)


def parse_logprob_temperature(value) -> float | None:
    """``trainer.logprob_temperature`` as the policy store takes it: None for ``sampling`` (each row at its own
    sampling temperature), else the number (> 0); a one-line :class:`ConfigError` for anything else."""
    text = str(value).strip()
    if text == "sampling":
        return None
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ConfigError(f"trainer.logprob_temperature must be sampling or a number > 0, got {value!r}")
    return number
