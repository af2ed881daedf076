"""The MAESTRO rounds (selfevo.setups.maestro_rounds), shared by the recipe and the ``maestro_select`` setup: shape, one
engine call per wave, broadcast, own history, shuffled slate, parse failures recorded, the chained selection of small
models, metrics on hand-built slates, slates replayed from an eval's items, and coverage / identification."""
import re

import pytest

from helpers.maestro_engine import ScriptEngine, script
from selfevo.interaction import Episode, Runner, Turn
from selfevo.setups.maestro_rounds import (FINAL, FLOW_KEYS, ROUNDS, STAGE2_STOP, MaestroProtocol, RoundsCfg,
                                           coverage_identification, maestro_metrics, round_flows, round_state,
                                           with_final)
from selfevo.report.load import round_records
from selfevo.rewards import REWARD_SOURCES
from selfevo.roles.base import Parsed
from selfevo.roles.maestro import Central, Selection
from selfevo.types import Completion, Request, SamplingParams, Task
from selfevo.verifiers import verify

SAMPLING = SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.95)


def add_task(i: int) -> Task:
    return Task(f"q{i}", "math", f"What is {i} + {i + 2}?", str(2 * i + 2), meta={"verifier": "math"})


def verdict(task, text):
    return verify(task, text)


def run_protocol(tasks, answer=None, samples=0, sample_temperature=1.0, replay=None, **settings):
    """The rounds with two base-model executors and K=2, R=2, ε=0 unless ``settings`` (RoundsCfg keys) say else."""
    engine = ScriptEngine(answer=answer)
    cfg = RoundsCfg(**{"k": 2, "rounds": 2, "epsilon": 0.0, **settings})
    proto = MaestroProtocol(cfg, [None, None], "central", verdict, samples=samples,
                            sample_temperature=sample_temperature, replay=replay)
    episodes = Runner(engine, SAMPLING, seed="s").run([Episode(t) for t in tasks], proto.program)
    return engine, episodes


# ---- the protocol ----------------------------------------------------------------------------------------------
def test_protocol_shape_batching_broadcast_and_own_history():
    tasks = [add_task(i) for i in range(3)]
    engine, episodes = run_protocol(tasks, samples=3, sample_temperature=1.0)
    # one engine call per wave, all tasks together: 3 × (N·K = 4) candidates, then 3 × (1 greedy + G = 3 samples)
    assert [len(c) for c in engine.calls] == [12, 12, 12, 12]
    central_call = engine.calls[1]
    assert {r.agent for r in engine.calls[0]} == {None} and {r.agent for r in central_call} == {"central"}
    assert [r.sampling.temperature for r in central_call[:4]] == [0.0, 1.0, 1.0, 1.0]
    assert len({r.seed for c in engine.calls for r in c}) == 48  # keyed seeds never repeat
    for ep in episodes:
        roles = [t.label for t in ep.turns]
        assert roles == (["execution"] * 4 + ["central"] + ["central_sample"] * 3) * 2
        record = ep.meta["rounds"][0]
        for t in ep.turns[4:8]:  # every central turn refers to the slate in displayed order
            shown = [ep.turns[t.refs[f"candidate_{j}"]] for j in range(4)]
            assert [ep.turns.index(c) for c in shown] == record["order"]
        assert {t.meta["slate"] for t in ep.turns[5:8]} == {f"{ep.key}|r1"}
        # round 2: agent 0 sees its own two round-1 solutions (not agent 1's) and the broadcast
        prompt = ep.turns[8].completion.request.messages[-1]["content"]
        own, other = [t.text for t in ep.turns[:2]], [t.text for t in ep.turns[2:4]]
        assert f"Solution 1:\n{own[0]}\n\nSolution 2:\n{own[1]}\nCenter Arbiter's Feedback: " in prompt
        assert record["broadcast"] in prompt and (other[0] == own[0] or other[0] not in prompt.split("Feedback")[0])
        # b_t names the chosen solution as its agent numbers it (Reasoning Agent #a's Solution j), no answer
        if record["chosen"] is not None:
            a, j = divmod(record["chosen"], 2)
            assert record["broadcast"].startswith(f"The Center Arbiter chose Reasoning Agent #{a + 1}'s Solution "
                                                  f"{j + 1}. Justification: ") and "boxed" not in record["broadcast"]
        last = ep.meta["rounds"][-1]  # the final response: the chosen candidate, "" after a parse failure (strict)
        want = ep.turns[8 + last["chosen"]].text if last["chosen"] is not None else ""
        assert ep.meta["final"] == want


