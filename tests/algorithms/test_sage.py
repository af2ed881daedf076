"""SAGE recipe: Algorithm 1 on a scripted engine (tiny-random, fp32) — pool growth and rejection reasons, rewards
per role, the plan gate, ablation switches, the pool as checkpointed state (resume; kill -9 mid-step)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import helpers.sage_engine  # noqa: F401  (registers engine "sage_script")
from helpers.paths import HELPERS, ROOT
from selfevo import cli
from selfevo.algorithms.pool import QuestionPool


def seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "seed.jsonl"
    rows = [{"id": f"s{i}", "domain": "math", "question": f"What is {i} + {i + 1}?", "reference": str(2 * i + 1)}
            for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "sage", "model.backbones=[tiny-random]", "model.dtype=float32", "engine.name=sage_script",
            "protocol.challenger_prefix=<question>", "protocol.planner_prefix=<plan>",
            "protocol.critic_prefix=<score>", "protocol.solver_prefix=<answer>", "protocol.challenges=3",
            "protocol.solver_samples=2", "trainer.tasks_per_step=3", "eval.at_start=false", "eval.every=0",
            f"data.tasks=[{seed_file(tmp_path)}]", f"output_dir={out}", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_sage_steps_grow_the_pool_with_verified_items_and_reward_every_role(tmp_path):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=2")) == 0
    metrics = lines(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    pool = QuestionPool.from_jsonl((out / "pool.jsonl").read_text())
    assert metrics[-1]["pool_size"] == len(pool) == 6 + sum(m["pool_added"] for m in metrics)
    for m in metrics:  # critic 8 → admitted, 3 → "low quality" (Norm(3) = 2/9 < α)
        assert m["pool_added"] + sum(m["rejected"].values()) == 3
        assert set(m["rejected"]) <= {"low quality", "duplicate"}
    added = [it for it in pool.items if it["origin"] != "seed"]
    assert added and all(it["origin"].startswith("step ") and 0 <= it["difficulty"] <= 1 for it in added)
    # the scripted solver is right on even seeds: r_d is the measured failure rate of its N_s = 2 samples
    assert {it["difficulty"] for it in added} <= {0.0, 0.5, 1.0}
    episodes = lines(out / "episodes.jsonl")
    roles = {t["role"] for e in episodes for t in e["turns"]}
    assert roles == {"challenger", "critic", "difficulty", "planner", "solver"}
    for e in episodes:
        for t in e["turns"]:
            assert (t["reward"] is None) == (t["role"] == "difficulty")  # difficulty samples are not trained
    assert metrics[0]["train"]["sage"]["parameter_updates"] == 1
    assert metrics[0]["solver_accuracy"] is not None and "format.challenger" in metrics[0]


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_sage_ablation_switch_trains_without_a_role(tmp_path):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.train_challenger=false",
                         "protocol.train_solver=false", "protocol.train_critic=false",
                         "protocol.train_planner=false")) == 0
    assert lines(out / "metrics.jsonl")[0]["train"] == {}  # nothing left to train on


@pytest.mark.slow
def test_sage_resume_restores_the_pool(tmp_path):
    out, ref = tmp_path / "run", tmp_path / "ref"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=2")) == 0
    assert cli.main(args(tmp_path, out, "trainer.max_steps=3", "resume=true")) == 0
    assert cli.main(args(tmp_path, ref, "trainer.max_steps=3")) == 0
    assert (out / "pool.jsonl").read_text() == (ref / "pool.jsonl").read_text()
    assert (out / "checkpoint" / "pool.jsonl").read_text() == (out / "pool.jsonl").read_text()


@pytest.mark.slow
def test_sage_kill_9_mid_step_neither_loses_nor_duplicates_pool_items(tmp_path):
    """A real run killed with SIGKILL in the middle of step 2 resumes with the pool of its checkpoint, and ends
    with exactly the pool of an uninterrupted run."""
    out, ref = tmp_path / "run", tmp_path / "ref"
    env = {**os.environ, "SAGE_SCRIPT_DELAY": "0.4", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(HELPERS / "sage_engine.py"), *args(tmp_path, out, "trainer.max_steps=5")]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not ((out / "metrics.jsonl").exists() and
                                          len((out / "metrics.jsonl").read_text().splitlines()) >= 2):
        time.sleep(0.2)
    time.sleep(0.6)  # inside step 2's rollout
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len((out / "metrics.jsonl").read_text().splitlines()) < 5  # killed mid-run
    saved = QuestionPool.from_jsonl((out / "checkpoint" / "pool.jsonl").read_text())  # parses: ids unique
    assert len(saved) >= 6
    assert cli.main(args(tmp_path, out, "trainer.max_steps=5", "resume=true")) == 0
    assert cli.main(args(tmp_path, ref, "trainer.max_steps=5")) == 0
    got, want = (out / "pool.jsonl").read_text(), (ref / "pool.jsonl").read_text()
    ids = [it["id"] for it in QuestionPool.from_jsonl(got).items]
    assert len(ids) == len(set(ids)) and got == want
    assert [m["step"] for m in lines(out / "metrics.jsonl")] == [0, 1, 2, 3, 4]


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_tag_chain_challenger_writes_one_tag_per_stage(tmp_path):
    """With protocol.tag_chain the Challenger answers in stages (math: question, then answer), each stopped at its
    closing tag; the last stage is parsed from the whole chained answer."""
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.tag_chain=true")) == 0
    episodes = [e for e in lines(out / "episodes.jsonl") if e["turns"][0]["role"] == "challenger"]
    first = episodes[0]["turns"]
    assert [t["role"] for t in first[:2]] == ["challenger", "challenger"]
    assert first[1]["full_answer"].startswith("<question>") and "</question>\n<answer>" in first[1]["full_answer"]
    assert first[0]["reward"] == first[1]["reward"]  # every stage gets the Challenger's reward


@pytest.mark.slow
def test_admitted_code_items_verify_again_through_selfevo_verify(tmp_path, capsys):
    """Code seeds: the Challenger's new functions are admitted (their reference solution passes their tests in the
    sandbox, twice) and written to pool.jsonl; each one's reference solution scores 1.0 when re-run through
    ``selfevo verify`` from the pool file, and a wrong solution scores 0."""
    seeds = tmp_path / "code_seed.jsonl"
    rows = [{"id": f"c{i}", "domain": "code", "question": f"Write a function g{i} that returns {i}.",
             "tests": f"assert g{i}() == {i}", "entry_point": f"g{i}",
             "meta": {"reference_solution": f"def g{i}():\n    return {i}\n"}} for i in range(3)]
    seeds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    argv = [a if not a.startswith("data.tasks=") else f"data.tasks=[{seeds}]" for a in args(tmp_path, out)]
    assert cli.main([*argv, "trainer.max_steps=1", "protocol.tag_chain=false"]) == 0
    added = [it for it in QuestionPool.from_jsonl((out / "pool.jsonl").read_text()).items if it["origin"] != "seed"]
    assert added and all(it["domain"] == "code" and it["tests"] and it["entry_point"] for it in added)
    lines_in = []
    for it in added:
        good = f"```python\n{it['reference_solution']}```"
        bad = f"```python\ndef {it['entry_point']}(x):\n    return x\n```"
        lines_in += [{"domain": "code", "response": r, "tests": it["tests"], "entry_point": it["entry_point"]}
                     for r in (good, bad)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines_in))
    assert cli.main(["verify", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")]) == 0
    scores = [json.loads(x)["score"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert scores == [1.0, 0.0] * len(added)


# ---- fidelity: Norm(1), duplicates, empty plans, Algorithm 1's order, invalid verifiers, what the pool admits ------
from selfevo.algorithms.sage import (Admission, Cast, SageProtocolCfg, admit, challenge_rewards,  # noqa: E402
                                    plan_solve_program, plan_solve_rewards)
from selfevo.algorithms.pool import pool_metrics  # noqa: E402
from selfevo.interaction import Episode, Turn  # noqa: E402
from selfevo.roles import get_role  # noqa: E402
from selfevo.types import Completion, Request, Task  # noqa: E402

REF = Task("s0", "math", "What is 1 + 2?", "3", meta={"verifier": "math"})
CODE_REF = Task("c0", "code", "Write a function g0 that returns 0.", tests="assert g0() == 0", entry_point="g0",
                meta={"verifier": "code", "reference_solution": "def g0():\n    return 0\n"})


def _turn(role: str, text: str, parsed=None, refs=None) -> Turn:
    req = Request("sage", [{"role": "user", "content": "q"}])
    return Turn("sage", role, Completion(req, [1], [2], [0.0], text, "stop"), parsed, refs=refs or {})


def challenge(answer: str, score: int, solved: list[str] = (), ref: Task = REF) -> Episode:
    """A challenge episode as the program leaves it: the Challenger's turn, the Critic's and the difficulty samples."""
    ch = _turn("challenger", answer, get_role("sage.challenger").parse(answer, reference=ref))
    critic = _turn("critic", f"<score>{score}</score>", get_role("sage.critic").parse(f"<score>{score}</score>"))
    return Episode(ref, [ch, critic, *[_turn("difficulty", s) for s in solved]])


def challenger_reward(ep: Episode, seen: Admission, **options) -> float:
    """The Challenger's reward of ``ep`` admitted as ``seen``."""
    return challenge_rewards(SageProtocolCfg(**options), {ep.key: seen})([ep]).rewards[0][0]


