"""AgentPrune (selfevo.setups.agentprune) on a scripted engine: the one-shot pruned graph (seeded, the same for every
task), the topological layers, what each agent is shown (spatial: this round, temporal: the last one), and the final
decision call or vote (a failed parse, one agent)."""
import re

import pytest

from helpers.scripted import ReplyEngine
from selfevo.setups import make_setup, run_setup
from selfevo.setups.agentprune import layers, pruned_graph
from selfevo.types import SamplingParams, Task

SAMPLING = SamplingParams(max_new_tokens=8, temperature=0.5)
AGENTS = ["a0", "a1", "a2", "a3"]


def task(tid: str) -> Task:
    return Task(tid, "math", f"Question {tid}?", "5", meta={"verifier": "math", "prompt_format": "math"})


def test_pruned_graph_is_seeded_and_keeps_the_share_asked():
    g = pruned_graph(4, 0.25, 0)
    assert len(g["spatial"]) == 4 and len(g["temporal"]) == 12  # 6 − round(1.5), 16 − 4
    assert all(i < j for i, j in g["spatial"]) and g == pruned_graph(4, 0.25, 0)
    assert len({str(pruned_graph(4, 0.25, s)) for s in range(6)}) > 1
    assert pruned_graph(3, 0.0, 0) == {"spatial": [(0, 1), (0, 2), (1, 2)],
                                       "temporal": [(i, j) for i in range(3) for j in range(3)]}
    assert pruned_graph(3, 1.0, 0) == {"spatial": [], "temporal": []}
    assert layers(4, [(0, 2), (1, 2), (1, 3), (2, 3)]) == [[0, 1], [2], [3]] and layers(2, []) == [[0, 1]]


def reply(request) -> str:
    """``a<i> r<k> t<task>``: agent i's k-th reply on a task (k counts its calls on that task), answer i."""
    text = request.messages[-1]["content"]
    if text.startswith("You are the top decision-maker"):
        return "decided \\boxed{5}"
    reply.count[(request.agent, text[:11])] = reply.count.get((request.agent, text[:11]), 0) + 1
    return f"a{request.agent[1]} r{reply.count[(request.agent, text[:11])]} t{text[9]} \\boxed{{{request.agent[1]}}}"


def senders(text: str, part: str) -> list[tuple[int, int]]:
    """(agent, round) of the replies a prompt shows this round (``part="now"``) or from the last one (``"last"``)."""
    head, _, last = text.partition("In the last round")
    chunk = last if part == "last" else head.partition("At the same time")[2]
    return [(int(a), int(r)) for a, r in re.findall(r"a(\d) r(\d)", chunk)]


@pytest.mark.parametrize("seed", [0, 3])
def test_agentprune_rounds_follow_the_pruned_graph(seed):
    reply.count = {}
    engine = ReplyEngine(reply)
    run = run_setup("agentprune", [task("x"), task("y")], engine, SAMPLING, agents=AGENTS, rounds=2, seed=seed)
    graph = pruned_graph(4, 0.25, seed)
    order = layers(4, graph["spatial"])
    assert run.waves == 2 * len(order) + 1 == len(engine.calls)
    for call, layer in zip(engine.calls, order + order):  # every task asks the same layer in the same wave
        assert [r.agent for r in call] == [f"a{a}" for a in layer] * 2
    for call_no, call in enumerate(engine.calls[:-1]):
        rnd = call_no // len(order) + 1
        for request in call:
            a, text = int(request.agent[1]), request.messages[-1]["content"]
            assert senders(text, "now") == [(i, rnd) for i, j in graph["spatial"] if j == a]
            assert senders(text, "last") == ([(i, 1) for i, j in graph["temporal"] if j == a]
                                                          if rnd == 2 else [])
    decision = engine.calls[-1]
    assert [r.agent for r in decision] == ["a0", "a0"]
    assert re.findall(r"Agent (\d)'s answer", decision[0].messages[-1]["content"]) == ["0", "1", "2", "3"]
    assert "a3 r2 tx" in decision[0].messages[-1]["content"] and "ty" not in decision[0].messages[-1]["content"]
    assert [r.final_response for r in run.results] == ["decided \\boxed{5}"] * 2
    assert run.results[0].info["graph"] == graph and run.metrics["spatial_edges"] == len(graph["spatial"])


def test_agentprune_vote_with_a_failed_parse_and_one_agent():
    texts = {"a0": "no answer", "a1": "\\boxed{4}", "a2": "\\boxed{5}", "a3": "so \\boxed{5}"}
    engine = ReplyEngine(lambda r: texts[r.agent])
    run = run_setup("agentprune", [task("x")], engine, SAMPLING, agents=AGENTS, aggregate="vote", pruning_rate=1.0)
    assert [len(c) for c in engine.calls] == [4]  # no edge left: one layer, no decision call
    [res] = run.results
    assert res.final_response == "\\boxed{5}" and res.info["vote"]["total"] == 3 and res.info["vote"]["count"] == 2
    engine = ReplyEngine(lambda r: "decided" if r.messages[-1]["content"].startswith("You are") else "x \\boxed{1}")
    run = run_setup("agentprune", [task("x")], engine, SAMPLING, n_agents=1)
    assert [len(c) for c in engine.calls] == [1, 1] and run.results[0].final_response == "decided"
    assert run.results[0].extracted is None  # the decision states no answer: none is read from the agents
    setup = make_setup("agentprune", None, SAMPLING)
    assert setup.wave_label(setup.max_waves()) == "decision" and setup.wave_label(1) == "round 1 layer 1"
