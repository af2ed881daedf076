"""MAESTRO / CLPO: the shared protocol (shape, one engine call per wave, broadcast, own history, shuffled slate,
parse failures recorded), metrics on hand-built slates, every CLPO term against hand-worked numbers (degenerate
cases included), the entropy kernel, the ``clpo`` optimizer on a tiny fp32 model (only the central adapter moves),
the recipe end to end with resume, trainers and ablation switches, and ``selfevo eval`` with ``central_adapter``."""
import json
import math
import re
from pathlib import Path

import pytest
import torch

from helpers.maestro_engine import ScriptEngine, script  # registers engine "maestro_script"
from helpers.paths import DATA, needs_data
from selfevo import cli
from selfevo.algorithms.maestro import clpo_rows, span_mask
from selfevo.protocols.maestro import STAGE2_STOP, MaestroProtocol, RoundsCfg, maestro_metrics, with_final
from selfevo.interaction import Episode, Runner, Turn
from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, ClpoCfg, Samples
from selfevo.optimizers.clpo import choice_advantages, slate_steps, slate_terms
from selfevo.optimizers.objectives import entropy_from_logits
from selfevo.policy import SeqBatch
from selfevo.policy.logprobs import chosen_entropy
from selfevo.rewards import REWARD_SOURCES
from selfevo.roles.base import Parsed
from selfevo.roles.maestro import Central, Selection, candidate_view, central_spans, read_selection
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
        roles = [t.role for t in ep.turns]
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
        assert ep.meta["final"] in [t.text for t in ep.turns[8:12]]


def test_epsilon_one_gives_base_prompts_and_no_samples_without_training():
    engine, episodes = run_protocol([add_task(1)], epsilon=1.0)
    assert [len(c) for c in engine.calls] == [4, 1, 4, 1]  # G = 0: the greedy central output only
    assert not any("Previous Solutions" in r.messages[-1]["content"] for r in engine.calls[2])
    assert episodes[0].meta["rounds"][1]["explored"] == 4


def test_parse_failures_are_recorded_never_candidate_one():
    tasks = [add_task(i) for i in range(8)]
    _, episodes = run_protocol(tasks, samples=2)
    seen = {"ok": 0, "fail": 0}
    for ep in episodes:
        for rec, central in zip(ep.meta["rounds"], [t for t in ep.turns if t.role == "central"]):
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
    res = REWARD_SOURCES.get("slate")(role="central_sample", on_parse_failure=-0.5)(episodes)
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


def test_strict_selection_and_lenient_spans():
    text = "Reason: cand 2 adds up.\nChosen: 2\nFinal: \\boxed{\\frac{1}{2}} trailing"
    sel = read_selection(text, 3)
    assert (sel.index, sel.reason, sel.final) == (1, "cand 2 adds up.", "\\frac{1}{2}")
    assert text[slice(*sel.reason_span)] == "cand 2 adds up."
    assert text[slice(*sel.decision_span)] == "Chosen: 2\nFinal: \\boxed{\\frac{1}{2}}"
    assert central_spans(text) == (sel.reason_span, sel.decision_span)
    assert read_selection("Reason: x\nChosen: 4\nFinal: \\boxed{1}", 3) == "chose candidate 4, but the slate has 3"
    assert read_selection("Chosen: 1\nFinal: \\boxed{1}", 3) == "no 'Reason:' line"
    bad = "Reason: long story\nChosen: 9"
    assert central_spans(bad) == ((8, 18), (19, 28)) and bad[19:28] == "Chosen: 9"
    assert central_spans("Reason: rambling with no decision") == ((8, 33), None)
    assert central_spans("no labels at all") == (None, None)


