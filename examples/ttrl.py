"""TTRL (test-time reinforcement learning, Zuo et al. 2025), written only with selfevo's public API: the model
answers each unlabelled question k times, the majority answer becomes the pseudo-label, an answer that matches it
gets reward 1 and the others 0, and GRPO trains on these rewards. The true labels never reach training: they only
tell the log how often the pseudo-label is right (``label_accuracy``, next to ``accuracy``, the answers' own).

    python examples/ttrl.py --steps 1 --output runs/ttrl          # embedded model, GSM8K test questions, k = 8
    python examples/ttrl.py --steps 30 --output runs/ttrl --samples 8 data.tasks=[math500] trainer.tasks_per_step=8

Extra ``key=value`` arguments are the loop kit's config keys (``selfevo run comas --help`` lists the common ones);
with ``trainer.prompt_reuse=r`` the r episodes of a question vote together (k x r votes). The reward is the
registered ``majority_vote`` source (selfevo.rewards.sources).

Departures from the original: the k votes are also the k trained samples (TTRL votes with 64 answers and trains on
a subset; CoMAS's TTRL baseline votes and trains with 4, too few for a 135M model to agree on anything); where voting
cannot apply (no answer extracted, a tie for the most votes, code tasks) every answer gets the dummy reward 0.5, as
CoMAS's baseline did for code and science (under GRPO such a group has advantage 0: it is not trained); a LoRA
adapter instead of full fine-tuning; sampling at temperature 0.7 with 512 tokens (the embedded 135M model writes
noise at 1.0, and 256 tokens cut most of its answers).
"""
from __future__ import annotations

import argparse

from selfevo.config import load_config
from selfevo.interaction import Episode, ask
from selfevo.loop import Loop, Phase, RunCfg, load_entries
from selfevo.rewards import REWARD_SOURCES
from selfevo.roles import get_role


def sample(solver, agent: str, k: int):
    """Episode program: the agent answers the question k times (k request seeds, one engine call)."""

    def program(ep: Episode):
        yield [ask(solver, agent, ep.task) for _ in range(k)]

    return program


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--output", default="runs/ttrl")
    parser.add_argument("--samples", type=int, default=8, help="answers (votes) per question (TTRL: 64)")
    parser.add_argument("overrides", nargs="*", help="config key=value")
    args = parser.parse_args(argv)
    defaults = ["n_agents=1", "trainer.tasks_per_step=4", "trainer.optimizer=grpo", "trainer.lr=5e-5",
                "sampling.max_new_tokens=512", "sampling.temperature=0.7"]
    cfg = load_config(RunCfg, "ttrl", None, [*defaults, "recipe=ttrl", f"trainer.max_steps={args.steps}",
                                             f"output_dir={args.output}", *args.overrides])
    with Loop(cfg) as loop:
        tasks = loop.tasks(default=lambda: load_entries(["gsm8k:test"], limit=500))  # test-time: the test questions
        program = sample(get_role("generic.solver"), loop.agents[0], args.samples)
        reward = REWARD_SOURCES.get("majority_vote")(labels=("solver",))
        for step in loop.steps():
            loop.end_step(step, *loop.run_step(step, [Phase("ttrl", loop.batch(tasks, step), program, reward)]))


if __name__ == "__main__":
    main()
