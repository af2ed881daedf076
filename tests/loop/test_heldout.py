"""The loop's held-out evaluation (selfevo.loop.heldout) runs ``selfevo eval``'s code: each agent answers alone
through the vanilla setup (the task's prompt, nothing else), scored by the tasks' verifiers; one model's answers are
evaluated once and stand for every agent."""
import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from helpers.scripted import ReplyEngine
from selfevo.loop import RunCfg
from selfevo.loop.heldout import agent_accuracy, evaluate, heldout_accuracy, one_model
from selfevo.tasks import format_prompt
from selfevo.types import SamplingParams, Task

TASKS = [Task(id=f"t{i}", domain="math", question=f"What is {i} + 1?", reference=str(i + 1)) for i in range(3)]
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


def reply(request) -> str:
    """``good`` answers every sum; ``bad`` only the first (0 + 1)."""
    i = int(request.messages[-1]["content"].split("What is ")[1].split(" ")[0])
    right = request.agent == "good" or i == 0
    return f"\\boxed{{{i + 1 if right else i + 7}}}"


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_each_agent_answers_alone_with_the_task_prompt_and_is_scored_as_selfevo_eval_scores():
    engine, ticks = ReplyEngine(reply), []
    got = agent_accuracy(engine, ["good", "bad"], TASKS, GREEDY, seed="0/eval", progress=ticks.append)
    assert got == {"good": 1.0, "bad": 0.3333}
    assert [{r.agent for r in call} for call in engine.calls] == [{"good"}, {"bad"}]  # one setup run per agent
    assert [r.messages for r in engine.calls[0]] == [[{"role": "user", "content": format_prompt(t)}] for t in TASKS]
    assert ticks == ["eval good", "eval bad"]
    record = evaluate("vanilla", TASKS, ReplyEngine(reply), GREEDY, ["bad"], seed="0/eval")
    assert round(record["accuracy"], 4) == got["bad"] and record["n"] == 3


def _store(untrained: bool, backbones=("b", "b")):
    return SimpleNamespace(agent_backbone=dict(zip(("good", "bad"), backbones)), is_untrained=lambda a: untrained)


def test_one_model_only_when_greedy_untrained_agents_share_a_backbone():
    assert one_model(_store(True), ["good", "bad"], 0.0)
    assert not one_model(_store(False), ["good", "bad"], 0.0)  # trained adapters differ
    assert not one_model(_store(True), ["good", "bad"], 0.7)  # sampled answers differ
    assert not one_model(_store(True, ("b", "c")), ["good", "bad"], 0.0)
    assert not one_model(_store(True), ["good"], 0.0)


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_heldout_accuracy_reads_the_eval_section_and_evaluates_one_model_once(tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"id": t.id, "domain": "math", "question": t.question,
                                        "reference": t.reference}) + "\n" for t in TASKS))
    cfg = OmegaConf.structured(RunCfg)
    cfg.eval.tasks, cfg.eval.limit, cfg.eval.max_new_tokens = [str(data)], 2, 8
    engine = ReplyEngine(reply)
    assert heldout_accuracy(cfg, engine, _store(False), ["good", "bad"]) == {
        "n": 2, "accuracy": {"good": 1.0, "bad": 0.5}}
    assert {r.sampling.max_new_tokens for call in engine.calls for r in call} == {8}
    shared = ReplyEngine(reply)
    assert heldout_accuracy(cfg, shared, _store(True), ["good", "bad"]) == {
        "n": 2, "accuracy": {"good": 1.0, "bad": 1.0}, "evaluated": "good"}
    assert len(shared.calls) == 1