def test_candidate_views():
    text = "First 2 + 3 = 5, so \\boxed{5}. Check: \\boxed{5}"
    assert candidate_view(text, "both") == text
    assert candidate_view(text, "answer") == "Final answer: \\boxed{5}"
    hidden = candidate_view(text, "reason")
    assert "boxed" not in hidden and hidden.count("[final answer hidden]") == 2 and hidden.startswith("First 2 + 3")
    prompt = Central(view="answer").messages(add_task(1), candidates=["work \\boxed{7}", "no answer"])
    assert "- Candidate 1: Final answer: \\boxed{7}\n- Candidate 2: (no final answer)" in prompt[-1]["content"]



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
        assert [t.role for t in ep.turns] == one_round * 2
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
                assert rec["broadcast"].startswith(f"The Center Arbiter chose Candidate 2 (final answer "
                                                   f"\\boxed{{{sel.value.final}}})")
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
    res = REWARD_SOURCES.get("slate")(role="central_sample", on_parse_failure=-0.5, credit_refs=["rationale"])([ep])
    assert res.rewards == [{6: 1.0, 3: 1.0, 7: -0.5, 4: -0.5}]  # each rationale: its selector's reward
    assert all(ep.turns[i].meta["slate_rewards"] == [0.0, 1.0] for i in (3, 4, 6, 7))
    assert "slate_rewards" not in ep.turns[2].meta  # the greedy pair is not a training sample
    assert res.metrics == {"select_parse_failure_rate": 0.5, "coverage": 1.0}
    plain = REWARD_SOURCES.get("slate")(role="central_sample", on_parse_failure=-0.5)([ep])
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


# ---- CLPO terms, by hand ------------------------------------------------------------------------------------------
LOGP = torch.tensor([[-1.0, -2.0, -0.5, -0.5],
                     [-0.5, -1.0, -3.0, -1.0],
                     [-2.0, -0.2, -0.4, -0.6]])
RATIONALE = torch.tensor([[1.0, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
DECISION = torch.tensor([[0.0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]])  # row 2 made no decision


def lse(*xs):
    return math.log(sum(math.exp(x) for x in xs))


def test_choice_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0])
    assert choice_advantages(r, [0, 0, 0], torch.full((3,), 1 / 3)).tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    # without the slate's candidate mean: the group mean of the rows; a group of equal rewards gets 0
    got = choice_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["a", "a", "b", "b"])
    assert got.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert choice_advantages(torch.tensor([0.7]), ["solo"]).tolist() == [0.0]  # one candidate: A = r - r = 0


def test_slate_terms_by_hand():
    adv, rewards = torch.tensor([2 / 3, -1 / 3, -1 / 3]), torch.tensor([1.0, 0.0, 0.0])
    l_choice, l_rank = slate_terms(LOGP, DECISION, RATIONALE, adv, rewards)
    # decision log-probs: row 0: -0.5 - 0.5 = -1; row 1: -3 - 1 = -4; row 2 has none (left out, 2 rows count)
    assert float(l_choice) == pytest.approx(-(2 / 3 * -1.0 + -1 / 3 * -4.0) / 2)  # = -1/3
    # rationale scores (mean log-prob): s = (-1.5, -0.75, -2.0); order by reward: row 0, then the tie 1, 2
    s0, s1, s2 = -1.5, -0.75, -2.0
    assert float(l_rank) == pytest.approx(-((s0 - lse(s0, s1, s2)) + (s1 - lse(s1, s2))))
    # ties follow the order ListMLE is given: shuffled (2, 1, 0) ranks row 2 before row 1
    _, shuffled = slate_terms(LOGP, DECISION, RATIONALE, adv, rewards, order=[2, 1, 0])
    assert float(shuffled) == pytest.approx(-((s0 - lse(s0, s2, s1)) + (s2 - lse(s2, s1))))


