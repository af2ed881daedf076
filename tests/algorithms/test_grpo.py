"""The GRPO recipe: one step pinned (fp32, tiny-random, the golden scripted engine), the evaluation's own prompt,
groups of ``prompt_reuse`` answers per task, resume, and the cpu-learn preset's settings (the ones TRL gets too in
benchmarks/sweeps/trl_grpo.py).

Regenerate (only on purpose, after a change meant to alter behaviour): ``SELFEVO_UPDATE_GOLDEN=1 pytest
tests/algorithms/test_grpo.py``.
"""
import json
import os
from pathlib import Path

import pytest

import helpers.golden_engine  # noqa: F401  (registers engine "golden")
from helpers.golden import adapter_checksums
from helpers.paths import GOLDEN
from selfevo import cli
from selfevo.algorithms import grpo
from selfevo.config import load_config
from selfevo.tasks import format_prompt
from selfevo.types import Task

# see tests/algorithms/test_golden_comas.py for why adapter checksums are pinned to a tolerance
CHECKSUM_TOLERANCE = {"sum": {"abs": 2e-3, "rel": 0}, "abs": {"rel": 5e-6, "abs": 0}, "sq": {"rel": 5e-7, "abs": 0}}


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "sums.jsonl"  # references 0..6: the golden engine's \boxed{seed % 7} is right about 1 in 7
    path.write_text("".join(json.dumps({"id": f"q{i}", "domain": "math", "question": f"What is {i} + 1?",
                                        "reference": str((i + 1) % 7)}) + "\n" for i in range(6)))
    return path


def _run(tmp_path: Path, out: Path, *extra: str) -> int:
    return cli.main(["run", "grpo", "model.backbones=[tiny-random]", "model.dtype=float32", "model.device=cpu",
                     "engine.name=golden",
                     "trainer.tasks_per_step=3", "trainer.prompt_reuse=4", "trainer.lr=1e-2", "seed=1",
                     f"data.tasks=[{_tasks(tmp_path)}]", f"output_dir={out}", *extra])


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_one_grpo_step_is_pinned(tmp_path):
    # regenerated for issue 58 item 4: tokens are scored at the preset's sampling temperature (0.7), so the adapter
    # moved; the answers unchanged
    run = tmp_path / "run"
    assert _run(tmp_path, run, "trainer.max_steps=1") == 0
    episodes, (metrics,) = _lines(run / "episodes.jsonl"), _lines(run / "metrics.jsonl")
    got = {"tasks": [e["task_id"] for e in episodes],
           "turns": [[{k: t[k] for k in ("agent", "role", "reward", "text", "tokens")} for t in e["turns"]]
                     for e in episodes],
           "adapters": adapter_checksums(run / "adapters" / "step_0")}
    path = GOLDEN / "grpo_step.json"
    if os.environ.get("SELFEVO_UPDATE_GOLDEN"):
        path.write_text(json.dumps(got, indent=1))
    want = json.loads(path.read_text())
    rewards = [t["reward"] for e in want["turns"] for t in e]
    assert 0.0 in rewards and 1.0 in rewards  # the pinned step has right and wrong answers
    assert got["tasks"] == want["tasks"] and got["turns"] == want["turns"]
    assert len(got["tasks"]) == 12 and all(got["tasks"].count(t) == 4 for t in set(got["tasks"]))  # 3 tasks x 4
    for k, v in want["adapters"]["agent0"].items():
        assert got["adapters"]["agent0"][k] == pytest.approx(v, **CHECKSUM_TOLERANCE[k]), k
    assert metrics["accuracy"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-4)
    assert metrics["train"]["agent0"]["rows"] == 12 and metrics["train"]["agent0"]["grad_norm"] > 0


def test_the_prompt_is_the_evaluation_prompt():
    task = Task("q", "math", "What is 2 + 3?", "5")
    (ask,) = next(grpo.answer(["agent0"])(type("Ep", (), {"task": task})()))
    assert ask.messages == [{"role": "user", "content": format_prompt(task)}]  # what setup=vanilla shows


