"""Inference setups (selfevo.setups): well-formed results on the tiny model, one engine call per step (batched across
tasks), and the voting / MAESTRO selection setups on scripted completions whose verdicts are known."""
import re

import pytest

from helpers.paths import DATA, needs_data
from selfevo.setups import SETUPS, SetupError, make_setup, run_setup
from selfevo.setups.autogen import TERMINATE
from selfevo.tasks import load_tasks
from selfevo.types import Completion, SamplingParams, Task

SAMPLING = SamplingParams(max_new_tokens=6, temperature=0.7)


class CountingEngine:
    """Wraps an engine; records the size of every generate call."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def generate(self, requests):
        self.calls.append(len(requests))
        return self.engine.generate(requests)


class ScriptedEngine:
    """Answers each request with ``script(request)``; records every call's requests."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, requests):
        self.calls.append(list(requests))
        return [Completion(r, [1], [2, 3], [-0.1, -0.2], self.script(r), "stop") for r in requests]


def text_of(request) -> str:
    return "\n".join(m["content"] for m in request.messages)


def math_task(tid: str, question: str, answer: str) -> Task:
    return Task(tid, "math", question, answer, meta={"verifier": "math", "prompt_format": "math"})


# ----------------------------------------------------------------------------------------------------------------
# Tiny model: every setup, three GSM8K tasks
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_engine():
    from selfevo.engines import make_engine
    from selfevo.policy import PolicyStore, StoreSettings

    store = PolicyStore(StoreSettings(dtype="float32"))
    store.backbone("tiny-random")
    return make_engine("hf", store)


EXPECTED = {  # (setup, options) -> sizes of the engine calls for 3 tasks: one call per step
    ("vanilla", ()): [3],
    ("consistency", ()): [15],
    ("consistency", (("aggregate", "llm"), ("k", 3))): [9, 3],
    ("debate", ()): [9, 9],
    ("debate", (("aggregate", "llm"),)): [9, 9, 3],
    ("autogen", ()): [3, 3, 3, 3, 3],  # random text never says TERMINATE: 3 assistant + 2 proxy turns
    ("maestro_select", ()): [27, 3] * 3,
    ("php", (("max_rounds", 3),)): [3, 3, 3],  # random text never repeats an answer
    ("group_debate", ()): [12, 12, 6, 12, 12],
    ("dylan", ()): [12, 12, 3, 6],  # no consensus: 2 layers of 4, the ranker, a layer of 2
    ("agentprune", ()): [3, 3, 3, 3, 3],  # seed 1's pruned graph: 4 waves of one agent, then the decision
}


@needs_data
@pytest.mark.parametrize("name,options", list(EXPECTED))
def test_setup_on_tiny_model_is_well_formed_and_batched(tiny_engine, name, options):
    tasks = load_tasks("gsm8k", "test", data_root=DATA, limit=3)
    engine = CountingEngine(tiny_engine)
    run = run_setup(name, tasks, engine, SAMPLING, seed=1, **dict(options))
    assert run.setup == name and len(run.results) == 3
    assert [r.task_id for r in run.results] == [t.id for t in tasks]
    assert engine.calls == EXPECTED[(name, options)]
    assert len(engine.calls) == run.waves and sum(engine.calls) == run.generations
    for res in run.results:
        assert isinstance(res.final_response, str) and res.turns
        assert all(isinstance(t.text, str) and 1 <= t.wave <= run.waves for t in res.turns)
        # maestro_select: "" when the last selection did not parse (strict: no fallback counted as an answer)
        assert res.final_response in [t.text for t in res.turns] or name == "autogen" or (
            name == "maestro_select" and res.final_response == "" and res.info["rounds"][-1]["chosen"] is None)
    assert run.sampling["temperature"] == 0.7
    if name == "debate" and not options:  # same seed -> same results (seeds derive from the request, not globals)
        again = run_setup(name, tasks, tiny_engine, SAMPLING, seed=1)
        assert [r.final_response for r in again.results] == [r.final_response for r in run.results]


