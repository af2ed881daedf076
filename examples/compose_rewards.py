"""Composed rewards, R1-Zero style, written only with selfevo's public API: every answer thinks inside
<think></think> and ends with \\boxed{}; its reward is 0.8 x the verifier's correctness + 0.2 x the soft format
reward of its <think> block, two registered reward sources summed by ``build_sources``; it trains with GRPO (each
task answered ``trainer.prompt_reuse`` times per step, advantages normalised within each task's answers; a run names
its optimizer, ``trainer.optimizer``).

    python examples/compose_rewards.py --steps 1 --output runs/compose      # embedded model, GSM8K, 4 tasks x 4
    python examples/compose_rewards.py --steps 20 --output runs/compose n_agents=2 --rewards verifier:1 format:0.5

Extra ``key=value`` arguments are the loop kit's config keys (``selfevo run comas --help`` lists the common ones);
``--rewards`` (last on the line) takes any registered sources as name:weight (``selfevo ls`` lists them).

Departures from DeepSeek-R1-Zero: weights 0.8/0.2 (R1 adds an accuracy and a format reward, and its format check is
hard: all or nothing); the answer is made to start with "<think>" (a prefix given, not generated), so that a 135M
model has a chance to follow the format; a LoRA adapter, no KL term (trainer.kl_coef=0), a few samples per task at
temperature 0.7 (the embedded 135M model writes noise at 1.0).
"""
from __future__ import annotations

import argparse

from selfevo.config import load_config
from selfevo.interaction import Ask, Episode
from selfevo.loop import Loop, Phase, RunCfg, load_entries
from selfevo.rewards import build_sources
from selfevo.tasks import format_prompt

THINK = " First think step by step inside <think></think> tags, then give the final answer."


def think_then_answer(agents: list[str]):
    """Episode program: every agent answers once, its answer made to start with ``<think>``."""

    def program(ep: Episode):
        messages = [{"role": "user", "content": format_prompt(ep.task) + THINK}]
        yield [Ask(a, "solver", messages, prefix="<think>\n") for a in agents]

    return program


def composed(specs: list[str]):
    """The sources named ``name:weight`` summed; options go to those that take them: verifier(roles), format(tags)."""
    return build_sources(specs, labels=("solver",), tags={"think": 1})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--output", default="runs/compose_rewards")
    parser.add_argument("--rewards", nargs="+", default=["verifier:0.8", "format:0.2"], help="source:weight ...")
    parser.add_argument("overrides", nargs="*", help="config key=value")
    args = parser.parse_args(argv)
    defaults = ["n_agents=1", "trainer.tasks_per_step=4", "trainer.prompt_reuse=4", "trainer.optimizer=grpo",
                "trainer.lr=5e-5", "sampling.max_new_tokens=512", "sampling.temperature=0.7"]
    cfg = load_config(RunCfg, "compose_rewards", None, [*defaults, "recipe=compose_rewards",
                                                        f"trainer.max_steps={args.steps}", f"output_dir={args.output}",
                                                        *args.overrides])
    with Loop(cfg) as loop:
        tasks = loop.tasks(default=lambda: load_entries(["gsm8k:train"], limit=500))
        reward = composed(args.rewards)
        program = think_then_answer(loop.agents)
        for step in loop.steps():
            loop.end_step(step, *loop.run_step(step, [Phase("compose", loop.batch(tasks, step), program, reward)]))


if __name__ == "__main__":
    main()