def test_slate_terms_degenerate_cases():
    zeros = torch.zeros(3)
    l_choice, _ = slate_terms(LOGP, DECISION, RATIONALE, choice_advantages(torch.ones(3), [0, 0, 0]), torch.ones(3))
    assert float(l_choice) == 0.0  # all-equal rewards: zero advantage, no choice signal
    _, tied = slate_terms(LOGP, DECISION, RATIONALE, zeros, torch.ones(3))
    assert float(tied) == 0.0  # ... and no order to rank: L_rank 0 (not a random order of ties)
    one_c, one_r = slate_terms(LOGP[:1], DECISION[:1], RATIONALE[:1], zeros[:1], torch.ones(1))
    assert (float(one_c), float(one_r)) == (0.0, 0.0)  # one candidate: A = 0 and a list of one has ListMLE loss 0
    empty = RATIONALE.clone()
    empty[1] = 0  # row 1 has no rationale tokens: left out of the list
    _, l_rank = slate_terms(LOGP, DECISION, empty, zeros, torch.tensor([1.0, 0.0, 0.0]))
    assert float(l_rank) == pytest.approx(-(-1.5 - lse(-1.5, -2.0)))
    no_dec, _ = slate_terms(LOGP, torch.zeros_like(DECISION), RATIONALE, torch.ones(3), torch.ones(3))
    assert float(no_dec) == 0.0  # nobody decided: no choice term (and no division by zero)
    logp = LOGP.clone().requires_grad_(True)
    c, r = slate_terms(logp, DECISION, RATIONALE, torch.tensor([1.0, -1.0, 0.0]), torch.tensor([1.0, 0.0, 0.0]))
    (c + r).backward()
    assert torch.all(logp.grad[DECISION + RATIONALE == 0] == 0)  # only decision and rationale tokens get gradient
    logp.grad = None
    c, _ = slate_terms(logp, DECISION, RATIONALE, torch.tensor([1.0, -1.0, 0.0]), torch.ones(3))
    c.backward()
    assert torch.all(logp.grad[RATIONALE > 0] == 0)  # L_choice never touches the rationale


def test_slate_steps_keep_slates_whole():
    gen = torch.Generator().manual_seed(0)
    groups = [0, 0, 1, 1, 1, 2, 3, 3]
    steps = slate_steps(groups, 3, gen)
    assert sorted(i for s in steps for i in s) == list(range(8)) and all(len(s) >= 3 for s in steps[:-1])
    for g in set(groups):  # every slate lies in exactly one step, whole
        members = {i for i, x in enumerate(groups) if x == g}
        assert sum(members <= set(s) for s in steps) == 1
    assert slate_steps([0, 1, 1], 0, gen) == [[0, 1, 2]]