def test_registry_and_defaults():
    assert SETUPS.names() == ["agentprune", "autogen", "consistency", "debate", "dylan", "group_debate",
                              "maestro_select", "php", "vanilla"]
    assert SETUPS.get("vanilla").default_temperature == 0.0
    assert SETUPS.get("maestro_select").default_temperature == 0.7
    assert SETUPS.get("maestro_select").default_top_p == 0.95


def test_bad_options_are_one_line_errors():
    engine = ScriptedEngine(lambda r: "")
    with pytest.raises(SetupError, match="setup 'consistency': unknown config key 'kk' in its options; did you "
                                         "mean 'k'\\?"):
        make_setup("consistency", engine, SAMPLING, kk=3)
    # the engine decides how it batches (engine.hf.continuous): no setup takes a continuous= keyword
    with pytest.raises(SetupError, match="setup 'vanilla': unknown config key 'continuous' in its options"):
        make_setup("vanilla", engine, SAMPLING, continuous=False)
    with pytest.raises(SetupError, match="setup 'debate': aggregate must be vote or llm; got 'mean'"):
        make_setup("debate", engine, SAMPLING, aggregate="mean")
    with pytest.raises(SetupError, match="rounds must be an integer"):
        make_setup("maestro_select", engine, SAMPLING, rounds="two")
    with pytest.raises(SetupError, match="epsilon must be in \\[0, 1\\], got 2.0"):
        make_setup("maestro_select", engine, SAMPLING, epsilon=2)
    with pytest.raises(SetupError, match="central_agent 3 is not an index into the 1 agent"):
        make_setup("maestro_select", engine, SAMPLING, central_agent=3)
    assert make_setup("maestro_select", engine, SAMPLING, rounds="2", epsilon="0").opts.rounds == 2
    with pytest.raises(KeyError, match="unknown setup 'debat' \\(did you mean 'debate'\\?\\)"):
        make_setup("debat", engine, SAMPLING)


# ----------------------------------------------------------------------------------------------------------------
# Consistency, debate and AutoGen on scripted completions
# ----------------------------------------------------------------------------------------------------------------


def test_consistency_vote_on_scripted_samples():
    answers = iter(["\\boxed{3}", "I think \\boxed{5}", "no idea", "so \\boxed{5.0}", "\\boxed{5}"])
    engine = ScriptedEngine(lambda r: next(answers))
    run = run_setup("consistency", [math_task("t", "Q?", "5")], engine, SAMPLING)
    res = run.results[0]
    assert run.waves == 1 and len(res.turns) == 5
    assert res.final_response == "I think \\boxed{5}" and res.extracted == "5"
    assert res.info["vote"]["count"] == 3 and res.info["vote"]["total"] == 4
    assert run.metrics["vote_agreement"] == pytest.approx(0.6)


def test_consistency_llm_aggregation_sees_all_samples():
    engine = ScriptedEngine(lambda r: "FINAL \\boxed{9}" if "[Solution 1]" in text_of(r) else "sample")
    run = run_setup("consistency", [math_task("a", "Qa", "9"), math_task("b", "Qb", "1")], engine, SAMPLING,
                    aggregate="llm", k=4)
    assert [len(c) for c in engine.calls] == [8, 2]
    agg = text_of(engine.calls[1][0])
    assert "[Task]:\nQa" in agg and "[Solution 4]:\nsample" in agg and "[Solution 5]" not in agg
    assert [r.extracted for r in run.results] == ["9", "9"]


