"""MAPoRL-style debate, written only with selfevo's public API: several agents answer, read each other's answers,
answer again; a verifier rewards the final answers; every agent trains with REINFORCE++.

    python examples/maporl_debate.py --steps 1 --output runs/debate           # embedded model, 2 agents, GSM8K
    python examples/maporl_debate.py --steps 20 --output runs/debate n_agents=3 trainer.tasks_per_step=8

Extra ``key=value`` arguments are the loop kit's config keys (``selfevo run comas --help`` lists the common ones:
agents, model.*, sampling.*, trainer.*, data.tasks, eval.*). The run directory gets what every recipe's gets:
config, metrics.jsonl, episodes.jsonl, a resumable checkpoint (``resume=true``) and PEFT adapters.
"""
from __future__ import annotations

import argparse

from selfevo.config import load_config
from selfevo.interaction import Episode, ask
from selfevo.loop import Loop, Phase, RunCfg, load_entries
from selfevo.rewards import REWARD_SOURCES
from selfevo.roles import HistoryItem, get_role


def debate(solver, agents: list[str], rounds: int):
    """Episode program: round 0 every agent answers alone; each later round every agent reads the others' latest
    answers and answers again. The last round's turns are labelled ``final``."""

    def program(ep: Episode):
        answers = yield [ask(solver, a, ep.task, label=_label(0, rounds), round=0) for a in agents]
        for rnd in range(1, rounds):
            answers = yield [ask(solver, a, ep.task, label=_label(rnd, rounds), round=rnd,
                                 history=[HistoryItem(o.agent, "solution", o.text) for o in answers if o.agent != a])
                             for a in agents]

    return program


def _label(rnd: int, rounds: int) -> str:
    return "final" if rnd == rounds - 1 else "answer"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--output", default="runs/maporl_debate")
    parser.add_argument("--rounds", type=int, default=2, help="debate rounds (MAPoRL: 2-3)")
    parser.add_argument("overrides", nargs="*", help="config key=value")
    args = parser.parse_args(argv)
    defaults = ["n_agents=2", "trainer.optimizer=reinforce_pp", "trainer.tasks_per_step=4", "trainer.lr=5e-5",
                "sampling.max_new_tokens=128", "sampling.temperature=1.0"]
    cfg = load_config(RunCfg, "maporl_debate", None, [*defaults, "recipe=maporl_debate",
                                                      f"trainer.max_steps={args.steps}", f"output_dir={args.output}",
                                                      *args.overrides])
    with Loop(cfg) as loop:
        tasks = loop.tasks(default=lambda: load_entries(["gsm8k:train"], limit=500))
        program = debate(get_role("generic.solver"), loop.agents, args.rounds)
        reward = REWARD_SOURCES.get("verifier")(labels=("final",))  # earlier rounds carry no reward: not trained
        for step in loop.steps():
            loop.end_step(step, *loop.run_step(step, [Phase("debate", loop.batch(tasks, step), program, reward)]))

if __name__ == "__main__":
    main()