def test_every_mode_ends_with_round_records_a_report_draws():
    """The episode keys are spelled once (ROUNDS, FINAL); ``selfevo report`` draws a flow only from round records
    with FLOW_KEYS (:func:`selfevo.report.load.round_records`), so every central mode's records carry them."""
    for mode in ("select", "gen", "gen_sc"):
        _, episodes = run_protocol([add_task(1)], central_mode=mode, sc_samples=3)
        meta = episodes[0].meta
        assert {ROUNDS, FINAL} <= meta.keys() and isinstance(meta[FINAL], str), mode
        assert len(meta[ROUNDS]) == 2 and all(FLOW_KEYS <= r.keys() for r in meta[ROUNDS]), mode
        assert round_records(meta[ROUNDS]) is meta[ROUNDS], mode


def test_epsilon_one_gives_base_prompts_and_no_samples_without_training():
    engine, episodes = run_protocol([add_task(1)], epsilon=1.0)
    assert [len(c) for c in engine.calls] == [4, 1, 4, 1]  # G = 0: the greedy central output only
    assert not any("Previous Solutions" in r.messages[-1]["content"] for r in engine.calls[2])
    assert episodes[0].meta["rounds"][1]["explored"] == 4


def test_revision_prompts_sample_at_the_revision_temperature():
    """App. C.1: "for ... revision prompts, we reduce the temperature to 0.3": the interactive (revision) prompts of
    rounds >= 2 run at ``revision_temperature``; round 1 and ε-exploration samples (the base prompt) keep the
    runner's 0.7; null keeps 0.7 everywhere."""
    def temperatures(call):  # per request: (is it a revision prompt, its temperature)
        return [("Previous Solutions" in r.messages[-1]["content"], r.sampling.temperature) for r in call]

    engine, _ = run_protocol([add_task(1)], revision_temperature=0.3)
    assert temperatures(engine.calls[0]) == [(False, 0.7)] * 4  # round 1: the initial prompt
    assert temperatures(engine.calls[2]) == [(True, 0.3)] * 4  # round 2: every candidate revises
    assert engine.calls[1][0].sampling.temperature == 0.0  # the central agent stays greedy
    engine, _ = run_protocol([add_task(1)], revision_temperature=0.3, epsilon=1.0)
    assert temperatures(engine.calls[2]) == [(False, 0.7)] * 4  # ε-exploration: the base prompt, not a revision
    engine, _ = run_protocol([add_task(1)])
    assert temperatures(engine.calls[2]) == [(True, 0.7)] * 4  # null (the default): the sampling temperature
    from selfevo.algorithms.maestro import MaestroCfg
    from selfevo.config import ConfigError, load_config
    assert load_config(MaestroCfg, "maestro", "paper", []).protocol.revision_temperature == 0.3
    with pytest.raises(ConfigError, match="revision_temperature"):
        load_config(MaestroCfg, "maestro", "paper", ["protocol.revision_temperature=-1"])


def test_parse_failures_are_recorded_never_candidate_one():
    tasks = [add_task(i) for i in range(8)]
    _, episodes = run_protocol(tasks, samples=2)
    seen = {"ok": 0, "fail": 0}
    for ep in episodes:
        for rec, central in zip(ep.meta["rounds"], [t for t in ep.turns if t.label == "central"]):
            if central.parsed.ok:
                seen["ok"] += 1
                assert rec["chosen"] == rec["order"][central.parsed.value.index] == rec["output"]
            else:
                seen["fail"] += 1
                assert central.parsed.error in ("no 'Chosen: k' line after the reason",
                                                "chose candidate 11, but the slate has 4")
                assert rec["chosen"] is None and rec["select_parse_failure"] and not rec["chosen_correct"]
                assert rec["output"] == rec["order"][0] and rec["broadcast"].endswith("made no valid selection.")
    assert seen["ok"] and seen["fail"]
    res = REWARD_SOURCES.get("slate")(label="central_sample", on_parse_failure=-0.5)(episodes)
    for ep, rewards in zip(episodes, res.rewards):
        for i, r in rewards.items():
            t = ep.turns[i]
            assert r == (t.meta["slate_rewards"][t.parsed.value.index] if t.parsed.ok else -0.5)


