"""CoMAS: protocol shape and batching with a scripted engine, Eq. 7-8 rewards on transcripts, the ablations,
the released-code semantics, and the recipe end to end (2 steps, resume adds exactly one, same RNG stream)."""
import json
import shutil

import pytest
import torch

from selfevo import cli
from selfevo.algorithms import comas
from selfevo.interaction import Episode, Runner
from selfevo.loop import task_batch
from selfevo.rewards import assign, build_sources
from selfevo.roles.comas import CoMASVerdictEvaluator
from selfevo.types import Completion, SamplingParams, Task


class ScriptedEngine:
    """Answers each generate call with texts from a script function of (call index, request index)."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, requests):
        call = len(self.calls)
        self.calls.append(requests)
        return [Completion(r, [1, 2], [3, 4], [-0.1, -0.2], self.script(call, i, r), "stop")
                for i, r in enumerate(requests)]


TASKS = [Task("t0", "math", "What is 1+1?", "2"), Task("t1", "math", "What is 2+3?", "5")]


def discussion(engine, variant="full", semantics="paper", on_parse_failure="mask", **proto):
    """(discussion, run): ``run(d, tasks)`` rolls out the protocol on the runner and assigns the variant's rewards."""
    cfg = comas.CoMASProtocolCfg(variant=variant, semantics=semantics, **proto)
    d = comas.SEMANTICS[semantics](comas.make_roles(cfg), ["a0", "a1", "a2"], cfg, "0")
    own = "verdict_agreement" if variant == "without_scoring" else "interaction_scores"
    source = build_sources([own], on_parse_failure=on_parse_failure)

    def run(d, tasks):
        eps = Runner(engine, SamplingParams(), "0").run([Episode(t, key=f"{i}:{t.id}") for i, t in enumerate(tasks)],
                                                     d.program())
        assign(eps, source(eps))
        return eps

    return d, run


def test_paper_protocol_batches_each_phase_and_rewards_eq7_8():
    scores = {2: ["<score>3</score>", "<score>1</score>"], 5: ["<score>2</score>", "garbage"]}
    eng = ScriptedEngine(lambda c, i, r: scores.get(c, [f"text {c}.{i}"] * 2)[i])
    d, proto = discussion(eng, rounds=2, evaluations=1)
    eps = proto(d, TASKS)
    assert len(eng.calls) == 6 and all(len(c) == 2 for c in eng.calls)  # 3 phases × 2 rounds, tasks batched
    roles = [t.label for t in eps[0].turns]
    assert roles == ["solver", "evaluator", "scorer"] * 2
    s, e, sc = eps[0].turns[:3]
    assert (s.reward, e.reward, sc.reward) == (1.0, 0.0, 0.0)  # τ=3: r(s)=(3-1)/2, r(e)=1-r(s), scorer parsed → 0
    s, e, sc = eps[1].turns[:3]
    assert (s.reward, e.reward, sc.reward) == (0.0, 1.0, 0.0)  # τ=1
    s, e, sc = eps[0].turns[3:]
    assert (s.reward, e.reward) == (0.5, 0.5)  # τ=2
    s, e, sc = eps[1].turns[3:]
    assert (s.reward, e.reward, sc.reward) == (None, None, -1.0)  # parse failure: masked, scorer penalised


def test_scorer_never_sees_history_and_second_solver_does():
    eng = ScriptedEngine(lambda c, i, r: f"UNIQUE-{c}-{i}" if c % 3 == 0 else "<score>2</score>")
    d, proto = discussion(eng, rounds=2, evaluations=1)
    proto(d, TASKS[:1])
    second_solver_prompt = eng.calls[3][0].messages[-1]["content"]
    assert "UNIQUE-0-0" in second_solver_prompt  # round-1 solution is in round-2 history
    scorer_prompt = eng.calls[5][0].messages[-1]["content"]
    assert "UNIQUE-0-0" not in scorer_prompt and "UNIQUE-3-0" in scorer_prompt  # only its own solution