QUESTION = "<question>A shop sells 4 pens for 8 dollars. What does one pen cost?</question><answer>2</answer>"


def test_a_critic_score_of_1_is_the_bottom_of_the_scale_by_default(tmp_path):
    pool = QuestionPool.from_tasks([REF])
    seen = admit(challenge(QUESTION, 1, ["\\boxed{2}"]), pool, SageProtocolCfg(), 0)
    assert seen == Admission("low quality", 0.0) and len(pool) == 1
    literal = challenge(QUESTION, 1, ["\\boxed{2}"])  # Eq. 2 read literally: 1 -> 1.0, admitted and paid Eq. 5
    assert admit(literal, pool, SageProtocolCfg(norm_one_is_max=True), 0) == Admission(None, 1.0, True, 0.0)
    assert len(pool) == 2


def test_a_decimal_critic_score_is_normalised_by_eq_2():
    # issue 58 item 3: "8.5" was a format failure (s_q = 0.5, "low quality", Eq. 6)
    pool = QuestionPool.from_tasks([REF])
    ep = challenge(QUESTION, 8.5, ["\\boxed{3}"])
    seen = admit(ep, pool, SageProtocolCfg(), 0)
    assert seen.reason is None and len(pool) == 2
    assert seen.s_q == pytest.approx(7.5 / 9)  # Eq. 2: (8.5 - 1) / 9 = 0.8333 >= α = 0.7
    assert challenger_reward(ep, seen) == pytest.approx((7.5 / 9 + 1.0 + 1.0) / 3)  # Eq. 5: r_d = 1, r_f = 1
    # Eq. 2: [0, 1] as is; above 10 "otherwise": 0.5 (clipped only in MAE)
    for pens, score, s_q, reason in ((5, 0.9, 0.9, None), (6, 0, 0.0, "low quality"), (7, 11, 0.5, "low quality")):
        other = challenge(QUESTION.replace("4 pens", f"{pens} pens"), score, ["\\boxed{3}"])
        seen = admit(other, pool, SageProtocolCfg(), 0)
        assert seen.reason == reason and seen.s_q == pytest.approx(s_q)