def test_central_gen_and_self_consistency_modes():
    engine, episodes = run_protocol([add_task(1)], central_mode="gen")
    assert [len(c) for c in engine.calls] == [4, 1, 4, 1]
    rec = episodes[0].meta["rounds"][0]
    assert rec["chosen"] is None and rec["parsed"] and rec["chosen_correct"] == (rec["central_final"] == "4")
    assert "write your own complete solution" in engine.calls[1][0].messages[-1]["content"]
    engine, episodes = run_protocol([add_task(1)], central_mode="gen_sc", sc_samples=5)
    assert [len(c) for c in engine.calls] == [4, 5, 4, 5]
    rec = episodes[0].meta["rounds"][-1]
    answers = [re.search(r"boxed\{(\d)\}", t.text).group(1) for t in episodes[0].turns[-5:]]
    assert rec["central_final"] == max(set(answers), key=lambda a: (answers.count(a), -answers.index(a)))


# ---- the chained selection (small models) ----------------------------------------------------------------------------
def test_with_final_appends_the_chosen_candidates_answer_or_fails():
    central = Central()
    ctx = central.context(candidates=["work \\boxed{3}", "work \\boxed{7}"])
    parse = with_final(lambda text: central.parse(text, ctx), ["3", "7"])
    ok = parse("Reason: x\nChosen: Candidate 2")
    assert ok.ok and (ok.value.index, ok.value.reason, ok.value.final) == (1, "x", "7")
    assert parse("Reason: x\nChosen: Candidate 1").value.final == "3"
    assert parse("Reason: x\nChosen: Candidate 1 \t").value.final == "3"  # trailing blanks are no text
    assert parse("Reason: x\nChosen: Candidate 5").error == "chose candidate 5, but the slate has 2"
    assert parse("Reason: x\nChosen: Candidate 0").error == "chose candidate 0, but the slate has 2"
    for bad in ("Reason: x\nChosen: Candidate ", "Reason: x\nChosen: Candidate 2 is best",
                "Reason: x\nChosen: Candidate two"):  # no number or text after it: a failure, never candidate 1
        assert parse(bad).error == "no 'Chosen: k' line after the reason"
    assert parse("Reason: \nChosen: Candidate 2").error == "empty or repeated reason"


def chain_answer(picks: dict):
    """``script``, except that the number stage of task i's chained selections answers ``picks[i]``."""

    def answer(r: Request) -> str:
        if r.prefix.endswith("Chosen: Candidate "):
            return picks[int(re.search(r"What is (\d+) \+", r.messages[-1]["content"]).group(1))]
        return script(r)

    return answer