def test_zero_on_parse_failure_option():
    eng = ScriptedEngine(lambda c, i, r: "no score here")
    d, proto = discussion(eng, rounds=1, on_parse_failure="zero")
    eps = proto(d, TASKS[:1])
    assert [t.reward for t in eps[0].turns] == [0.0, 0.0, -1.0]


def test_without_evaluation_judges_directly():
    eng = ScriptedEngine(lambda c, i, r: "sol" if c == 0 else "<score>3</score>")
    d, proto = discussion(eng, variant="without_evaluation", rounds=1)
    eps = proto(d, TASKS)
    assert len(eng.calls) == 2 and [t.label for t in eps[0].turns] == ["solver", "judge"]
    assert [t.reward for t in eps[0].turns] == [1.0, 0.0]


def test_without_scoring_support_ratio_and_agreement():
    verdicts = ["<judgment>correct</judgment>", "<judgment>incorrect</judgment>", "<judgment>correct</judgment>"]
    eng = ScriptedEngine(lambda c, i, r: "sol" if c == 0 else verdicts[i % 3])
    d, proto = discussion(eng, variant="without_scoring", rounds=1, evaluations=3)
    eps = proto(d, TASKS[:1])
    turns = eps[0].turns
    assert turns[0].reward == pytest.approx(2 / 3)  # 2 of 3 verdicts support the solution
    assert [t.reward for t in turns[1:]] == [0.5, 0.0, 0.5]  # agreement with the other two verdicts


def test_prefixes_start_the_right_roles_answers_and_are_parsed():
    # the engine returns only the continuation; the prefix is part of the parsed answer
    eng = ScriptedEngine(lambda c, i, r: "sol" if c == 0 else "correct</judgment> because")
    d, proto = discussion(eng, variant="without_scoring", rounds=1, evaluations=2, verdict_prefix="<judgment>",
                          score_prefix="<score>")
    eps = proto(d, TASKS[:1])
    assert [r.prefix for c in eng.calls for r in c] == ["", "<judgment>", "<judgment>"]
    assert eps[0].turns[0].reward == 1.0 and [t.reward for t in eps[0].turns[1:]] == [1.0, 1.0]
    eng = ScriptedEngine(lambda c, i, r: "2</score>" if c == 2 else "text")
    d, proto = discussion(eng, rounds=1, verdict_prefix="<judgment>", score_prefix="<score>")
    eps = proto(d, TASKS[:1])
    assert [c[0].prefix for c in eng.calls] == ["", "", "<score>"]  # the full variant's evaluator: no verdict tag
    assert [t.reward for t in eps[0].turns] == [0.5, 0.5, 0.0]


def test_released_semantics_all_agents_solve_with_balanced_shuffled_judging():
    eng = ScriptedEngine(lambda c, i, r: "<score>2</score>" if c % 3 == 2 else f"x{c}{i}")
    d, proto = discussion(eng, semantics="released", rounds=2, evaluations=1)
    eps = proto(d, TASKS)
    assert len(eng.calls[0]) == 2 * 3  # every agent solves every task
    evaluators = [r.agent for r in eng.calls[1]]
    assert sorted(evaluators) == sorted(["a0", "a1", "a2"] * 2)  # each agent judges equally often
    assert len(eps[0].turns) == 2 * 3 * 3


def test_released_draws_are_random_permutations_independent_for_evaluators_and_scorers():
    """The released code shuffles evaluators and scorers independently: over many episodes a scorer differs from
    its evaluator and self-evaluation occurs (≈ 1/l); with self_evaluation=false it never does."""
    tasks = [Task(f"t{i}", "math", "q", "1") for i in range(12)]
    eng = ScriptedEngine(lambda c, i, r: "<score>2</score>" if c % 3 == 2 else "x")
    d, proto = discussion(eng, semantics="released", rounds=1)
    eps = proto(d, tasks)
    triples = [(ep.turns[i].agent, ep.turns[ep.turns[i].refs["evaluation"]].agent,
                ep.turns[ep.turns[i].refs["solution"]].agent) for ep in eps for i, t in enumerate(ep.turns)
               if t.label == "scorer"]
    assert any(sc != ev for sc, ev, _ in triples) and any(ev == sol for _, ev, sol in triples)
    for ep in eps:  # balanced within every (episode, round): a permutation of the agents
        assert sorted(t.agent for t in ep.turns if t.label == "evaluator") == ["a0", "a1", "a2"]
    eng = ScriptedEngine(lambda c, i, r: "<score>2</score>" if c % 3 == 2 else "x")
    d, proto = discussion(eng, semantics="released", rounds=1, self_evaluation=False)
    for ep in proto(d, tasks):
        for t in ep.turns:
            if t.label in ("evaluator", "scorer"):
                assert t.agent != ep.turns[t.refs["solution"]].agent