def test_chosen_entropy_matches_the_full_softmax_and_its_gradient():
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(5, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    weight = torch.randn(11, 4, generator=gen, dtype=torch.float64)
    ref_h = hidden.detach().clone().requires_grad_(True)
    want = entropy_from_logits(ref_h @ weight.t())
    got = chosen_entropy(hidden, weight, chunk=2)
    assert torch.allclose(got.double(), want.double(), atol=1e-6)
    g = torch.randn(5, generator=gen, dtype=torch.float64)
    (got.double() * g).sum().backward()
    (want.double() * g).sum().backward()
    assert torch.allclose(hidden.grad, ref_h.grad, atol=1e-5)


# ---- the clpo optimizer on a tiny model -----------------------------------------------------------------------------
ROWS = [  # (prompt, rationale, decision, reward) — two slates of two sampled central outputs
    ("Slate one?", " cand 1 adds up.", "\nChosen: 1\nFinal: \\boxed{2}", 1.0),
    ("Slate one?", " cand 2 is off.", "\nChosen: 2\nFinal: \\boxed{3}", 0.0),
    ("Slate two?", " cand 1 looks fine.", "\nChosen: 1\nFinal: \\boxed{5}", 0.0),
    ("Slate two?", " no idea", "", 0.0),
]


def clpo_samples(store):
    tok = store.backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts, comps, dec, rat = [], [], [], []
    for prompt, rationale, decision, _ in ROWS:
        r, d = ids(rationale), ids(decision)
        prompts.append(ids(prompt))
        comps.append(r + d)
        rat.append([1.0] * len(r) + [0.0] * len(d))
        dec.append([0.0] * len(r) + [1.0] * len(d))
    batch = SeqBatch.build(prompts, comps, tok.pad_token_id)

    def grid(values):
        out = torch.zeros_like(batch.loss_mask)
        for i, (p, v) in enumerate(zip(prompts, values)):
            out[i, len(p):len(p) + len(v)] = torch.tensor(v)
        return out

    batch = batch.with_extras(decision=grid(dec), rationale=grid(rat), slate_mean=torch.tensor([0.5, 0.5, 0.25, 0.25]))
    return Samples(batch, torch.tensor([r[3] for r in ROWS]), ["s1", "s1", "s2", "s2"])


def snapshot(store):
    return {n: p.detach().clone() for n, p in store.backbones["tiny-random"].model.named_parameters()}


def test_clpo_trains_only_the_central_adapter_and_reports_eq8(make_store):
    store = make_store(agents=("central", "other"), micro_batch=2)
    samples = clpo_samples(store)
    opt = OPTIMIZERS.get("clpo")(TrainerCfg(kl_coef=0.1, kl_estimator="k3"), ClpoCfg(lambda_rank=0.5,
                                                                                       lambda_ent=0.01))
    before = snapshot(store)
    with torch.no_grad():
        logp, ent = store.token_logprobs("central", samples.batch, entropy=True)
    stats = opt(store, "central", samples)
    after = snapshot(store)
    moved = lambda who: sum(float((after[n] - before[n]).abs().sum()) for n in before  # noqa: E731
                            if ("lora_" in n and f".{who}." in n) or (who == "base" and "lora_" not in n))
    assert moved("central") > 0 and moved("other") == 0 and moved("base") == 0
    assert store.versions == {"central": 1, "other": 0} and stats["optimizer_steps"] == 1 and stats["slates"] == 2
    # the terms it reports are Eq. 6-8 on the store's own log-probs (a fresh adapter: π = π_ref, KL = 0)
    x, adv = samples.batch.extras, samples.rewards - samples.batch.extras["slate_mean"]
    want_choice = sum(float(slate_terms(logp[r], x["decision"][r], x["rationale"][r], adv[r], samples.rewards[r])[0])
                      for r in ([0, 1], [2, 3])) / 2
    assert stats["choice"] == pytest.approx(want_choice, rel=1e-4)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    mask = samples.batch.loss_mask
    assert stats["entropy"] == pytest.approx(float((ent * mask).sum() / mask.sum()), rel=1e-4)
    assert stats["loss"] == pytest.approx(stats["choice"] + 0.5 * stats["rank"] + 0.1 * stats["kl"]
                                          - 0.01 * stats["entropy"], rel=1e-4)


def test_clpo_ablation_switches_and_defaults(make_store):
    store = make_store(agents=("central",), micro_batch=4)
    samples = clpo_samples(store)
    no_choice = OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice=False, lambda_rank=1.0, lambda_ent=0.0))(
        store, "central", samples)
    assert no_choice["loss"] == pytest.approx(1.0 * no_choice["rank"], rel=1e-5)
    no_rank = OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(rank=False, lambda_ent=0.0))(store, "central",
                                                                                          samples)
    assert no_rank["loss"] == pytest.approx(no_rank["choice"], rel=1e-5)
    # plain samples (no masks): every completion token is a decision token, no rationale, groups by prompt
    plain = Samples(SeqBatch(samples.batch.input_ids, samples.batch.attention_mask, samples.batch.loss_mask),
                    samples.rewards)
    stats = OPTIMIZERS.get("clpo")(TrainerCfg(epochs=2, train_batch=2))(store, "central", plain)
    assert stats["rank"] == 0.0 and stats["optimizer_steps"] == 4 and stats["slates"] == 2