def test_chained_selection_asks_both_stages_and_records_failures():
    tasks = [add_task(i) for i in range(3)]
    # task 0 picks displayed candidate 2 (the engine cuts "2\nFinal" at the stop "\n"); task 1: 9 of 4; task 2: none
    engine, episodes = run_protocol(tasks, chain_answer({0: "2\nFinal", 1: "9", 2: "none"}), central_chain=True,
                                    samples=2, reason_tokens=5)
    assert [len(c) for c in engine.calls] == [12, 9, 9, 12, 9, 9]  # per round: candidates, rationales, numbers
    for stage1, stage2 in ((engine.calls[1], engine.calls[2]), (engine.calls[4], engine.calls[5])):
        assert {(r.prefix, r.sampling.stop, r.sampling.max_new_tokens) for r in stage1} == {("Reason:", ("Chosen",), 5)}
        assert {(r.sampling.stop, r.sampling.max_new_tokens) for r in stage2} == {(STAGE2_STOP, 3)}
        assert [r.sampling.temperature for r in stage1[:3]] == [r.sampling.temperature for r in stage2[:3]] \
            == [0.0, 1.0, 1.0]  # greedy, then the G samples, in both stages
    for i, ep in enumerate(episodes):
        one_round = ["execution"] * 4 + ["central_reason"] + ["central_sample_reason"] * 2 + ["central"] + \
            ["central_sample"] * 2
        assert [t.label for t in ep.turns] == one_round * 2
        for r, rec in enumerate(ep.meta["rounds"]):
            base = 10 * r
            cands, reasons, picks = ep.turns[base:base + 4], ep.turns[base + 4:base + 7], ep.turns[base + 7:base + 10]
            for g, (reason, pick) in enumerate(zip(reasons, picks)):
                assert reason.parsed is None and "Chosen" not in reason.text and reason.text.strip()
                assert pick.refs["rationale"] == base + 4 + g  # stage 2 refers to its own rationale
                assert pick.completion.request.prefix == f"Reason: {reason.text.strip()}\nChosen: Candidate "
                assert [reason.refs[f"candidate_{j}"] for j in range(4)] == [base + o for o in rec["order"]]
                assert {k: v for k, v in pick.refs.items() if k != "rationale"} == reason.refs
                assert reason.meta.get("slate") == pick.meta.get("slate") == (f"{ep.key}|r{r + 1}" if g else None)
            sel = picks[0].parsed
            if i == 0:  # displayed candidate 2 = the real candidate order[1]; Final is that candidate's own answer
                assert all(p.parsed.ok and p.parsed.value.index == 1 for p in picks)
                assert sel.value.reason == reasons[0].text.strip()
                assert rec["chosen"] == rec["output"] == rec["order"][1] and rec["shown"] == 2 and rec["parsed"]
                shown = cands[rec["order"][1]]
                assert rec["central_final"] == sel.value.final == verdict(ep.task, shown.text).extracted
                a, j = divmod(rec["order"][1], 2)  # b_t names the solution as its agent knows it, without answer
                assert rec["broadcast"].startswith(f"The Center Arbiter chose Reasoning Agent #{a + 1}'s Solution "
                                                   f"{j + 1}. Justification: ")
            else:  # recorded failures, never a default candidate
                assert sel.error == ("chose candidate 9, but the slate has 4" if i == 1
                                     else "no 'Chosen: k' line after the reason")
                assert not any(p.parsed.ok for p in picks) and rec["chosen"] is None and rec["select_parse_failure"]
                assert rec["output"] == rec["order"][0] and rec["broadcast"].endswith("made no valid selection.")
    m = maestro_metrics([ep.meta["rounds"] for ep in episodes], 2)
    assert m["select_parse_failures"] == 4 and m["select_parse_failure_rate"] == pytest.approx(2 / 3)


def test_slate_source_credits_the_rationale_turn():
    def turn(role, text="", parsed=None, **refs):
        req = Request("central", [{"role": "user", "content": "q"}])
        return Turn("central", role, Completion(req, [1], [2], [0.0], text, "stop"), parsed, refs=refs)

    pick = Parsed.success(Selection(1, "r", "4"))
    slate = {"candidate_0": 1, "candidate_1": 0}  # displayed: the wrong candidate (5) first, then the right one (4)
    ep = Episode(add_task(1), [turn("execution", "\\boxed{4}"), turn("execution", "\\boxed{5}"),
                               turn("central_reason", " r"), turn("central_sample_reason", " a"),
                               turn("central_sample_reason", " b"), turn("central", "1", pick, rationale=2, **slate),
                               turn("central_sample", "2", pick, rationale=3, **slate),
                               turn("central_sample", "9", Parsed.failure("chose candidate 9, but the slate has 2"),
                                    rationale=4, **slate)])
    res = REWARD_SOURCES.get("slate")(label="central_sample", on_parse_failure=-0.5, credit_refs=["rationale"])([ep])
    assert res.rewards == [{6: 1.0, 3: 1.0, 7: -0.5, 4: -0.5}]  # each rationale: its selector's reward
    assert all(ep.turns[i].meta["slate_rewards"] == [0.0, 1.0] for i in (3, 4, 6, 7))
    assert "slate_rewards" not in ep.turns[2].meta  # the greedy pair is not a training sample
    assert res.metrics == {"select_parse_failure_rate": 0.5, "coverage": 1.0}
    plain = REWARD_SOURCES.get("slate")(label="central_sample", on_parse_failure=-0.5)([ep])
    assert plain.rewards == [{6: 1.0, 7: -0.5}]  # without credit_refs the rationales stay unrewarded