def test_evaluator_sees_history_before_the_solution_and_the_solution_once():
    """Eq. 4: e = u(q, h_q, s_i) with h_q as it was before s_i; s_i is appended with its evaluations afterwards."""
    eng = ScriptedEngine(lambda c, i, r: f"UNIQUE-{c}" if c % 3 != 2 else "<score>2</score>")
    d, proto = discussion(eng, rounds=2, evaluations=1)
    proto(d, TASKS[:1])
    first_eval = eng.calls[1][0].messages[-1]["content"]
    assert first_eval.count("UNIQUE-0") == 1  # the solution under judgement, not also as history
    second_eval = eng.calls[4][0].messages[-1]["content"]
    assert second_eval.count("UNIQUE-3") == 1 and "UNIQUE-0" in second_eval and "UNIQUE-1" in second_eval


def test_task_batch_is_a_pure_function_of_the_step():
    tasks = [Task(str(i), "math", "q", "1") for i in range(5)]
    a = [t.id for s in range(4) for t in task_batch(tasks, s, 3, seed=1)]
    b = [t.id for s in range(4) for t in task_batch(tasks, s, 3, seed=1)]
    assert a == b and sorted(a[:5]) == [str(i) for i in range(5)]  # first epoch is a permutation


def _run(out, *extra):
    return cli.main(["run", "comas", "model.backbones=[tiny-random]", "n_agents=2", "trainer.tasks_per_step=2",
                     "sampling.max_new_tokens=6", "data.n_math=8", "data.n_code=2", "data.n_science=2",
                     "model.dtype=float32", f"output_dir={out}", *extra])


@pytest.mark.slow
def test_recipe_two_steps_then_resume_adds_exactly_one(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out, "trainer.max_steps=2") == 0
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1]
    assert (out / "adapters" / "step_1" / "agent0" / "adapter_config.json").exists()
    assert _run(out, "trainer.max_steps=3") == 2  # an existing run is never overwritten silently
    assert "resume=true" in capsys.readouterr().err
    assert _run(out, "trainer.max_steps=3", "resume=true") == 0
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]
    # the resumed step equals the same step of an uninterrupted run (same data order and RNG stream)
    ref = tmp_path / "ref"
    assert _run(ref, "trainer.max_steps=3") == 0
    last = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()][-2:]
    want = [json.loads(x) for x in (ref / "episodes.jsonl").read_text().splitlines()][-2:]
    assert [e["task_id"] for e in last] == [e["task_id"] for e in want]
    assert [[t["text"] for t in e["turns"]] for e in last] == [[t["text"] for t in e["turns"]] for e in want]


@pytest.mark.slow
def test_resume_after_a_kill_between_log_and_checkpoint_logs_each_step_once(tmp_path):
    out = tmp_path / "run"
    assert _run(out, "trainer.max_steps=2") == 0
    # simulate a kill after step 2 was logged but before its checkpoint (plus a half-written line), and one
    # between the two renames of checkpoint.save (only checkpoint.old left)
    for name in ("metrics.jsonl", "episodes.jsonl"):
        lines = (out / name).read_text().splitlines(keepends=True)
        (out / name).write_text("".join(lines) + lines[-1].replace('"step": 1', '"step": 2') + '{"step": 3, "rew')
    (out / "checkpoint").rename(out / "checkpoint.old")
    assert _run(out, "trainer.max_steps=3", "resume=true") == 0
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert [json.loads(x)["step"] for x in (out / "episodes.jsonl").read_text().splitlines()] == [0, 0, 1, 1, 2, 2]


