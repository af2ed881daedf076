"""examples/: each example trains for one step on a tiny model (smoke), and its protocol does what it says.

A tiny random model never answers right, so every reward would be alike and no advantage move an adapter: the
smoke runs answer two questions (both 2) through a scripted engine that is right on some answers and wrong on others
(see each test), and check that every agent trained."""
import collections
import importlib.util
import json
import sys

import pytest

from helpers.paths import ROOT
from helpers.scripted import ScriptedEngine
from selfevo.engines import ENGINES
from selfevo.interaction import Episode, Runner
from selfevo.roles import get_role
from selfevo.types import Completion, SamplingParams, Task

EXAMPLES = ROOT / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_examples_stay_short():
    for path in EXAMPLES.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 100, path.name


class RightOrWrong(ScriptedEngine):
    """Answers ``\\boxed{2}`` (right) when ``right(request, k)`` holds, else ``\\boxed{3}``; k counts the earlier
    requests on the same question."""
    right = staticmethod(lambda request, k: True)

    def __init__(self, store=None, **_):
        super().__init__(store)
        self.asked = collections.Counter()

    def answer(self, request) -> str:
        question = "1+1" if "1+1" in request.messages[-1]["content"] else "2+0"
        self.asked[question] += 1
        return "so \\boxed{2}" if self.right(request, self.asked[question] - 1) else "so \\boxed{3}"


if "examples_script" not in ENGINES:
    ENGINES.register("examples_script")(RightOrWrong)


def scripted(tmp_path, monkeypatch, right):
    """The overrides that run an example on the two questions through :class:`RightOrWrong` with ``right``."""
    monkeypatch.setattr(RightOrWrong, "right", staticmethod(right))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {q}?", "domain": "math", "reference": "2"}) + "\n"
                             for q in ("1+1", "2+0")))
    return [f"data.tasks=[{tasks}]", "engine.name=examples_script"]


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_maporl_debate_smoke(tmp_path, monkeypatch):
    out = tmp_path / "run"
    # agent0 right on 1+1 only, agent1 on 2+0 only: each agent's final answers score 1 and 0
    right = scripted(tmp_path, monkeypatch, lambda r, k: ("1+1" in r.messages[-1]["content"]) == (r.agent == "agent0"))
    load("maporl_debate").main(["--steps", "1", "--output", str(out), *TINY, *right])
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0] and set(metrics[0]["train"]) == {"agent0", "agent1"}
    assert all(trained(out, agent) for agent in ("agent0", "agent1"))
    episodes = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert [t["role"] for t in episodes[0]["turns"]] == ["answer", "answer", "final", "final"]
    assert all(t["reward"] is None for t in episodes[0]["turns"][:2])  # only final answers are rewarded


def test_maporl_debate_agents_read_the_others_latest_answers():
    class Echo:
        def generate(self, requests):
            return [Completion(r, [1], [2], [0.0], f"ANSWER-{r.agent}-{r.seed % 1000}", "stop") for r in requests]

    program = load("maporl_debate").debate(get_role("generic.solver"), ["a0", "a1", "a2"], rounds=3)
    ep = Runner(Echo(), SamplingParams(), 0).run([Episode(Task("t", "math", "1+1?", "2"))], program)[0]
    assert [t.round for t in ep.turns] == [0] * 3 + [1] * 3 + [2] * 3
    round1, round2 = ep.turns[:3], ep.turns[3:6]
    prompt = ep.turns[6].completion.request.messages[-1]["content"]  # a0 in the last round
    assert round2[1].text in prompt and round2[2].text in prompt and round2[0].text not in prompt
    assert not any(t.text in prompt for t in round1)


TINY = ["model.backbones=[tiny-random]", "model.dtype=float32", "sampling.max_new_tokens=4", "trainer.tasks_per_step=2"]
MATH = Task("t", "math", "1+1?", "2")


def read(out, name):
    return [json.loads(x) for x in (out / name).read_text().splitlines()]


def trained(out, agent, step=0):
    """Whether the step's saved adapter of ``agent`` moved: PEFT starts every LoRA B at zero."""
    from safetensors.torch import load_file

    adapter = load_file(str(out / "adapters" / f"step_{step}" / agent / "adapter_model.safetensors"))
    return any(v.abs().max() > 0 for k, v in adapter.items() if "lora_B" in k)


class Scripted:
    """An engine that answers each request with ``answers[slot]`` (the request's position in its wave)."""

    def __init__(self, answers):
        self.answers = answers

    def generate(self, requests):
        return [Completion(r, [1], [2], [0.0], self.answers[i % len(self.answers)], "stop")
                for i, r in enumerate(requests)]


# ---- TTRL ------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_ttrl_smoke(tmp_path, monkeypatch):
    out = tmp_path / "run"
    right = scripted(tmp_path, monkeypatch, lambda r, k: k % 3 == 0)  # 2, 3, 3: the wrong 3 wins the vote
    load("ttrl").main(["--steps", "1", "--output", str(out), "--samples", "3", *TINY, *right])
    (m,) = read(out, "metrics.jsonl")
    assert {"label_accuracy", "dummy_rate", "accuracy"} <= set(m) and set(m["train"]) == {"agent0"}
    assert trained(out, "agent0")
    episodes = read(out, "episodes.jsonl")
    assert len(episodes) == 2 and all(len(e["turns"]) == 3 for e in episodes)
    assert all(t["reward"] in (0.0, 0.5, 1.0) and "pseudo_label" in t for e in episodes for t in e["turns"])