def test_debate_round_two_sees_the_other_agents_and_votes():
    def script(r):
        if "opinions from other agents" in text_of(r):
            return "\\boxed{2}"
        script.n += 1  # round 1, in agent order: agent 0 says 1, agents 1 and 2 say 2
        return ["\\boxed{1}", "\\boxed{2}", "\\boxed{2}"][script.n - 1]

    script.n = 0
    engine = ScriptedEngine(script)
    run = run_setup("debate", [math_task("t", "What?", "2")], engine, SAMPLING)
    first, second = engine.calls
    assert len(first) == len(second) == 3
    prompt0 = second[0].messages[-1]["content"]  # agent 0 said 1; sees agents 1 and 2 (both 2), not itself
    assert prompt0.count("One agent response: ```\\boxed{2}```") == 2 and "```\\boxed{1}```" not in prompt0
    assert prompt0.endswith("The original problem is What?\n\nPlease reason step by step, and put your final "
                            "answer within \\boxed{}.")
    assert [m["role"] for m in second[0].messages] == ["user", "assistant", "user"]
    assert run.results[0].extracted == "2" and run.metrics["unanimous_rate"] == 1.0


def test_autogen_stops_on_terminate_per_task():
    tasks = [math_task("a", "QA", "1"), math_task("b", "QB", "2"), math_task("c", "QC", "3")]

    def script(r):
        content = text_of(r)
        if "Check the assistant's answer" in content:  # user proxy
            return TERMINATE if "QB" in content else "Please check step 2."
        if "QA" in content:
            return f"\\boxed{{1}} {TERMINATE}"
        return f"\\boxed{{{len(r.messages)}}}"  # the answer grows with the history

    engine = ScriptedEngine(script)
    run = run_setup("autogen", tasks, engine, SAMPLING)
    assert [len(c) for c in engine.calls] == [3, 2, 1, 1, 1] and run.waves == 5
    a, b, c = run.results
    assert a.final_response == "\\boxed{1}" and a.info == {"stopped_by": "assistant", "assistant_turns": 1}
    assert b.final_response == "\\boxed{2}" and b.info["stopped_by"] == "user_proxy"
    assert c.info == {"stopped_by": "max_turns", "assistant_turns": 3} and c.extracted == "6"
    assert [t.label for t in c.turns] == ["assistant", "user_proxy", "assistant", "user_proxy", "assistant"]
    assert engine.calls[2][0].messages[0]["role"] == "system"
    assert [m["role"] for m in engine.calls[2][0].messages[1:]] == ["user", "assistant", "user"]
    assert run.metrics["stopped_by_max_turns"] == pytest.approx(1 / 3)


def test_autogen_all_terminate_in_one_step():
    engine = ScriptedEngine(lambda r: f"\\boxed{{1}}\n{TERMINATE}")
    run = run_setup("autogen", [math_task("a", "QA", "1"), math_task("b", "QB", "1")], engine, SAMPLING)
    assert run.waves == 1 and len(engine.calls) == 1
    assert [r.final_response for r in run.results] == ["\\boxed{1}", "\\boxed{1}"]


# ----------------------------------------------------------------------------------------------------------------
# MAESTRO central selection
# ----------------------------------------------------------------------------------------------------------------


def maestro_script():
    """Two tasks, N=2 agents x K=2 candidates, 2 rounds; answers chosen so the metrics are known:

    round 1: A slate (4,5,4,4) chosen #2 (=5, correct); B slate (7,1,1,1) chosen #2 (=1, wrong)
    round 2: A slate (4,4,4,4) central output unparsable -> #1 (=4); B slate (1,1,1,7) chosen #4 (=7, correct)
    """
    slates = {("A", 1): [4, 5, 4, 4], ("B", 1): [7, 1, 1, 1], ("A", 2): [4, 4, 4, 4], ("B", 2): [1, 1, 1, 7]}
    central = {("A", 1): "Reason: candidate 2 is right.\nChosen: 2\nFinal: \\boxed{5}",
               ("B", 1): "Reason: most agents say 1.\nChosen: 2\nFinal: \\boxed{1}",
               ("A", 2): "I like the first one.",
               ("B", 2): "Reason: 7 checks out.\nChosen: 4\nFinal: \\boxed{7}"}
    state = {"exec": {}, "central": {}}

    def script(r):
        content = text_of(r)
        task = "A" if "Problem: QA" in content else "B"
        if content.startswith("You are the Center Arbiter"):
            n = state["central"][task] = state["central"].get(task, 0) + 1
            return central[(task, n)]
        seen = state["exec"].setdefault(task, 0)
        state["exec"][task] += 1
        rnd, slot = divmod(seen, 4)
        return f"work ... \\boxed{{{slates[(task, rnd + 1)][slot]}}}"

    return script