# ---- CLPO's masks from a central output ------------------------------------------------------------------------------
def test_clpo_rows_mask_decision_and_rationale_tokens(make_store):
    tok = make_store(agents=("central",)).backbones["tiny-random"].tokenizer
    text = " cand 2 is right.\nChosen: 2\nFinal: \\boxed{5} ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    req = Request("central", [{"role": "user", "content": "q"}], prefix="Reason:")
    turn = Turn("central", "central_sample", Completion(req, [1], ids, [0.0] * len(ids), text, "stop"),
                meta={"slate_rewards": [1.0, 0.0, 0.0, 1.0]})
    rows = clpo_rows(tok)(turn)
    pick = lambda mask: tok.decode([i for i, m in zip(ids, mask) if m])  # noqa: E731
    assert pick(rows["decision"]).strip() == "Chosen: 2\nFinal: \\boxed{5}"
    assert pick(rows["rationale"]).strip() == "cand 2 is right."
    assert rows["slate_mean"] == 0.5 and not any(a and b for a, b in zip(rows["decision"], rows["rationale"]))
    assert span_mask([2, 5, 9], (3, 6), 0) == [0.0, 1.0, 1.0] and span_mask([2, 5], None, 0) == [0.0, 0.0]



def test_clpo_rows_of_a_chained_pair(make_store):
    tok = make_store(agents=("central",)).backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    msgs, meta = [{"role": "user", "content": "q"}], {"slate_rewards": [1.0, 0.0, 0.0, 0.0]}

    def turn(role, prefix, text, generated):
        comp = Completion(Request("central", msgs, prefix=prefix), [1], generated, [0.0] * len(generated), text, "stop")
        return Turn("central", role, comp, meta=dict(meta))

    # stage 1: generated through the stop string "Chosen", its text cut before it (as the engines do)
    gen = ids(" cand 2 is right.\nChosen")
    rows = clpo_rows(tok)(turn("central_sample_reason", "Reason:", " cand 2 is right.\n", gen))
    assert tok.decode([i for i, m in zip(gen, rows["rationale"]) if m]).strip() == "cand 2 is right."
    assert rows["rationale"][-3:] == [0.0, 0.0, 0.0] and rows["decision"] == [0.0] * len(gen)  # "\n", "Ch", "osen"
    assert rows["slate_mean"] == 0.25
    # stage 2: only the generated number (not the stop token after it) is decision; the given rationale is prompt
    prefix = "Reason: cand 2 is right.\nChosen: Candidate "
    for text, generated, decision in (("2", "2\n", [1.0, 0.0]), ("12", "12\n", [1.0, 1.0, 0.0]), ("9", "9", [1.0])):
        rows = clpo_rows(tok)(turn("central_sample", prefix, text, ids(generated)))
        assert rows["decision"] == decision and rows["rationale"] == [0.0] * len(decision)

# ---- the recipe ----------------------------------------------------------------------------------------------------
def question_file(tmp_path: Path) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "domain": "math", "question": f"What is {i} + {i + 2}?",
                                        "reference": str(2 * i + 2)}) + "\n" for i in range(6)))
    return path