def test_ttrl_majority_is_the_pseudo_label():
    from selfevo.rewards import REWARD_SOURCES, assign

    program = load("ttrl").sample(get_role("generic.solver"), "a0", 4)
    engine = Scripted(["\\boxed{3}", "so 3", "\\boxed{2}", "no idea"])
    episodes = Runner(engine, SamplingParams(), 0).run([Episode(MATH)], program)
    assert len({t.completion.request.seed for t in episodes[0].turns}) == 4  # k independent samples
    result = REWARD_SOURCES.get("majority_vote")()(episodes)
    assign(episodes, result)
    assert [t.reward for t in episodes[0].turns] == [1.0, 1.0, 0.0, 0.0]  # "3" wins 2 votes to 1, though wrong
    assert result.metrics == {"label_accuracy": 0.0, "dummy_rate": 0.0, "accuracy": 0.25}


# ---- SRLM ------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_srlm_smoke_trains_the_adapter_with_trl_dpo(tmp_path, monkeypatch):
    import itertools

    from safetensors.torch import load_file

    from selfevo.roles import Parsed

    srlm = load("srlm")
    scores = itertools.count()  # a tiny random model never writes "Score: n": score the judgements 0, 1, 2, ...
    monkeypatch.setattr(srlm, "parse_score", lambda text: Parsed.success(next(scores) % 6))
    out = tmp_path / "run"
    srlm.main(["--steps", "1", "--output", str(out), *TINY])
    (m,) = read(out, "metrics.jsonl")
    assert m["pairs"] == 2 and m["judge_parse_failure_rate"] == 0.0
    assert {"loss", "rewards/margins", "rewards/accuracies"} <= set(m["train"]["default"])
    episodes = read(out, "episodes.jsonl")
    assert [t["role"] for t in episodes[0]["turns"]] == ["solver"] * 4 + ["judge"] * 4
    adapter = load_file(str(out / "adapters" / "step_0" / "default" / "adapter_model.safetensors"))
    assert any(v.abs().max() > 0 for k, v in adapter.items() if "lora_B" in k)  # B starts at 0: DPO moved it
    assert not any(".ref." in k for k in adapter) and not list((out / "dpo").glob("checkpoint-*"))  # no TRL copies


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_srlm_preference_pairs_best_vs_worst_by_mean_judge_score():
    from selfevo.interaction import Turn
    from selfevo.roles import Parsed
    from selfevo.types import Request

    def turn(role, text, parsed=None, refs=None):
        req = Request("default", [{"role": "user", "content": "1+1?"}])
        return Turn("default", role, Completion(req, [1], [2], [0.0], text, "stop"), parsed, refs=refs or {})

    judged = [(0, Parsed.success(5)), (1, Parsed.success(2)), (2, Parsed.failure("no score")), (0, Parsed.success(3))]
    ep = Episode(MATH, [turn("solver", t) for t in ("\\boxed{2}", "\\boxed{3}", "\\boxed{4}")] +
                 [turn("judge", "", p, {"solution": i}) for i, p in judged])
    episodes = [ep, Episode(MATH, [turn("solver", "\\boxed{2}")])]
    result = load("srlm").preference_pairs(episodes)
    assert result.rewards[0] == {0: 4.0, 1: 2.0, 2: None, 3: None, 4: None, 5: None, 6: None}
    pairs, metrics = [e.meta["pair"] for e in episodes if "pair" in e.meta], result.metrics
    question = {"role": "user", "content": "1+1?"}
    assert pairs == [{"chosen": [question, {"role": "assistant", "content": "\\boxed{2}"}],
                      "rejected": [question, {"role": "assistant", "content": "\\boxed{3}"}]}]
    assert metrics == {"pairs": 1, "judge_parse_failure_rate": 0.25, "chosen_correct": 1.0, "rejected_correct": 0.0}


# ---- composed rewards ------------------------------------------------------------------------------------------
@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_compose_rewards_smoke_grpo_groups(tmp_path, monkeypatch):
    out = tmp_path / "run"
    right = scripted(tmp_path, monkeypatch, lambda r, k: k % 3 == 0)  # each task's 4 answers: right, wrong, wrong, right
    load("compose_rewards").main(["--steps", "1", "--output", str(out), *TINY, *right])
    (m,) = read(out, "metrics.jsonl")
    assert {"accuracy", "format"} <= set(m) and set(m["train"]) == {"agent0"} and trained(out, "agent0")
    config = (out / "config.yaml").read_text()
    assert "optimizer: grpo" in config and "prompt_reuse: 4" in config
    episodes = read(out, "episodes.jsonl")
    assert len(episodes) == 8 and len({e["task_id"] for e in episodes}) == 2  # 2 tasks x 4 answers


def test_compose_rewards_weighted_sum_of_verifier_and_format():
    from selfevo.rewards import assign

    example = load("compose_rewards")
    engine = Scripted(["adding</think> so \\boxed{2}", "\\boxed{2}", "hmm</think> \\boxed{5}"])
    episodes = Runner(engine, SamplingParams(), 0).run([Episode(MATH)], example.think_then_answer(["a0", "a1", "a2"]))
    assert all(t.answer.startswith("<think>\n") for t in episodes[0].turns)
    result = example.composed(["verifier:0.8", "format:0.2"])(episodes)
    assign(episodes, result)
    # right + closed think block: 0.8 + 0.2; right, think never closed: 0.8; wrong, closed: 0.2
    assert [t.reward for t in episodes[0].turns] == pytest.approx([1.0, 0.8, 0.2])
    assert result.metrics == {"accuracy": round(2 / 3, 4), "format": round(2 / 3, 4)}
