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

sys.path.insert(0, str(Path(__file__).parent))
import sage_engine  # noqa: E402,F401  (registers engine "sage_script")

from selfevo import cli  # noqa: E402
from selfevo.loop.pool import QuestionPool  # noqa: E402

ROOT = Path(__file__).parent.parent


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
    assert metrics[0]["train"]["sage"]["optimizer_steps"] == 1
    assert metrics[0]["solver_accuracy"] is not None and "format.challenger" in metrics[0]


def test_sage_ablation_switch_trains_without_a_role(tmp_path):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.train_challenger=false",
                         "protocol.train_solver=false", "protocol.train_critic=false",
                         "protocol.train_planner=false")) == 0
    assert lines(out / "metrics.jsonl")[0]["train"] == {}  # nothing left to train on


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
    code = ("import sys; sys.path.insert(0, 'tests'); import sage_engine; from selfevo.cli import main; "
            "raise SystemExit(main(sys.argv[1:]))")
    env = {**os.environ, "SAGE_SCRIPT_DELAY": "0.4", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", code, *args(tmp_path, out, "trainer.max_steps=5")]
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