def test_a_rejected_duplicate_is_paid_as_not_admitted_unless_asked():
    pool = QuestionPool.from_tasks([REF])
    first, dup = challenge(QUESTION, 10, ["\\boxed{3}"]), challenge(QUESTION, 10, ["\\boxed{3}"])
    admitted, rejected = admit(first, pool, SageProtocolCfg(), 0), admit(dup, pool, SageProtocolCfg(), 0)
    assert admitted.reason is None and rejected == Admission("duplicate", 1.0, True, 1.0, duplicate=True)
    assert rejected.record() == {"s_q": 1.0, "valid": True, "r_d": 1.0, "duplicate": True}  # as episodes.jsonl logs it
    r_f = 1.0  # both tags present once
    s_q, r_d = 1.0, 1.0  # score 10; the one sample was wrong
    assert challenger_reward(first, admitted) == pytest.approx((s_q + r_d + r_f) / 3)  # Eq. 5
    assert challenger_reward(dup, rejected) == pytest.approx((s_q + r_f) / 2)  # Eq. 6
    assert challenger_reward(dup, rejected, pay_duplicates=True) == pytest.approx((s_q + r_d + r_f) / 3)


@pytest.mark.parametrize("solved, options, reason, r_d", [
    (["\\boxed{2}"], {"min_difficulty": 0.25}, "too easy", 0.0),  # the one sample is right
    (["\\boxed{3}"], {"max_difficulty": 0.75}, "too hard", 1.0),  # the one sample is wrong
])
def test_an_item_the_difficulty_filter_rejects_is_paid_eq_6(solved, options, reason, r_d):
    # issue 58 item 8: an item that does not enter the pool gets Eq. 6 (before: Eq. 5, 0.630 / 0.963)
    pool = QuestionPool.from_tasks([REF])
    ep = challenge(QUESTION, 9, solved)
    seen = admit(ep, pool, SageProtocolCfg(difficulty_filter=True, **options), 0)
    assert seen.reason == reason and len(pool) == 1
    s_q, r_f = 8 / 9, 1.0  # score 9; both tags present once
    assert seen.valid and seen.r_d == r_d and seen.difficulty_filtered
    assert challenger_reward(ep, seen) == pytest.approx((s_q + r_f) / 2)  # Eq. 6: 0.944
    kept = challenge(QUESTION, 9, solved)  # the filter off: admitted, Eq. 5
    admitted = admit(kept, QuestionPool.from_tasks([REF]), SageProtocolCfg(), 0)
    assert admitted.reason is None
    assert challenger_reward(kept, admitted) == pytest.approx((s_q + r_d + r_f) / 3)