def test_maestro_coverage_identification_on_scripted_slates():
    tasks = [math_task("a", "QA", "5"), math_task("b", "QB", "7")]
    engine = ScriptedEngine(maestro_script())
    run = run_setup("maestro_select", tasks, engine, SAMPLING, n_agents=2, k=2, rounds=2, epsilon=0,
                    shuffle_slate=False)
    assert [len(c) for c in engine.calls] == [8, 2, 8, 2] and run.waves == 4
    m = run.metrics
    assert (m["coverage_r1"], m["identification_r1"], m["accuracy_r1"]) == (1.0, 0.5, 0.5)
    assert (m["coverage_r2"], m["identification_r2"], m["accuracy_r2"]) == (0.5, 1.0, 0.5)
    assert (m["output_accuracy_r1"], m["output_accuracy_r2"]) == (0.5, 0.5)
    assert (m["coverage"], m["identification"], m["coverage_any"]) == (0.5, 1.0, 1.0)
    assert m["select_parse_failures"] == 1 and m["select_parse_failure_rate"] == 0.25 and m["explore_samples"] == 0
    a, b = run.results
    # A's round-2 central output does not parse: no selection is recorded; the round's output falls back to the first
    # shown (what the next round would build on), but the task has no answer: the strict headline counts it wrong
    assert a.final_response == "" and a.extracted is None and [x["chosen"] for x in a.info["rounds"]] == [1, None]
    assert [x["output"] for x in a.info["rounds"]] == [1, 0] and a.info["rounds"][1]["select_parse_failure"]
    assert b.extracted == "7" and b.info["rounds"][1]["chosen"] == 3
    # the central agent is greedy; execution agents sample at the setup's temperature
    assert {r.sampling.temperature for r in engine.calls[1]} == {0.0}
    assert {r.sampling.temperature for r in engine.calls[0]} == {0.7}
    # round 2 prompts: the agent's own previous solutions and the broadcast (index + justification)
    r2 = [text_of(r) for r in engine.calls[2]]
    a_agent1 = r2[0]
    assert "Your Previous Solutions: \n\nSolution 1:\nwork ... \\boxed{4}\n\nSolution 2:\nwork ... \\boxed{5}" in a_agent1
    # b_t names the chosen candidate (shown 2nd, agent-major: agent 1's 2nd) as the agent itself numbers it
    assert ("Center Arbiter's Feedback: The Center Arbiter chose Reasoning Agent #1's Solution 2. "
            "Justification: candidate 2 is right.") in a_agent1
    assert "Solution 1:\nwork ... \\boxed{4}\n\nSolution 2:\nwork ... \\boxed{4}" in r2[2]  # agent 2's own
    assert re.search(r"- Candidate 4: work \.\.\. \\boxed\{1\}", text_of(engine.calls[1][1]))
    assert "STRICT OUTPUT FORMAT:\nReason: {detailed justification}\nChosen: {candidate id}\nFinal: \\boxed{...}" \
        in text_of(engine.calls[1][0])


def test_maestro_epsilon_uses_the_base_prompt():
    tasks = [math_task("a", "QA", "5"), math_task("b", "QB", "7")]
    engine = ScriptedEngine(maestro_script())
    run = run_setup("maestro_select", tasks, engine, SAMPLING, n_agents=2, k=2, rounds=2, epsilon=1.0)
    assert not any("Previous Solutions" in text_of(r) for r in engine.calls[2])
    assert run.metrics["explore_samples"] == 8
    assert sum(t.meta.get("explore", False) for t in run.results[0].turns) == 4


