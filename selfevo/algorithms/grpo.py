"""GRPO: the plain RL baseline. One agent answers each task ``trainer.prompt_reuse`` times with the evaluation's own
prompt (:func:`~selfevo.tasks.format_prompt`, what ``selfevo eval setup=vanilla`` shows); the verifier scores each
answer 1/0; advantages are normalised within each task's answers (GRPO).

    selfevo run grpo                                        # preset cpu: embedded model, GSM8K, 2 tasks x 4 answers
    selfevo run grpo --preset cpu-learn output_dir=runs/g   # arith: 8 tasks x 8 answers, 24 steps (docs/results.md)
    selfevo run grpo reward.sources=[verifier:0.8,format:0.2]   # any registered sources, summed

Paper: DeepSeekMath (arXiv 2402.03300) Sec. 4.1, outcome supervision: A_i = (r_i − mean(r)) / std(r) over the G
answers of one question, the same advantage on every token, the clipped PPO surrogate, KL to the reference as a loss
term (k3): the recipe's defaults, so ``trainer.kl_coef=0.04`` alone gives Eq. 3's β term (``trainer.kl_in_reward=
true`` folds β·KL into the reward instead, CoMAS's form). Here the reference is the backbone (the LoRA adapter
disabled); the std is the group's population std (TRL's GRPOTrainer: the sample std;
:func:`selfevo.optimizers.objectives.task_relative_advantages`). Loss aggregation: ``trainer.loss_agg`` (default
``token_mean``, TRL's ``loss_type="dapo"``; Eq. 3 as written: ``seq_mean_token_mean``).
"""
from __future__ import annotations

from dataclasses import dataclass

from selfevo.config import opt
from selfevo.interaction import Ask, Episode
from selfevo.loop import DataCfg, Loop, Phase, RunCfg, TrainerCfg, Update, load_entries
from selfevo.optimizers import UpdateSpec
from selfevo.rewards import build_sources
from selfevo.tasks import format_prompt


@dataclass
class GRPORewardCfg:
    sources: list[str] = opt(["verifier"], "reward sources summed per answer (name or name:weight)", nonempty=True)


@dataclass
class GRPOCfg(RunCfg):
    recipe: str = opt("grpo", "the recipe", choices=("grpo",))
    output_dir: str = opt("runs/grpo", "run directory", nonempty=True)
    n_agents: int = opt(1, "number of agents (each answers every task; one adapter each)", ge=1)
    trainer: TrainerCfg = opt(TrainerCfg(optimizer="grpo", prompt_reuse=4, kl_in_reward=False, kl_estimator="k3"),
                              "schedule, optimizer, update (KL: DeepSeekMath's k3 loss term)")
    reward: GRPORewardCfg = opt(GRPORewardCfg, "what scores an answer")
    data: DataCfg = opt(DataCfg(tasks=["gsm8k:train"], limit=500), "training tasks")


def answer(agents: list[str]):
    """Episode program: every agent answers the task once, prompted as the evaluation prompts it."""

    def program(ep: Episode):
        yield [Ask(a, "solver", [{"role": "user", "content": format_prompt(ep.task)}]) for a in agents]

    return program


# How GRPO learns: the grpo optimizer (trainer.optimizer, GRPOCfg's default) with its own grouping, the answers of one
# prompt (optimizers.policy_gradient.same_prompt: a task's trainer.prompt_reuse answers), every answer trained.
LEARNING_RULE = UpdateSpec()


def main(cfg, command_line: list[str] | None = None) -> None:
    with Loop(cfg, command_line=command_line) as loop:
        tasks = loop.tasks(lambda: load_entries(["gsm8k:train"], limit=500))
        reward, program = build_sources(list(cfg.reward.sources), labels=("solver",)), answer(loop.agents)
        for step in loop.steps():
            phase = Phase("answer", loop.batch(tasks, step), program, reward)
            loop.end_step(step, *loop.run_step(step, [phase], [Update(spec=LEARNING_RULE)]))
