"""Self-Rewarding Language Model (Yuan et al. 2024) with selfevo's public API and TRL: the model answers each prompt
k times and judges its own answers (LLM-as-a-judge, the paper's additive 5-point prompt); per prompt the best vs the
worst answer is a preference pair for TRL's DPOTrainer on the SAME LoRA adapter (lent by ``PolicyStore.lend``).

    python examples/srlm.py --steps 1 --output runs/srlm [--judges 3] [key=value ...]   # embedded model, GSM8K

Departures: a step is one small iteration (DPO reference: the adapter before it, M_t) on a fixed prompt set (SRLM:
new prompts, 3 iterations, thousands of pairs); no seed IFT/EFT data; a shorter judge prompt whose answer starts with
"Score: " (a 135M model never writes SRLM's format); LoRA; GSM8K (``chosen_correct`` vs ``rejected_correct``).
"""
import argparse
import re

from datasets import Dataset
from trl import DPOConfig, DPOTrainer

from selfevo.config import load_config
from selfevo.interaction import Ask, Episode, ask
from selfevo.loop import Loop, Phase, RunCfg, Update, load_entries
from selfevo.loop.metrics import mean
from selfevo.rewards import RewardResult
from selfevo.roles import Parsed, get_role, strip_special_tokens
from selfevo.verifiers import verify

JUDGE = ("Review the user's question and the response with the additive 5-point scoring system below: 1 point if the "
         "response is relevant to the question; a second if it addresses a substantial part of it; a third if it "
         "answers its basic elements usefully; a fourth if direct, comprehensive and helpful; a fifth if impeccable, "
         "expert.\n\nUser: {question}\n<response>{response}</response>\n\nGive the total as \"Score: <points>\".")


def parse_score(text: str) -> Parsed:  # the judgement starts with the given "Score: "; n in 0-5
    return Parsed.success(int(m[1])) if (m := re.match(r"Score:\s*([0-5])\b", text)) else Parsed.failure("no score")


def self_judged(solver, agent: str, k: int, judges: int):
    """Episode program: k answers in one engine call, then ``judges`` judgements of each by the same agent."""
    def program(ep: Episode):
        answers = yield [ask(solver, agent, ep.task) for _ in range(k)]
        yield [Ask(agent, "judge", [{"role": "user", "content": JUDGE.format(question=ep.task.question, response=
                   strip_special_tokens(a.text).strip())}], parser=parse_score, prefix="Score: ", max_new_tokens=8,
                   refs={"solution": a}) for a in answers for _ in range(judges)]
    return program


def preference_pairs(episodes: list[Episode]) -> RewardResult:
    """Reward source: an answer's reward is its mean parsed judge score (judgements: masked); per prompt, the best vs
    the worst answer (if they differ) is a DPO pair, kept in the episode's ``meta["pair"]``."""
    out, right, fails = [], [], []
    for ep in episodes:
        judges = [j for j in ep.turns if j.label == "judge"]
        fails += [not j.parsed.ok for j in judges]
        out.append(rewards := {i: mean(j.parsed.value for j in judges if j.refs["solution"] == i)  # unparsed: left out
                               if a.label == "solver" else None for i, a in enumerate(ep.turns)})
        ranked = sorted((i for i in rewards if rewards[i] is not None), key=rewards.get)
        if len(ranked) > 1 and rewards[ranked[-1]] > rewards[ranked[0]]:
            best, worst = ep.turns[ranked[-1]], ep.turns[ranked[0]]
            ep.meta["pair"] = {k: t.completion.request.messages + [{"role": "assistant", "content":
                               strip_special_tokens(t.text)}] for k, t in (("chosen", best), ("rejected", worst))}
            right.append([verify(ep.task, t.text).score >= 1.0 for t in (best, worst)])
    return RewardResult(out, {"pairs": len(right), "judge_parse_failure_rate": mean(fails), "chosen_correct":
                              mean(r[0] for r in right), "rejected_correct": mean(r[1] for r in right)})


def dpo_update(loop: Loop, episodes: list[Episode], agent: str = "default") -> dict:
    """The step's update: one DPO step with TRL over its pairs (if any) on the agent's own adapter and AdamW state."""
    t, pairs = loop.cfg.trainer, [ep.meta["pair"] for ep in episodes if "pair" in ep.meta]
    if not pairs:
        return {}
    with loop.store.lend(agent) as (model, tokenizer):
        args = DPOConfig(str(loop.dir / "dpo"), beta=0.1, per_device_train_batch_size=t.micro_batch, logging_steps=1,
                         gradient_accumulation_steps=-(-len(pairs) // t.micro_batch), num_train_epochs=t.epochs,
                         max_grad_norm=t.max_grad_norm, lr_scheduler_type="constant", gradient_checkpointing=False,
                         bf16=False, use_cpu=model.device.type == "cpu", seed=loop.cfg.seed, save_strategy="no")
        (trainer := DPOTrainer(model, args=args, train_dataset=Dataset.from_list(pairs), processing_class=tokenizer,
                               optimizers=(loop.store.adamw(agent), None))).train()
    return {agent: [h for h in trainer.state.log_history if "loss" in h][-1]}  # loss, rewards/margins, ...


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--output", default="runs/srlm")
    parser.add_argument("--samples", type=int, default=4, help="answers per prompt (SRLM: 4)")
    parser.add_argument("--judges", type=int, default=1, help="judgements per answer, averaged (SRLM: 3)")
    parser.add_argument("overrides", nargs="*", help="config key=value")
    args = parser.parse_args(argv)
    defaults = ["trainer.optimizer=none", "trainer.tasks_per_step=4", "trainer.lr=5e-5", "sampling.max_new_tokens=256",
                "sampling.temperature=0.7", "sampling.top_p=0.9"]  # the update: TRL's DPO (Update fn); SRLM's sampling
    cfg = load_config(RunCfg, "srlm", None, [*defaults, "recipe=srlm", f"trainer.max_steps={args.steps}",
                                             f"output_dir={args.output}", *args.overrides, "n_agents=1"])
    with Loop(cfg, agents=["default"]) as loop:  # TRL's DPOTrainer copies the adapter named "default" as its reference
        tasks = loop.tasks(default=lambda: load_entries(["gsm8k:train"], limit=500))
        program = self_judged(get_role("generic.solver"), "default", args.samples, args.judges)
        for step in loop.steps():  # rollout, self-judged rewards, one DPO pass through TRL: the kit's step skeleton
            phase = Phase("srlm", loop.batch(tasks, step), program, preference_pairs)
            loop.end_step(step, *loop.run_step(step, [phase], [Update(fn=dpo_update)]))


if __name__ == "__main__":
    main()