def test_maestro_parse_failure_is_not_counted_as_a_selection():
    """Slate (5, 4) with 5 correct; the central output never parses. The old fallback to candidate 1 scored a
    correct identification; now the failure is a wrong pick, and only the output falls back."""
    slates = []

    def script(r):
        if text_of(r).startswith("You are the Center Arbiter"):
            return "I like the first one."
        slates.append(len(slates))
        return "work \\boxed{5}" if len(slates) == 1 else "work \\boxed{4}"

    engine = ScriptedEngine(script)
    run = run_setup("maestro_select", [math_task("a", "QA", "5")], engine, SAMPLING, n_agents=1, k=2, rounds=1,
                    shuffle_slate=False)
    m = run.metrics
    assert (m["coverage_r1"], m["identification_r1"], m["accuracy_r1"]) == (1.0, 0.0, 0.0)
    assert m["identification"] == 0.0 and m["output_accuracy_r1"] == 1.0 and m["select_parse_failures"] == 1
    [res] = run.results
    record = res.info["rounds"][0]
    assert (record["chosen"], record["output"], record["parsed"], record["select_parse_failure"]) == \
        (None, 0, False, True)
    assert (record["chosen_correct"], record["output_correct"]) == (False, True)
    assert res.final_response == "" and res.extracted is None  # no selection, no answer (the fallback is not one)
    assert record["broadcast"] == "The Center Arbiter made no valid selection."
    assert res.turns[-1].meta == {"chosen": None, "shown": None, "output": 0, "parsed": False}


def _picking_script(answers):
    """Execution agents answer ``answers[task][slot]`` (by call order per task); the central agent picks the
    displayed candidate that holds the correct answer (the task's question is ``Q<answer>``)."""
    state = {}

    def script(r):
        content = text_of(r)
        gold = re.search(r"Problem: Q(\d+)", content).group(1)
        if content.startswith("You are the Center Arbiter"):
            shown = re.findall(r"- Candidate (\d+): (?:slot \d+ )?work \\boxed\{(\d+)\}", content)
            k = next(j for j, ans in shown if ans == gold)
            return f"Reason: it checks out.\nChosen: {k}\nFinal: \\boxed{{{gold}}}"
        seen = state[gold] = state.get(gold, -1) + 1
        slot = seen % len(answers[gold])
        return f"slot {slot} work \\boxed{{{answers[gold][slot]}}}"

    return script


def test_maestro_slate_is_shown_shuffled_and_the_pick_is_mapped_back():
    answers = {str(g): [g + 1] * 4 for g in range(10, 16)}
    for g, where in zip(range(10, 16), [0, 1, 2, 3, 0, 3]):
        answers[str(g)][where] = g  # exactly one correct candidate per slate, at a known real index
    tasks = [math_task(f"t{g}", f"Q{g}", str(g)) for g in range(10, 16)]

    def run(seed):
        engine = ScriptedEngine(_picking_script(answers))
        return engine, run_setup("maestro_select", tasks, engine, SAMPLING, n_agents=2, k=2, rounds=2, epsilon=0,
                                 seed=seed)

    engine, result = run(0)
    orders = []
    for res, g in zip(result.results, range(10, 16)):
        for rec in res.info["rounds"]:
            assert sorted(rec["order"]) == [0, 1, 2, 3]
            where = answers[str(g)].index(g)
            assert rec["chosen"] == where == rec["output"] == rec["order"][rec["shown"] - 1]
            assert rec["chosen_correct"] and rec["parsed"]
            orders.append(tuple(rec["order"]))
        assert res.extracted == str(g)
    assert result.metrics["identification"] == 1.0 and result.metrics["accuracy_r1"] == 1.0
    assert any(o != (0, 1, 2, 3) for o in orders) and len(set(orders)) > 1  # shuffled, not one fixed order
    # the central prompt lists the candidates in the recorded order
    first = result.results[0].info["rounds"][0]["order"]
    prompt = text_of(engine.calls[1][0])
    assert re.findall(r"- Candidate \d+: slot (\d+)", prompt) == [str(i) for i in first]
    # deterministic per (seed, task, round); another seed gives other orders
    again = [tuple(x["order"]) for r in run(0)[1].results for x in r.info["rounds"]]
    other = [tuple(x["order"]) for r in run(1)[1].results for x in r.info["rounds"]]
    assert again == orders and other != orders