def test_an_empty_plan_is_not_shown_and_not_paid():
    p = SageProtocolCfg(planner_prefix="<plan>")
    program = plan_solve_program(Cast.build(p), p)(ep := Episode(REF))
    planner_ask = next(program)
    planner = _turn("planner", "</plan>", planner_ask.parser(planner_ask.prefix + "</plan>"))  # wrote nothing
    critic_ask = program.send(planner)
    critic = _turn("critic", "<score>9</score>", critic_ask.parser("<score>9</score>"), {"target": 0})
    solver_ask = program.send(critic)
    assert "Follow this plan" not in solver_ask.messages[-1]["content"] and ep.meta["plan_shown"] is False
    ep.turns = [planner, critic, _turn("solver", "<answer>\\boxed{3}</answer>")]
    rewards = plan_solve_rewards(SageProtocolCfg())([ep]).rewards[0]
    assert rewards[2] == pytest.approx(0.2 * 0.0 + 0.6 * 1.0 + 0.2 * 1.0)  # s̃_p = 0 although s_p = 8/9 ≥ β
    ep.meta["plan_shown"] = True
    shown = plan_solve_rewards(SageProtocolCfg())([ep]).rewards[0]
    assert shown[2] == pytest.approx(0.2 * 8 / 9 + 0.6 * 1.0 + 0.2 * 1.0)


@pytest.mark.slow
def test_plan_solve_items_are_drawn_after_admission_as_in_algorithm_1(tmp_path):
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"id": "s0", "domain": "math", "question": "What is 1 + 2?", "reference": "3"}) + "\n")

    def solved_ids(out, *extra):
        argv = [a if not a.startswith("data.tasks=") else f"data.tasks=[{one}]" for a in args(tmp_path, out)]
        assert cli.main([*argv, "trainer.max_steps=1", "trainer.tasks_per_step=4", *extra]) == 0
        return [e["task_id"] for e in lines(out / "episodes.jsonl") if e["turns"][0]["role"] == "planner"]

    after = solved_ids(tmp_path / "after")
    assert any(i.startswith("gen-") for i in after)  # this step's new items can be solved in the same step
    assert set(solved_ids(tmp_path / "before", "protocol.sample_after_admission=false")) == {"s0"}


@pytest.mark.parametrize("answer, ref, reason", [
    ("<question>How many?</question><answer>\\frac{1}{</answer>", REF, "unparsable answer"),
    ("<question>Add.</question><tests>assert 1 + 1 == 2</tests><solution>def f(x): return x</solution>", CODE_REF,
     "format"),
])
def test_an_invalid_verifier_is_scored_by_the_critic_and_paid_eq_6(answer, ref, reason):
    ep = challenge(answer, 9, ref=ref)
    assert ep.turns[0].parsed.ok  # the item parses: the Critic scores it (the program asks no Solver for it)
    seen = admit(ep, QuestionPool.from_tasks([ref]), SageProtocolCfg(), 0)
    assert seen.reason == reason and seen.valid is False and seen.record() == {"s_q": 8 / 9, "valid": False}
    s_q = 8 / 9
    assert challenger_reward(ep, seen) == pytest.approx((s_q + 1.0) / 2)  # Eq. 6 with the Critic's real score


@pytest.mark.parametrize("answer, reason", [
    ("<question>A box holds 12 pencils. How many boxes?</question><answer>12 pencils</answer>", "words in answer"),
    ("<question>How many boxes are there?</question><answer>There are 5 boxes</answer>", "words in answer"),
    ("<question>Is it solvable?</question><answer>No answer</answer>", "words in answer"),
    ("<question>How many pencils are in 5 boxes?</answer>\n<answer>60 pencils</question><answer>12</answer>",
     "answer in question"),
    ("<question>What is 3 + 4? The answer is 7.</question><answer>7</answer>", "answer in question"),
])
def test_admission_rejects_items_that_cannot_be_a_verified_question(answer, reason):
    pool = QuestionPool.from_tasks([REF])
    ep = challenge(answer, 10, [])
    assert admit(ep, pool, SageProtocolCfg(), 0).reason == reason and len(pool) == 1
    assert pool_metrics([reason, None], pool)["rejected"] == {reason: 1}