def args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "maestro", "model.backbones=[tiny-random]", "model.dtype=float32", "engine.name=maestro_script",
            "trainer.tasks_per_step=3", "protocol.central_samples=3", "trainer.lr=1e-2", "seed=3",
            f"data.tasks=[{question_file(tmp_path)}]", f"output_dir={out}", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_recipe_end_to_end_with_resume(tmp_path):
    out, ref = tmp_path / "run", tmp_path / "ref"
    steady = "trainer.lr_schedule=constant"  # cosine depends on max_steps, which the resumed run raises
    assert cli.main(args(tmp_path, out, "trainer.max_steps=2", steady)) == 0
    assert cli.main(args(tmp_path, out, "trainer.max_steps=3", "resume=true", steady)) == 0
    assert cli.main(args(tmp_path, ref, "trainer.max_steps=3", steady)) == 0
    metrics = lines(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for m in metrics:
        for key in ("accuracy", "coverage", "identification", "select_parse_failure_rate", "coverage_r1",
                    "identification_r2", "accuracy_r2", "select_parse_failure_rate_r1"):
            assert key in m
        train = m["train"]["central"]
        assert set(train) >= {"choice", "rank", "kl", "entropy"} and train["optimizer_steps"] == 1
        assert list(m["train"]) == ["central"]  # frozen execution agents: no adapter, nothing else trains
    strip = lambda m: {k: v for k, v in m.items() if k not in ("rollout_s", "update_s", "step_s")}  # noqa: E731
    assert [strip(m) for m in metrics] == [strip(m) for m in lines(ref / "metrics.jsonl")]  # resume = uninterrupted
    assert (out / "adapters" / "final" / "central" / "adapter_config.json").exists()
    assert sorted(p.name for p in (out / "checkpoint" / "adapters").iterdir()) == ["central"]
    episode = lines(out / "episodes.jsonl")[0]
    assert len(episode["rounds"]) == 2 and "final" in episode  # the cpu preset: R = 2
    samples = [t for t in episode["turns"] if t["role"] == "central_sample"]
    assert samples and all("slate_rewards" in t and t["reward"] is not None for t in samples)



def test_recipe_chained_selection_trains_both_stages(tmp_path, monkeypatch):
    import selfevo.algorithms.maestro as recipe
    from safetensors.torch import load_file

    seen, real = [], recipe.clpo_rows

    def spy(tok):  # records the CLPO masks of every row the recipe trains on
        extras = real(tok)

        def rows(turn):
            out = extras(turn)
            seen.append((turn.role, sum(out["decision"]), sum(out["rationale"])))
            return out

        return rows

    monkeypatch.setattr(recipe, "clpo_rows", spy)
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.rounds=1", "protocol.central_chain=true")) == 0
    [m] = lines(out / "metrics.jsonl")
    assert m["train"]["central"]["optimizer_steps"] == 1 and "select_parse_failure_rate" in m
    # 3 questions × G = 3: nine rationale rows (rationale tokens only) and nine number rows (decision tokens only)
    reasons = [s for s in seen if s[0] == "central_sample_reason"]
    numbers = [s for s in seen if s[0] == "central_sample"]
    assert len(reasons) == len(numbers) == 9 and len(seen) == 18
    assert all(d == 0 and r > 0 for _, d, r in reasons) and all(d > 0 and r == 0 for _, d, r in numbers)
    for episode in lines(out / "episodes.jsonl"):
        turns = episode["turns"]
        assert [t["role"] for t in turns] == ["execution"] * 4 + ["central_reason"] + \
            ["central_sample_reason"] * 3 + ["central"] + ["central_sample"] * 3
        assert turns[4]["reward"] is None and turns[8]["reward"] is None  # the greedy pair is not trained
        assert [t["reward"] for t in turns[5:8]] == [t["reward"] for t in turns[9:12]]
        assert all(t["reward"] is not None and "slate_rewards" in t for t in turns[5:8] + turns[9:12])
    state = load_file(str(out / "adapters" / "final" / "central" / "adapter_model.safetensors"))
    assert any(float(v.abs().sum()) > 0 for k, v in state.items() if "lora_B" in k)  # fresh adapters have B = 0

@pytest.mark.parametrize("optimizer", ["grpo", "sft", "none"])
def test_baseline_trainers_run(tmp_path, optimizer):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", f"trainer.optimizer={optimizer}")) == 0
    [m] = lines(out / "metrics.jsonl")
    turns = [t for e in lines(out / "episodes.jsonl") for t in e["turns"]]
    samples = [t for t in turns if t["role"] == "central_sample"]
    reasons = [t for t in turns if t["role"] == "central_sample_reason"]  # the cpu preset chains the selection
    if optimizer == "none":  # prompt only: no training samples are drawn, nothing trains
        assert not samples and not reasons and m["train"] == {} and "coverage" in m
    elif optimizer == "grpo":  # the whole central output, advantages normalised within each slate's G samples
        assert len(samples) == len(reasons) == 3 * 2 * 3 and m["train"]["central"]["optimizer_steps"] == 1
    else:  # SFT on the correct selections only (both stages of each: its rationale and its number)
        assert [t["reward"] for t in reasons] == [t["reward"] for t in samples]
        assert m["train"]["central"]["rows"] == 2 * sum(t["reward"] > 0 for t in samples)


def test_trainable_executors_and_ablation_config(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.train_executors=true", "agents=2",
                         "protocol.k=2", "protocol.rounds=1")) == 0
    [m] = lines(out / "metrics.jsonl")
    assert set(m["train"]) == {"central", "exec0", "exec1"} and "executor_accuracy" in m
    assert (out / "adapters" / "final" / "exec1" / "adapter_config.json").exists()
    for bad, message in ((["protocol.central_mode=gen"], "has no selection to train"),
                         (["clpo.choice=false", "clpo.rank=false"], "CLPO would train nothing")):
        assert cli.main(args(tmp_path, tmp_path / "x", "--dry-run", *bad)) == 2
        assert message in capsys.readouterr().err
    assert cli.main(args(tmp_path, tmp_path / "g", "trainer.max_steps=1", "protocol.central_mode=gen_sc",
                         "trainer.optimizer=none", "protocol.view=reason", "protocol.rounds=1")) == 0