def test_maestro_history_keeps_the_end_of_long_solutions():
    long = "reasoning " * 40 + "so the total is \\boxed{5}"
    engine = ScriptedEngine(lambda r: "Reason: ok.\nChosen: 1\nFinal: \\boxed{5}"
                            if text_of(r).startswith("You are the Center Arbiter") else long)
    run_setup("maestro_select", [math_task("a", "QA", "5")], engine, SAMPLING, n_agents=1, k=1, rounds=2,
              epsilon=0, history_chars=40, candidate_chars=30)
    interactive = text_of(engine.calls[2][0])
    assert "Solution 1:\n... reasoning so the total is \\boxed{5}\nCenter Arbiter's Feedback" in interactive
    assert "- Candidate 1: ... so the total is \\boxed{5}" in text_of(engine.calls[1][0])


def test_maestro_agents_mapping():
    engine = ScriptedEngine(lambda r: "x")
    setup = make_setup("maestro_select", engine, SAMPLING, agents=["e0", "e1", "e2", "judge"])
    assert setup.central() == "judge" and [setup.agent(i) for i in range(3)] == ["e0", "e1", "e2"]
    assert make_setup("maestro_select", engine, SAMPLING, agents=["e0"]).central() == "e0"
    assert make_setup("maestro_select", engine, SAMPLING, agents=["e0", "e1"], central_agent=1).central() == "e1"
    run = run_setup("maestro_select", [math_task("a", "QA", "5")], engine, SAMPLING, agents=["e0", "e1", "e2", "j"],
                    rounds=1)
    assert [r.agent for r in engine.calls[0]] == ["e0"] * 3 + ["e1"] * 3 + ["e2"] * 3
    assert [r.agent for r in engine.calls[1]] == ["j"] and run.metrics["select_parse_failures"] == 1


def test_turn_records_keep_the_items_schema():
    """``selfevo eval`` writes each turn as a JSON record: its wave (the engine call), label, agent, text, ..."""
    import json

    engine = ScriptedEngine(lambda r: "\\boxed{2}")
    run = run_setup("maestro_select", [math_task("a", "QA", "2")], engine, SAMPLING, rounds=1, n_agents=1, k=2)
    records = json.loads(json.dumps(run.results[0].turn_records()))
    assert [list(r) for r in records] == [["wave", "label", "agent", "text", "slot", "round", "finish_reason",
                                           "n_tokens", "meta"]] * 3
    assert [(r["wave"], r["label"], r["slot"], r["round"], r["n_tokens"]) for r in records] == \
        [(1, "execution", 0, 1, 2), (1, "execution", 1, 1, 2), (2, "central", 0, 1, 2)]
    fallback = run.results[0].info["rounds"][0]["order"][0]  # unparsable: no choice, the first shown is output
    assert records[2]["meta"] == {"chosen": None, "shown": None, "output": fallback, "parsed": False}
    assert records[0]["meta"]["agent_index"] == 0


def test_an_engine_that_only_generates_gets_one_call_per_wave_and_a_streaming_one_streams():
    """One runner path: an engine without ``stream`` is served in waves (one ``generate`` call per wave of all
    tasks); an engine with ``stream`` is streamed, never asked to ``generate``."""

    class StreamingEngine(ScriptedEngine):
        def stream(self, source):
            raise AssertionError("streamed")

    tasks = [math_task("t1", "What is 1 + 0?", "1"), math_task("t2", "What is 0 + 1?", "1")]
    engine = ScriptedEngine(lambda r: "The answer is \\boxed{1}")
    run = make_setup("debate", engine, SAMPLING, n_agents=2, rounds=2).run(tasks)
    assert run.waves == 2 and [len(c) for c in engine.calls] == [4, 4]
    streaming = StreamingEngine(lambda r: "")
    with pytest.raises(AssertionError, match="streamed"):
        make_setup("vanilla", streaming, SAMPLING).run(tasks)
    assert streaming.calls == []
