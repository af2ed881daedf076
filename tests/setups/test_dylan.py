"""DyLAN (selfevo.setups.dylan) on a scripted engine: early stop on a 2/3 consensus, the ranker's team reformation
(who is dropped, who sees what), the Agent Importance Score from peer ratings, and the failures (ranker, ratings,
no answer, one agent)."""
import re

from helpers.scripted import ReplyEngine
from selfevo.setups import make_setup, run_setup
from selfevo.setups.dylan import importance, rating_weights
from selfevo.types import SamplingParams, Task

SAMPLING = SamplingParams(max_new_tokens=8, temperature=0.2)
AGENTS = ["a0", "a1", "a2", "a3"]


def task() -> Task:
    return Task("t", "math", "What?", "7", meta={"verifier": "math", "prompt_format": "math"})


def shown_agents(request) -> list[int]:
    """The agents whose replies a prompt shows, in the order shown (replies say ``agent<a>``)."""
    return [int(a) for a in re.findall(r"Agent solution \d+: ```agent(\d)", request.messages[-1]["content"])]


def test_dylan_stops_when_two_thirds_agree():
    engine = ReplyEngine(lambda r: "agent3 \\boxed{5}" if r.agent == "a3" else f"agent{r.agent[1]} \\boxed{{2}}")
    run = run_setup("dylan", [task()], engine, SAMPLING, agents=AGENTS)
    assert [len(c) for c in engine.calls] == [4] and run.waves == 1  # 3 of 4 > ⌊2/3·4⌋ = 2
    assert engine.calls[0][0].messages[0]["role"] == "system" and engine.calls[0][0].messages[1]["content"].startswith(
        "What?")
    [res] = run.results
    assert res.extracted == "2" and res.info["consensus"] and res.info["layers"] == 1
    assert res.info["importance"] == [1 / 3, 1 / 3, 1 / 3, 0.0]
    assert run.metrics["early_stop_rate"] == 1.0 and run.metrics["mean_layers"] == 1.0


def reformation_reply(request) -> str:
    """Layer 1: agent a says a; layer 2: 10 + a; the ranker keeps agents 1 and 3; layer 3: both say 7. Ratings:
    layer 2 rates everyone 5 (agent 0 writes none); in layer 3 agent 1 rates agent 1's reply 5 and agent 3's 0,
    agent 3 rates both 3."""
    shown = shown_agents(request)
    if request.messages[-1]["content"].rstrip().endswith("at the end of your response."):  # the ranker
        return f"The best are [{shown.index(1) + 1}, {shown.index(3) + 1}]"
    a = int(request.agent[1])
    if not shown:
        return f"agent{a} \\boxed{{{a}}}"
    if len(shown) == 4:
        return f"agent{a} \\boxed{{{10 + a}}}" + ("" if a == 0 else " [[5, 5, 5, 5]]")
    scores = [5 if s == 1 else 0 for s in shown] if a == 1 else [3, 3]
    return f"agent{a} \\boxed{{7}} [[{', '.join(map(str, scores))}]]"


def test_dylan_ranker_drops_agents_and_importance_follows_the_ratings():
    engine = ReplyEngine(reformation_reply)
    run = run_setup("dylan", [task()], engine, SAMPLING, agents=AGENTS)
    assert [len(c) for c in engine.calls] == [4, 4, 1, 2] and run.waves == 4
    layer2, ranker, layer3 = engine.calls[1], engine.calls[2][0], engine.calls[3]
    assert all(sorted(shown_agents(r)) == [0, 1, 2, 3] for r in layer2)  # every reply of layer 1
    assert "Put all 4 scores in the form like [[1, 5, 2, ...]]" in layer2[0].messages[-1]["content"]
    assert ranker.agent == "a0" and sorted(shown_agents(ranker)) == [0, 1, 2, 3]
    assert "choose the best 2 solutions" in ranker.messages[-1]["content"]
    # only the kept agents run, and they see only the kept agents' layer-2 replies
    assert [r.agent for r in layer3] == ["a1", "a3"] and all(sorted(shown_agents(r)) == [1, 3] for r in layer3)
    assert "\\boxed{11}" in layer3[0].messages[-1]["content"] and "\\boxed{10}" not in layer3[0].messages[-1]["content"]
    [res] = run.results
    assert res.extracted == "7" and res.info["consensus"] and res.info["layers"] == 3
    assert (res.info["ranker_failures"], res.info["rating_failures"]) == (0, 1)  # agent 0's layer-2 ratings
    # layer 3: agents 1, 3 share 1; layer 2: agent 1 = .5·1 + .5·.5, agent 3 = .5·0 + .5·.5; layer 1: .25 each
    assert res.info["importance"] == [0.25, 0.5 + 0.75 + 0.25, 0.25, 0.5 + 0.25 + 0.25]
    assert [t.label for t in res.turns].count("ranker") == 1 and run.metrics["early_stop_rate"] == 0.0


def test_dylan_ranker_parse_failure_is_recorded_and_falls_back_to_a_seeded_pick():
    def reply(request):
        if request.messages[-1]["content"].rstrip().endswith("at the end of your response."):
            return "They are all good."
        return f"agent{request.agent[1]} \\boxed{{{request.agent[1]}}}"

    picks = []
    for seed in (0, 0, 1, 2, 3):
        engine = ReplyEngine(reply)
        run = run_setup("dylan", [task()], engine, SAMPLING, agents=AGENTS, seed=seed)
        assert [len(c) for c in engine.calls] == [4, 4, 1, 2] and run.results[0].info["ranker_failures"] == 1
        picks.append(tuple(r.agent for r in engine.calls[3]))
    assert picks[0] == picks[1] and len(set(picks)) > 1  # seeded: same seed, same pick; not always the same pick
    res = run.results[0]  # no agreement anywhere: a vote over the last layer, a tie, won by the lower agent
    assert not res.info["consensus"] and res.extracted == picks[-1][0][1]


def test_dylan_one_agent_without_an_answer_runs_every_layer():
    engine = ReplyEngine(lambda r: "no answer here")
    run = run_setup("dylan", [task()], engine, SAMPLING, n_agents=1)
    assert [len(c) for c in engine.calls] == [1, 1, 1]  # no ranker: nobody to drop
    assert "Put all 1 scores" in engine.calls[1][0].messages[-1]["content"]  # it is shown its own last reply
    [res] = run.results
    assert res.extracted is None and not res.info["consensus"] and res.info["importance"] == [0.0]
    assert res.info["rating_failures"] == 2


def test_dylan_helpers():
    assert rating_weights("ok [[5, 0, 10]]", 3) == ([0.5, 0.0, 0.5], True)
    assert rating_weights("[[5, 5]]", 3) == ([1 / 3] * 3, False) and rating_weights("x", 0) == ([], True)
    layers = [{0: ([], [], True), 1: ([], [], True)}, {0: ([1, 0], [0.25, 0.75], True)}]
    assert importance(layers, {0}, 2) == [1 + 0.75, 0.25]
    setup = make_setup("dylan", None, SAMPLING)
    assert setup.max_waves() == 4 and make_setup("dylan", None, SAMPLING, top_k=4).max_waves() == 3