# ---- selfevo eval with the trained central adapter ------------------------------------------------------------------
@needs_data
def test_eval_loads_the_central_adapter(tmp_path, make_store, capsys):
    from selfevo import evaluation
    from selfevo.policy import PolicyStore

    store = make_store(agents=("c",))
    store.save_adapter("c", tmp_path / "central")
    argv = ["benchmark=gsm8k", "setup=maestro_select", "model.backbones=tiny-random", "limit=2",
            "sampling.max_new_tokens=8", f"output_dir={tmp_path / 'eval'}", f"data_root={DATA}", "rounds=1",
            "n_agents=2", "k=2", f"central_adapter={tmp_path / 'central'}"]
    fresh = PolicyStore(dtype="float32")
    [record] = evaluation.run_eval(*evaluation.load_eval_config(argv), store=fresh, engine=ScriptEngine(fresh),
                                   show_progress=False)
    assert record["agents"] == [None, None, "central"] and record["central_adapter"] == str(tmp_path / "central")
    calls = ScriptEngine.calls
    assert {r.agent for r in calls[0]} == {None} and {r.agent for r in calls[1]} == {"central"}
    assert "coverage" in record and "select_parse_failure_rate_r1" in record
    assert cli.main(["eval", "benchmark=gsm8k", "setup=vanilla", f"central_adapter={tmp_path / 'central'}"]) == 2
    assert "setup=maestro_select, which is not selected" in capsys.readouterr().err
    assert cli.main(["eval", "benchmark=gsm8k", "setup=maestro_select", f"central_adapter={tmp_path}"]) == 2
    assert "has no adapter_config.json" in capsys.readouterr().err


def test_replayed_slates_give_the_same_records_without_generating_candidates(tmp_path):
    """Round 1 replayed from an eval's items.jsonl: the same candidates, slate order and central pick as the run
    that generated them, with no candidate call; a task missing from the file is a one-line error."""
    import json

    from selfevo.protocols.maestro import read_replay

    tasks = [add_task(i) for i in range(3)]
    engine0, first = run_protocol(tasks, rounds=1)
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": ep.task.id, "responses": [
        {"role": t.role, "round": t.round, "slot": t.slot, "text": t.text} for t in ep.turns]}) + "\n"
        for ep in first))
    replay = read_replay(str(path))
    assert replay[tasks[0].id] == [t.text for t in first[0].turns if t.role == "execution"]
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