def test_resume_without_checkpoint_is_one_line_error(tmp_path, capsys):
    assert _run(tmp_path / "nothing", "resume=true") == 2
    assert "no checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_resuming_a_finished_run_writes_its_missing_final_adapters(tmp_path):
    """A run stopped after step 1 of 4 and resumed with max_steps=2 has nothing left to run: its final adapters
    are the checkpoint's (those of step 1)."""
    out = tmp_path / "run"
    assert _run(out, "trainer.max_steps=2") == 0
    final = out / "adapters" / "final"
    shutil.rmtree(final)  # as if the run had been configured for more steps and stopped here
    assert _run(out, "trainer.max_steps=2", "resume=true") == 0
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    from safetensors.torch import load_file

    for agent in ("agent0", "agent1"):
        got = load_file(str(final / agent / "adapter_model.safetensors"))
        ref = load_file(str(out / "adapters" / "step_1" / agent / "adapter_model.safetensors"))
        assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)


# ---- a judge of controlled quality in the scorer's place (reward.judge=noisy_judge) --------------------------------
def test_noisy_judge_replaces_the_scores_with_the_verifiers_verdict():
    from selfevo.config import load_config
    from selfevo.roles.base import Parsed
    from selfevo.interaction import Turn
    from selfevo.types import Request

    def turn(role, text, parsed, refs=None):
        c = Completion(Request("a0", [{"role": "user", "content": "q"}]), [1], [2], [0.0], text, "stop")
        return Turn("a0", role, c, parsed, refs=refs or {})

    task = Task("t", "math", "1+1?", "2")
    ep = Episode(task, [turn("solver", "\\boxed{2}", Parsed.success("x")),
                        turn("evaluator", "looks wrong", Parsed.success("e"), {"solution": 0}),
                        turn("scorer", "1", Parsed.success(1), {"solution": 0, "evaluation": 1})])
    model = comas.reward_source(load_config(comas.CoMASCfg, "comas", "cpu", []))([ep])
    judged = comas.reward_source(load_config(comas.CoMASCfg, "comas", "cpu", ["reward.judge=noisy_judge"]))([ep])
    assert model.rewards == [{0: 0.0, 1: 1.0, 2: 0.0}]  # the model scored the right answer 1
    assert judged.rewards == [{0: 1.0, 1: 0.0, 2: 0.0}]  # judge_accuracy 1: the verifier's verdict, score 3
    assert judged.metrics["judge_flip_rate"] == 0.0


def test_each_variant_is_one_row_of_the_table():
    """The variants are data (roles, judging phase, scores, verdicts, reward), read in one place each."""
    for variant, v in comas.VARIANTS.items():
        roles = comas.make_roles(comas.CoMASProtocolCfg(variant=variant, score_prefix="<score>", verdict_prefix="<v>",
                                                        evaluators_see_history=False))
        assert {k: type(r) for k, r in roles.items()} == v.roles
        assert [k for k, r in roles.items() if r.prefix == "<score>"] == ([v.scored_by] if v.scored_by else [])
        assert [k for k, r in roles.items() if r.prefix == "<v>"] == ([v.verdict_by] if v.verdict_by else [])
        assert all(not getattr(r, "see_history", False) for r in roles.values())
    assert set(comas.VARIANTS["without_evaluation"].roles) == {"solver", "judge"}
    assert comas.VARIANTS["without_scoring"].roles["evaluator"] is CoMASVerdictEvaluator


def test_noisy_judge_needs_scores(capsys):
    assert cli.main(["run", "comas", "--dry-run", "reward.judge=noisy_judge", "protocol.variant=without_scoring",
                     "protocol.evaluations=2"]) == 2
    assert "without_scoring has no scores" in capsys.readouterr().err
    assert cli.main(["run", "comas", "--dry-run", "reward.judge_accuracy=1.5"]) == 2
