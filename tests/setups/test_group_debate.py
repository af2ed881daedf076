"""GroupDebate (selfevo.setups.group_debate) on a scripted engine: who sees whose answers within a stage, the group
summaries between stages, the final vote (a tie, a group of one, no answer at all)."""
import pytest

from helpers.scripted import ReplyEngine
from selfevo.setups import SetupError, make_setup, run_setup
from selfevo.setups.group_debate import groups_of
from selfevo.types import SamplingParams, Task

SAMPLING = SamplingParams(max_new_tokens=8, temperature=0.5)
AGENTS = ["a0", "a1", "a2", "a3"]


def task() -> Task:
    return Task("t", "math", "What?", "7", meta={"verifier": "math", "prompt_format": "math"})


def debater_reply(request) -> str:
    """Agent a's answer in its k-th debate turn (k = its chat's user messages): a + 10·k, last turn: 7 or 3."""
    if request.messages[-1]["content"].startswith("These are the solutions of the agents of your group"):
        return f"summary by {request.agent}"
    a, k = int(request.agent[1]), sum(m["role"] == "user" for m in request.messages)
    return f"\\boxed{{{7 if a < 2 else 3}}}" if k == 4 else f"\\boxed{{{a + 10 * k}}}"


def test_group_debate_groups_debate_inside_then_exchange_summaries_and_vote():
    engine = ReplyEngine(debater_reply)
    run = run_setup("group_debate", [task()], engine, SAMPLING, agents=AGENTS)
    assert [len(c) for c in engine.calls] == [4, 4, 2, 4, 4] and run.waves == 5  # S·R + S − 1
    first, intra, summary, inter, last = engine.calls
    assert all(r.messages[-1]["content"].startswith("What?") for r in first)
    # stage 1 round 2: agent 0 sees its group peer (agent 1's 11) only, agent 2 sees agent 3's 13 only
    shown0, shown2 = intra[0].messages[-1]["content"], intra[2].messages[-1]["content"]
    assert "```\\boxed{11}```" in shown0 and "\\boxed{12}" not in shown0 and "\\boxed{13}" not in shown0
    assert "```\\boxed{13}```" in shown2 and "\\boxed{11}" not in shown2
    # one summary per group, by its first agent, over the group's last answers
    assert [r.agent for r in summary] == ["a0", "a2"]
    assert "Solution 1: ```\\boxed{20}```\n\nSolution 2: ```\\boxed{21}```" in summary[0].messages[0]["content"]
    # stage 2 round 1: every agent gets both groups' summaries in its own chat
    for r in inter:
        assert "Group 1 summary: ```summary by a0```" in r.messages[-1]["content"]
        assert "Group 2 summary: ```summary by a2```" in r.messages[-1]["content"]
        assert [m["role"] for m in r.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert "```\\boxed{31}```" in last[0].messages[-1]["content"]  # stage 2 round 2: peers again
    [res] = run.results
    # last answers 7, 7, 3, 3: a tie, won by the group seen first (agent 0's)
    assert res.extracted == "7" and res.final_response == "\\boxed{7}"
    assert res.info["vote"]["count"] == 2 and res.info["groups"] == [[0, 1], [2, 3]]
    roles = [(t.label, t.meta["group"], t.meta["stage"]) for t in res.turns if t.wave == 3]
    assert roles == [("summary", 0, 1), ("summary", 1, 1)]
    assert run.metrics == {"unanimous_rate": 0.0, "no_answer_rate": 0.0}


def test_group_debate_one_agent_and_no_answer():
    engine = ReplyEngine(lambda r: "I do not know")
    run = run_setup("group_debate", [task()], engine, SAMPLING, n_agents=1, n_groups=1)
    assert [len(c) for c in engine.calls] == [1, 1, 1, 1, 1]
    assert engine.calls[1][0].messages[-1]["content"].startswith("Can you verify that your answer is correct.")
    [res] = run.results
    assert res.final_response == "I do not know" and res.extracted is None and res.info["vote"]["total"] == 0
    assert run.metrics["no_answer_rate"] == 1.0


def test_group_debate_groups_and_options():
    assert groups_of(4, 2) == [[0, 1], [2, 3]] and groups_of(5, 2) == [[0, 1], [2, 3, 4]] and groups_of(3, 3) == [
        [0], [1], [2]]
    with pytest.raises(SetupError, match="n_groups 3 exceeds n_agents 2"):
        make_setup("group_debate", None, SAMPLING, n_agents=2, n_groups=3)
    setup = make_setup("group_debate", None, SAMPLING, stages=3, rounds=1)
    assert setup.max_waves() == 5 and [setup.wave_label(c) for c in (1, 2, 3)] == [
        "stage 1 round 1", "stage 1 summaries", "stage 2 round 1"]