@pytest.mark.slow
def test_two_steps_then_resume_adds_exactly_one(tmp_path):
    out, ref = tmp_path / "run", tmp_path / "ref"
    assert _run(tmp_path, out, "trainer.max_steps=2") == 0
    assert _run(tmp_path, out, "trainer.max_steps=3", "resume=true") == 0
    assert _run(tmp_path, ref, "trainer.max_steps=3") == 0
    assert [m["step"] for m in _lines(out / "metrics.jsonl")] == [0, 1, 2]
    last, want = _lines(out / "episodes.jsonl")[-12:], _lines(ref / "episodes.jsonl")[-12:]
    assert [[t["text"] for t in e["turns"]] for e in last] == [[t["text"] for t in e["turns"]] for e in want]
    assert (out / "adapters" / "final" / "agent0" / "adapter_config.json").exists()


def test_cpu_learn_preset():
    cfg = load_config(grpo.GRPOCfg, "grpo", "cpu-learn", [])
    t = cfg.trainer
    assert (t.optimizer, t.tasks_per_step, t.prompt_reuse, t.kl_estimator, t.kl_in_reward) == ("grpo", 8, 8, "k3",
                                                                                                  False)
    assert t.kl_coef > 0 and not t.mask_truncated and list(cfg.data.tasks) == ["arith:train"]


def test_recipe_defaults_are_deepseekmath_kl_as_a_k3_loss_term():
    """``selfevo run grpo trainer.kl_coef=0.04`` gives DeepSeekMath's β·k3 loss term (issue 58 item 10), not β·k1 folded
    into the reward; the other recipes keep their own defaults (CoMAS Eq. 9: k1 in the reward)."""
    from selfevo.algorithms import comas

    t = load_config(grpo.GRPOCfg, "grpo", "cpu", ["trainer.kl_coef=0.04"]).trainer
    assert (t.kl_coef, t.kl_in_reward, t.kl_estimator, t.loss_agg) == (0.04, False, "k3", "token_mean")
    t = load_config(grpo.GRPOCfg, "grpo", None, []).trainer
    assert (t.kl_in_reward, t.kl_estimator) == (False, "k3")
    t = load_config(comas.CoMASCfg, "comas", "cpu", ["trainer.kl_coef=0.04"]).trainer
    assert (t.kl_in_reward, t.kl_estimator) == (True, "k1")


def test_paper_presets_that_name_grpo_aggregate_as_eq_3():
    """MAESTRO's paper preset (Table 1's w/ GRPO baseline, footnote 1's executors) averages each answer's token mean
    (DeepSeekMath Eq. 3); the presets of recipes whose released code is verl or OpenRLHF keep token_mean."""
    from selfevo.algorithms import azr, comas, mae, maestro, sage

    assert load_config(maestro.MaestroCfg, "maestro", "paper", []).trainer.loss_agg == "seq_mean_token_mean"
    for module, cls, recipe in ((azr, "AZRCfg", "azr"), (comas, "CoMASCfg", "comas"), (mae, "MAECfg", "mae"),
                                (sage, "SageCfg", "sage")):
        assert load_config(getattr(module, cls), recipe, "paper", []).trainer.loss_agg == "token_mean"


@pytest.mark.parametrize("override, message", [
    ("trainer.loss_agg=seq-mean-token-mean", "trainer.loss_agg must be one of token_mean, seq_mean_token_mean"),
    ("trainer.logprob_temperature=0", "trainer.logprob_temperature must be sampling or a number > 0"),
    ("trainer.logprob_temperature=warm", "trainer.logprob_temperature must be sampling or a number > 0"),
    ("trainer.logprob_temperature=-1", "trainer.logprob_temperature must be sampling or a number > 0"),
])
def test_trainer_scoring_keys_are_checked(override, message):
    from selfevo.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(grpo.GRPOCfg, "grpo", "cpu", [override])


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_the_loop_hands_logprob_temperature_to_the_store(tmp_path):
    from selfevo.loop import Loop

    for value, want in (("sampling", None), ("1", 1.0), ("0.25", 0.25)):
        cfg = load_config(grpo.GRPOCfg, "grpo", None, ["model.backbones=[tiny-random]", "model.dtype=float32",
                                                       "model.device=cpu", "engine.name=golden",
                                                       f"trainer.logprob_temperature={value}",
                                                       f"output_dir={tmp_path / value}"])
        loop = Loop(cfg)
        try:
            assert loop.store.settings.logprob_temperature == want
        finally:
            loop.close()
