"""The loop kit (selfevo.loop): task files and data entries, the step's task batch, step metrics, and a real CoMAS run
end to end through the CLI (tiny-random, fp32): metrics with in-loop evaluation, episodes, run.json, resume."""
import gzip
import json

import pytest

from selfevo import cli
from selfevo.interaction import Episode, Turn
from selfevo.loop import load_entries, read_task_file, task_batch
from selfevo.loop.metrics import mean, precision_recall, turn_metrics
from selfevo.tasks import TaskDataError
from selfevo.types import Completion, Request, Task

MATH_ROWS = [{"id": "m1", "domain": "math", "question": "What is 1+1?", "reference": "2"},
             {"id": "m2", "domain": "math", "question": "What is 2+3?", "reference": "5", "meta": {"level": 1}},
             {"domain": "math", "question": "What is 4*4?", "reference": "16"}]


def write_jsonl(path, rows, raw_lines=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(raw_lines))
    return path


# ---- read_task_file --------------------------------------------------------------------------------------------
def test_read_task_file_good(tmp_path):
    f = write_jsonl(tmp_path / "tasks.jsonl", MATH_ROWS[:2], raw_lines=["\n", json.dumps(MATH_ROWS[2]) + "\n"])
    tasks = read_task_file(str(f))
    assert [t.id for t in tasks] == ["m1", "m2", "tasks-4"]  # default id: file stem and 1-based line number
    assert [t.reference for t in tasks] == ["2", "5", "16"]
    assert tasks[1].meta == {"level": 1} and tasks[0].meta == {} and all(t.domain == "math" for t in tasks)


def test_read_task_file_not_json_names_file_and_line(tmp_path):
    f = write_jsonl(tmp_path / "bad.jsonl", MATH_ROWS[:1], raw_lines=['{"question": "x", "domain": \n'])
    with pytest.raises(TaskDataError, match=r"malformed JSON in .*bad\.jsonl line 2"):
        read_task_file(str(f))


@pytest.mark.parametrize("row", [{"domain": "math"}, {"domain": "math", "question": ""}, {"question": "q"}])
def test_read_task_file_missing_question_or_domain(tmp_path, row):
    f = write_jsonl(tmp_path / "t.jsonl", [MATH_ROWS[0], row])
    with pytest.raises(TaskDataError, match=r"t\.jsonl line 2: a task needs non-empty 'question' and 'domain'"):
        read_task_file(str(f))


@pytest.mark.parametrize("row", [["question", "domain"], "just a string"])
def test_read_task_file_line_that_is_not_an_object(tmp_path, row):
    f = write_jsonl(tmp_path / "t.jsonl", [MATH_ROWS[0], row])
    with pytest.raises(TaskDataError, match=r"t\.jsonl line 2: expected a JSON object"):
        read_task_file(str(f))


def test_read_task_file_unknown_field(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [{**MATH_ROWS[0], "answer": "2", "difficulty": 3}])
    with pytest.raises(TaskDataError, match=r"t\.jsonl line 1: unknown task field\(s\) answer, difficulty"):
        read_task_file(str(f))


def test_read_task_file_missing_file(tmp_path):
    with pytest.raises(TaskDataError, match="no task file"):
        read_task_file(str(tmp_path / "nope.jsonl"))


def test_gzipped_task_file_loads(tmp_path):
    path = tmp_path / "tasks.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in MATH_ROWS))
    assert [t.question for t in load_entries([str(path)])] == [r["question"] for r in MATH_ROWS]


# ---- load_entries ----------------------------------------------------------------------------------------------
def test_load_entries_registered_benchmark():
    tasks = load_entries(["gsm8k:test"], limit=3)
    assert len(tasks) == 3 and all(t.domain == "math" and t.question and t.reference for t in tasks)
    assert len({t.id for t in tasks}) == 3
    assert tasks[0].meta["benchmark"] == "gsm8k" and tasks[0].meta["split"] == "test"