# ---- metrics ------------------------------------------------------------------------------------------------------
def rec(correct, chosen, parsed=True, output=None):
    output = chosen if chosen is not None else 0
    return {"correct": correct, "covered": any(correct), "chosen_correct": chosen is not None and correct[chosen],
            "output_correct": correct[output], "parsed": parsed, "explored": 1}


def test_metrics_on_hand_built_slates():
    # task A: r1 slate (F,T) picks 1 (right); r2 slate (F,F) picks 0. task B: r1 (T,F) fails to parse; r2 (T,T) picks 1
    records = [[rec([False, True], 1), rec([False, False], 0)],
               [rec([True, False], None, parsed=False), rec([True, True], 1)]]
    m = maestro_metrics(records, 2)
    assert (m["coverage_r1"], m["identification_r1"], m["accuracy_r1"]) == (1.0, 0.5, 0.5)
    assert (m["coverage_r2"], m["identification_r2"], m["accuracy_r2"]) == (0.5, 1.0, 0.5)
    assert (m["select_parse_failure_rate_r1"], m["select_parse_failure_rate_r2"]) == (0.5, 0.0)
    assert m["output_accuracy_r1"] == 1.0  # B's failed round outputs its first shown candidate, which is correct
    assert (m["coverage"], m["identification"], m["coverage_any"]) == (0.5, 1.0, 1.0)
    assert (m["select_parse_failures"], m["select_parse_failure_rate"], m["explore_samples"]) == (1, 0.25, 4)
    assert maestro_metrics([[rec([False], 0)]], 1)["identification_r1"] is None  # no coverage: q undefined


def test_replayed_slates_give_the_same_records_without_generating_candidates(tmp_path):
    """Round 1 replayed from an eval's items.jsonl: the same candidates, slate order and central pick as the run
    that generated them, with no candidate call; a task missing from the file is a one-line error."""
    import json

    from selfevo.setups.maestro_rounds import read_replay

    tasks = [add_task(i) for i in range(3)]
    engine0, first = run_protocol(tasks, rounds=1)
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": ep.task.id, "responses": [
        {"role": t.label, "round": t.round, "slot": t.slot, "text": t.text} for t in ep.turns]}) + "\n"
        for ep in first))
    replay = read_replay(str(path))
    assert replay[tasks[0].id] == [t.text for t in first[0].turns if t.label == "execution"]
    engine, again = run_protocol(tasks, rounds=1, replay=replay)
    assert len(engine.calls) == 1 and {r.agent for r in engine.calls[0]} == {"central"}  # only the selection
    # the central agent sees the very same prompts (its request seeds differ: one engine call fewer; the greedy
    # selection of a real model does not depend on them)
    assert [r.messages for r in engine.calls[0]] == [r.messages for r in engine0.calls[1]]
    for a, b in zip(first, again):
        ra, rb = a.meta["rounds"][0], b.meta["rounds"][0]
        assert (ra["order"], ra["correct"]) == (rb["order"], rb["correct"])
    with pytest.raises(ValueError, match="has no candidate"):
        run_protocol([add_task(7)], rounds=1, replay=replay)
    (tmp_path / "bad.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl line 1: not a maestro_select item"):
        read_replay(str(tmp_path / "bad.jsonl"))


# ---- coverage and identification (the maestro_select setup's metrics) ---------------------------------------
def test_coverage_identification_formula():
    m = coverage_identification([[False, True], [False, False], [True, True], [True, False]], [1, 0, 0, 1])
    assert m == {"coverage": 0.75, "identification": pytest.approx(2 / 3), "accuracy": 0.5}
    assert coverage_identification([[False]], [0])["identification"] is None