def test_load_entries_two_entries_prefix_ids(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", MATH_ROWS)
    tasks = load_entries(["gsm8k:test", str(f)], limit=2)
    assert len(tasks) == 4
    bench = load_entries(["gsm8k:test"], limit=2)
    assert [t.id for t in tasks[:2]] == [f"gsm8k:test/{t.id}" for t in bench]
    assert [t.id for t in tasks[2:]] == [f"{f}/m1", f"{f}/m2"]
    assert len({t.id for t in tasks}) == 4
    # loading again gives the same ids (no prefix piles up on cached tasks)
    assert [t.id for t in load_entries(["gsm8k:test", str(f)], limit=2)] == [t.id for t in tasks]


def test_load_entries_single_entry_keeps_ids_and_limit(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", MATH_ROWS)
    assert [t.id for t in load_entries([str(f)])] == ["m1", "m2", "mine-3"]
    assert [t.id for t in load_entries([str(f)], limit=1)] == ["m1"]


def test_load_entries_nothing_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(TaskDataError, match="no tasks in"):
        load_entries([str(empty)])
    with pytest.raises(TaskDataError, match="no tasks in"):
        load_entries([])


def test_load_entries_unknown_benchmark_suggests():
    from selfevo.registry import RegistryError

    with pytest.raises(RegistryError, match="did you mean 'gsm8k'"):
        load_entries(["gsm8kk:test"])


# ---- task_batch ------------------------------------------------------------------------------------------------
def test_task_batch_is_a_pure_function_of_the_step():
    tasks = [Task(str(i), "math", "q", "1") for i in range(7)]
    forward = {s: [t.id for t in task_batch(tasks, s, 3, seed=5)] for s in range(6)}
    backward = {s: [t.id for t in task_batch(tasks, s, 3, seed=5)] for s in reversed(range(6))}
    assert forward == backward
    # epochs are permutations: positions 0..6 and 7..13 each cover every task once
    flat = [i for s in range(6) for i in forward[s]]
    assert sorted(flat[:7]) == sorted(flat[7:14]) == [str(i) for i in range(7)]
    assert flat[:7] != flat[7:14]  # each epoch has its own seeded permutation
    other_seed = [t.id for s in range(6) for t in task_batch(tasks, s, 3, seed=6)]
    assert other_seed != flat  # the run seed picks the order
    # step k is positions k*size .. k*size+size-1 of one seeded stream (a resumed run sees the same data)
    assert [t.id for t in task_batch(tasks, 2, 3, seed=5)] == flat[6:9]


def test_task_batch_larger_than_the_data():
    tasks = [Task("a", "math", "q"), Task("b", "math", "q")]
    ids = [t.id for t in task_batch(tasks, 0, 5, seed=0)]
    assert len(ids) == 5 and sorted(ids[:2]) == ["a", "b"] and sorted(ids[2:4]) == ["a", "b"]


# ---- turn_metrics / precision_recall -------------------------------------------------------------------------
def turn(agent, role, text, reward, n_tokens=2):
    req = Request(agent, [{"role": "user", "content": "q"}])
    return Turn(agent, role, Completion(req, [1], list(range(n_tokens)), [0.0] * n_tokens, text, "stop"),
                reward=reward)


TWO = Task("t2", "math", "1+1?", "2")


def test_turn_metrics():
    eps = [Episode(TWO, [turn("a0", "solver", "x", 1.0, 3), turn("a1", "evaluator", "y", 0.0, 5),
                         turn("a1", "scorer", "z", -1.0, 1)]),
           Episode(TWO, [turn("a0", "solver", "x", None, 4), turn("a0", "evaluator", "y", 0.5, 2)])]
    m = turn_metrics(eps, ["a0", "a1", "a2"])
    assert m["reward"] == {"a0": 0.75, "a1": -0.5, "a2": None}
    assert m["reward_by_role"] == {"evaluator": 0.25, "scorer": -1.0, "solver": 1.0}
    assert m["length_by_role"] == {"evaluator": 3.5, "scorer": 1.0, "solver": 3.5}
    assert m["masked_samples"] == 1 and m["tokens"] == 15
    assert turn_metrics([], ["a0"]) == {"reward": {"a0": None}, "reward_by_role": {}, "length_by_role": {},
                                        "masked_samples": 0, "tokens": 0}
    assert mean([1, None, 2]) == 1.5 and mean([None]) is None and mean([1, 1, 2]) == 1.3333


def test_precision_recall():
    eps = [Episode(TWO, [turn("a0", "solver", "\\boxed{2}", 1.0),     # correct, predicted: tp
                         turn("a0", "solver", "\\boxed{3}", 0.5),     # wrong, predicted: fp
                         turn("a0", "solver", "\\boxed{2}", 0.0),     # correct, not predicted: fn
                         turn("a0", "solver", "\\boxed{4}", 0.49),    # wrong, not predicted: tn
                         turn("a0", "solver", "\\boxed{2}", None),    # masked: left out
                         turn("a0", "evaluator", "\\boxed{2}", 1.0)]),  # other role: left out
           Episode(Task("n", "math", "no reference"), [turn("a0", "solver", "\\boxed{2}", 1.0)]),  # unverifiable
           Episode(TWO, [turn("a1", "solver", "The answer is \\boxed{2}", 0.9)])]  # tp
    assert precision_recall(eps, 0.5) == {"precision": round(2 / 3, 4), "recall": round(2 / 3, 4),
                                          "verified_accuracy": 0.6}
    assert precision_recall(eps, 0.5, label="evaluator") == {"precision": 1.0, "recall": 1.0,
                                                            "verified_accuracy": 1.0}
    assert precision_recall([], 0.5) == {"precision": None, "recall": None, "verified_accuracy": None}


# ---- end to end through the CLI ----------------------------------------------------------------------------------
def _comas(out, data, *extra):
    return cli.main(["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=2",
                     "trainer.tasks_per_step=2", "sampling.max_new_tokens=6", f"data.tasks=[{data}]",
                     "eval.every=1", f"eval.tasks=[{data}]", "eval.limit=2", "eval.max_new_tokens=4",
                     f"output_dir={out}", *extra])


@pytest.fixture(scope="module")
def comas_run(tmp_path_factory):
    """A 2-step run, then resumed to 3 steps; the run directory after each phase."""
    tmp = tmp_path_factory.mktemp("kit_loop")
    data = write_jsonl(tmp / "math.jsonl", MATH_ROWS)
    out = tmp / "run"
    rc1 = _comas(out, data, "trainer.max_steps=2")
    snap = {name: (out / name).read_text() for name in ("metrics.jsonl", "episodes.jsonl", "run.json")}
    rc2 = _comas(out, data, "trainer.max_steps=3", "resume=true")
    return {"out": out, "data": data, "rc": (rc1, rc2), "first": snap}


@pytest.mark.slow
def test_cli_run_metrics_with_in_loop_evaluation(comas_run):
    assert comas_run["rc"] == (0, 0)
    lines = [json.loads(x) for x in comas_run["first"]["metrics.jsonl"].splitlines()]
    assert [m["step"] for m in lines] == [0, 1]
    for m in lines:
        assert m["eval"]["n"] == 2
        assert set(m["eval"]["accuracy"]) == {"agent0", "agent1"}
        assert all(0.0 <= v <= 1.0 for v in m["eval"]["accuracy"].values())
        assert set(m["reward"]) == {"agent0", "agent1"}


@pytest.mark.slow
def test_cli_run_episodes_are_the_jsonl_tasks(comas_run):
    eps = [json.loads(x) for x in comas_run["first"]["episodes.jsonl"].splitlines()]
    assert len(eps) == 4 and [e["step"] for e in eps] == [0, 0, 1, 1]
    assert {e["task_id"] for e in eps} <= {"m1", "m2", "math-3"}
    for e in eps:
        assert [t["role"] for t in e["turns"]] == ["solver", "evaluator", "scorer"] * 2  # 2 rounds (cpu preset)
        assert {t["agent"] for t in e["turns"]} <= {"agent0", "agent1"}


@pytest.mark.slow
def test_cli_run_records_the_launch(comas_run):
    (launch,) = json.loads(comas_run["first"]["run.json"])
    assert isinstance(launch["argv"], list) and launch["argv"]
    assert "torch" in launch["packages"]
    assert {"platform", "python", "cpus"} <= set(launch["machine"])
    out = comas_run["out"]
    assert (out / "config.yaml").exists() and (out / "checkpoint" / "state.json").exists()
    assert (out / "adapters" / "step_1" / "agent0" / "adapter_config.json").exists()


@pytest.mark.slow
def test_cli_run_json_records_the_run_command(comas_run):
    (launch,) = json.loads(comas_run["first"]["run.json"])
    assert "trainer.max_steps=2" in launch["argv"]


@pytest.mark.slow
def test_cli_resume_appends_one_launch_and_one_step(comas_run):
    out = comas_run["out"]
    launches = json.loads((out / "run.json").read_text())
    assert len(launches) == 2
    assert launches[0] == json.loads(comas_run["first"]["run.json"])[0]  # the first launch is kept as it was
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2]
    assert lines[2]["eval"]["n"] == 2
    first = comas_run["first"]["metrics.jsonl"].splitlines()
    assert (out / "metrics.jsonl").read_text().splitlines()[:2] == first  # earlier lines untouched
    eps = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert [e["step"] for e in eps] == [0, 0, 1, 1, 2, 2]
    assert (out / "adapters" / "step_2" / "agent1" / "adapter_config.json").exists()


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_a_run_logs_only_its_own_sandbox_jobs(tmp_path):
    """Code verified in this process before the run (another run, a test) is not counted in the run's first step."""
    import helpers.golden_engine  # noqa: F401  (registers engine "golden")

    from selfevo.verifiers.sandbox import _count_fs_mode

    _count_fs_mode("none")  # a sandbox job of someone else's
    out = tmp_path / "run"
    assert cli.main(["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=2",
                     "engine.name=golden", "trainer.max_steps=1", "trainer.tasks_per_step=1", "data.n_math=2",
                     "data.n_code=0", "data.n_science=0", f"output_dir={out}"]) == 0
    (m,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert "sandbox_fs" not in m  # math tasks only: no code was verified during the run


def test_step_timing_carries_the_shapes_where_they_are_counted():
    from types import SimpleNamespace

    from selfevo.loop.step import rollout_timing, update_timing
    from selfevo.shapes import Shapes

    shapes = Shapes()
    shapes.add("decode", 2, size=100)
    counted = SimpleNamespace(tokens=10, concurrency=2.0, prefill_tokens=30, shapes=shapes)
    assert rollout_timing(1.234, counted) == {"rollout_s": 1.23, "rollout_tokens": 10, "concurrency": 2.0,
                                               "prefill_tokens": 30, "rollout_shapes": {"decode": [[2, 128, 1, 100]]}}
    uncounted = SimpleNamespace(tokens=10, concurrency=None, prefill_tokens=0, shapes=Shapes())
    assert rollout_timing(1.0, uncounted) == {"rollout_s": 1.0, "rollout_tokens": 10}
    train = {"a0": {"tokens": 7}, "a1": {"tokens": 5}}
    assert update_timing(2.0, train) == update_timing(2.0, train, Shapes()) == {"update_s": 2.0, "update_tokens": 12}
    assert update_timing(2.0, train, shapes)["update_shapes"] == {"decode": [[2, 128, 1, 100]]}


@pytest.mark.slow
def test_main_job_preset_evaluates_before_and_after_and_ends_with_a_summary(tmp_path, capsys):
    """`selfevo run comas` (preset cpu) on tiny-random: held-out accuracy before step 0 (fresh adapters are one
    model: evaluated once, given to every agent) and after the last step; the dtype model.dtype=auto resolved to in
    run.json; the closing summary as the last printed lines."""
    out = tmp_path / "run"
    rc = cli.main(["run", "comas", "model.backbones=[tiny-random]", "trainer.max_steps=2",
                   "sampling.max_new_tokens=4", "eval.limit=2", "eval.max_new_tokens=4", f"output_dir={out}"])
    assert rc == 0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    start = lines[0]["eval_start"]
    assert start["evaluated"] == "agent0" and start["n"] == 2
    assert set(start["accuracy"]) == {f"agent{i}" for i in range(4)} and len(set(start["accuracy"].values())) == 1
    assert "eval" not in lines[0] and set(lines[1]["eval"]["accuracy"]) == set(start["accuracy"])
    (launch,) = json.loads((out / "run.json").read_text())
    assert launch["dtype"] in ("float32", "bfloat16") and "bf16" in launch["machine"]["cpu"]
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == f"  look at it: selfevo report {out}"
    assert any(line.startswith("selfevo comas: 2 steps done in ") for line in printed[-4:])
    assert any("held-out accuracy (arith:test, 2 items; mean of 4 agents)" in line for line in printed[-4:])