def test_failed_selection_counts_as_a_wrong_pick():
    """None = the central output did not parse: never read as a pick of candidate 1 (which is correct here)."""
    m = coverage_identification([[True, False], [True, True], [False, True]], [None, 0, None])
    assert m == {"coverage": 1.0, "identification": pytest.approx(1 / 3), "accuracy": pytest.approx(1 / 3)}
    assert coverage_identification([[True]], [None]) == {"coverage": 1.0, "identification": 0.0, "accuracy": 0.0}


# ---- the flow of answers between rounds ----------------------------------------------------------------------
def flow_rec(correct, chosen, parsed=True, final="x"):
    """A round record as the protocol writes it (Central-Select; ``chosen=None, parsed=True``: Central-Gen)."""
    hit = correct[chosen] if chosen is not None else final == "ok"
    return {"correct": correct, "covered": any(correct), "chosen": chosen, "parsed": parsed,
            "central_final": final if parsed else None, "chosen_correct": parsed and hit}


def test_round_state_of_each_outcome():
    assert round_state(flow_rec([False, True], 1)) == "correct"
    assert round_state(flow_rec([False, True], 0)) == "missed"  # a correct candidate was there
    assert round_state(flow_rec([False, False], 0)) == "uncovered"
    assert round_state(flow_rec([True, True], None, parsed=False)) == "no_answer"  # a parse failure, even if covered
    assert round_state(flow_rec([True], None, final="ok")) == "correct"  # Central-Gen: its own answer
    assert round_state(flow_rec([True], None, final="no")) == "missed"
    assert round_state(flow_rec([True], None, final=None)) == "no_answer"  # Central-Gen wrote no final answer


def test_round_flows_on_hand_made_records():
    C, M, U, F = (flow_rec([True, False], 0), flow_rec([True, False], 1), flow_rec([False, False], 0),
                  flow_rec([True, False], None, parsed=False))
    # five questions over three rounds: C C C | M C C | U M C | F C M | C M M
    records = [[C, C, C], [M, C, C], [U, M, C], [F, C, M], [C, M, M]]
    out = round_flows(records)
    assert (out["n"], out["rounds"], out["states"]) == (5, 3, ["correct", "missed", "uncovered", "no_answer"])
    assert [c["counts"] for c in out["columns"]] == [
        {"correct": 2, "missed": 1, "uncovered": 1, "no_answer": 1},
        {"correct": 3, "missed": 2, "uncovered": 0, "no_answer": 0},
        {"correct": 3, "missed": 2, "uncovered": 0, "no_answer": 0}]
    flows = {(f["from"], f["source"], f["target"]): f["count"] for f in out["flows"]}
    assert flows == {(1, "correct", "correct"): 1, (1, "correct", "missed"): 1, (1, "missed", "correct"): 1,
                     (1, "uncovered", "missed"): 1, (1, "no_answer", "correct"): 1,
                     (2, "correct", "correct"): 2, (2, "correct", "missed"): 1, (2, "missed", "correct"): 1,
                     (2, "missed", "missed"): 1}
    assert [(f["from"], f["source"], f["target"]) for f in out["flows"]][:3] == [
        (1, "correct", "correct"), (1, "correct", "missed"), (1, "missed", "correct")]  # source, then target order
    # round 1 -> 2: C->C, M->C, U->M, F->C, C->M; round 2 -> 3: C->C, C->C, M->C, C->M, M->M
    assert out["transitions"] == [
        {"from": 1, "to": 2, "correct_correct": 1, "correct_wrong": 1, "wrong_correct": 2, "wrong_wrong": 1},
        {"from": 2, "to": 3, "correct_correct": 2, "correct_wrong": 1, "wrong_correct": 1, "wrong_wrong": 1}]
    assert sum(f["count"] for f in out["flows"] if f["from"] == 1) == 5


def test_round_flows_of_one_round_and_of_nothing():
    one = round_flows([[flow_rec([True], 0)], [flow_rec([False], 0)]])
    assert one["columns"] == [{"round": 1, "counts": {"correct": 1, "missed": 0, "uncovered": 1, "no_answer": 0}}]
    assert one["flows"] == [] and one["transitions"] == []
    assert round_flows([]) == {"n": 0, "rounds": 0, "states": ["correct", "missed", "uncovered", "no_answer"],
                               "columns": [], "flows": [], "transitions": []}
