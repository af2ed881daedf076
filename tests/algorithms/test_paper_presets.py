"""Every paper preset executes one full step on this CPU with the paper's agent counts, batch sizes, rounds and
optimizer settings; only the model (tiny-random, in float32: bf16 runs several times slower on CPUs without
native bf16 matmuls, and the GPU dtype is checked below with the engine arguments), the data source (local files),
the token limits (4 new tokens, rollouts and in-loop evaluation: the step's shapes do not depend on it, its time
does) and the engine (hf: the presets name vLLM for GPUs, and vLLM's CPU build cannot serve tiny-random's head_dim
16) are changed, plus what the token limit forces: a random model never stops within 4 tokens, so every completion
is cut and ``trainer.mask_truncated=true`` (the CoMAS and MAESTRO presets: CoMAS's released code) would leave nothing
to update; ``mask_truncated=false`` lets the update run on the paper's batch settings. Each run writes its metrics
line, whose shape is checked against the paper's numbers. A random model writes no parsable score, question or
selection: the rewards are those of parse failures (what the step does with them is tested with scripted engines
elsewhere); here the shapes, the schedule and the update are what is exercised.
"""
import json

import pytest

from selfevo import cli

TINY = ["model.backbones=[tiny-random]", "model.dtype=float32", "data.source=local", "sampling.max_new_tokens=4",
        "eval.max_new_tokens=4", "engine.name=hf", "trainer.max_steps=1", "trainer.mask_truncated=false"]


def _run(recipe: str, out, *extra: str) -> tuple[dict, list[dict]]:
    assert cli.main(["run", recipe, "--preset", "paper", *TINY, f"output_dir={out}", *extra]) == 0
    (metrics,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    episodes = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    return metrics, episodes


@pytest.mark.slow
def test_comas_paper_preset_runs_one_step(tmp_path):
    m, episodes = _run("comas", tmp_path / "run")
    # Table 2: 64 prompts x reuse 4, m = 8 rounds of (solution, evaluation, scoring) with n = 1, 4 agents
    assert m["step"] == 0 and len(episodes) == 64 * 4
    assert all(len(e["turns"]) == 8 * 3 for e in episodes)
    # every agent trains on its scorer turns (solver/evaluator turns are masked: their scores do not parse), in
    # parameter updates of the paper's train batch of 64 rows
    assert set(m["train"]) == {"agent0", "agent1", "agent2", "agent3"}
    assert all(t["parameter_updates"] == -(-t["rows"] // 64) for t in m["train"].values())


@pytest.mark.slow
def test_sage_paper_preset_runs_one_step(tmp_path):
    m, episodes = _run("sage", tmp_path / "run")
    challenges = [e for e in episodes if e["turns"] and e["turns"][0]["role"] == "challenger"]
    # Table 4: batch 128 of challenges and of plan-solve items on one shared adapter
    assert m["step"] == 0 and len(challenges) == 128 and len(episodes) - len(challenges) == 128
    assert m["pool_added"] + sum(m["rejected"].values()) == 128 and list(m["train"]) == ["sage"]
    assert m["train"]["sage"]["rows"] > 128 and m["update_tokens"] > 0
    assert (tmp_path / "run" / "adapters" / "final" / "sage").is_dir()


@pytest.mark.slow
def test_mae_paper_preset_runs_one_step(tmp_path):
    m, episodes = _run("mae", tmp_path / "run")
    proposals = [e for e in episodes if e["turns"][0]["role"] == "proposer"]
    # mae.sh: batch 128 of proposals and of solve items on one shared adapter
    assert m["step"] == 0 and len(proposals) == 128 and len(episodes) - len(proposals) == 128
    assert m["pool_added"] + sum(m["rejected"].values()) == 128 and list(m["train"]) == ["mae"]
    assert m["train"]["mae"]["rows"] >= 128 and m["update_tokens"] > 0
    assert (tmp_path / "run" / "adapters" / "final" / "mae").is_dir()


@pytest.mark.slow
def test_maestro_paper_preset_runs_one_step(tmp_path):
    m, episodes = _run("maestro", tmp_path / "run")
    # App. C.1: N = 3 agents x K = 3 candidates, R = 3 rounds, 32 questions per step; G = 9 samples per slate
    assert m["step"] == 0 and len(episodes) == 32
    for e in episodes:
        roles = [t["role"] for t in e["turns"]]
        assert roles.count("execution") == 3 * 9 and roles.count("central") == 3
        assert roles.count("central_sample") == 3 * 9
    central = m["train"]["central"]
    # global batch 32 slates (288 rows): 96 slates per step -> 3 parameter updates, one pass
    assert central["slates"] == 96 and central["parameter_updates"] == 3


@pytest.mark.parametrize("recipe,loras,rank,model_len,memory", [
    ("comas", 4, 64, 32768, 0.3), ("sage", 8, 128, 16384, 0.3), ("maestro", 2, 16, 8192, 0.35),
    ("azr", 8, 128, 14240, 0.3), ("mae", 8, 128, 16384, 0.3)])
def test_gpu_presets_give_vllm_the_documented_lora_serving_arguments(recipe, loras, rank, model_len, memory):
    """What each paper (GPU) preset hands ``vllm.LLM`` on a GPU, checked without one: multi-LoRA with the smallest
    accepted rank that fits the preset's adapters, host-side adapter slots, prefix caching, CUDA graphs, and the
    share of GPU memory left to vLLM (the trainer shares the GPU)."""
    from selfevo.algorithms import RECIPES
    from selfevo.config import load_config
    from selfevo.engines.base import VLLM_LORA_RANKS
    from selfevo.engines.vllm import engine_args

    cfg = load_config(RECIPES.get(recipe).config_class(), recipe, "paper", [])
    assert cfg.engine.name == "vllm" and cfg.model.lora.r == rank and rank in VLLM_LORA_RANKS
    args = engine_args(cfg.engine.vllm, cfg.model.dtype, max_lora_rank=cfg.model.lora.r, seed=cfg.seed, cuda=True)
    assert args == {"dtype": "bfloat16", "enable_lora": True, "max_loras": loras, "max_lora_rank": rank,
                    "max_cpu_loras": 2 * loras, "max_model_len": model_len, "enable_prefix_caching": True,
                    "enforce_eager": False, "seed": cfg.seed, "gpu_memory_utilization": memory}
    assert "gpu_memory_utilization" not in engine_args(cfg.engine.vllm, cfg.model.dtype, rank, cuda=False)  # CPU


@pytest.mark.parametrize("recipe,masked", [("comas", True), ("azr", False), ("sage", False), ("mae", False)])
def test_paper_presets_mask_truncated_completions_as_their_papers_do(recipe, masked):
    """Issue 58 item 7: CoMAS's released code leaves cut completions out of training; AZR (Eq. 6: −1 for a format
    error), SAGE and MAE (verl: no masking in the released configs) train on them with their format penalty."""
    from selfevo.algorithms import RECIPES
    from selfevo.config import load_config

    cfg = load_config(RECIPES.get(recipe).config_class(), recipe, "paper", [])
    assert cfg.trainer.mask_truncated is masked


def test_server_flags_follow_the_engine_section():
    from selfevo.engines.vllm_server import _optional_flags

    assert _optional_flags({"prefix_caching": True, "enforce_eager": False, "gpu_memory_utilization": 0.3}) == [
        "--enable-prefix-caching", "--gpu-memory-utilization", "0.3"]
    assert _optional_flags({"prefix_caching": False, "enforce_eager": True, "gpu_memory_utilization": None}) == [
        "--no-enable-prefix-caching", "--enforce-eager"]


@pytest.mark.slow
def test_azr_paper_preset_runs_one_step(tmp_path):
    m, episodes = _run("azr", tmp_path / "run")
    # Table 3: B = 64 proposals and 64 solves per kind (three kinds); a random model writes no valid task, so the
    # solve tasks are drawn from the buffers (the identity triplet) and the proposals are all format errors
    assert m["step"] == 0 and len(episodes) == 2 * 3 * 64
    assert m["validity"] == {"format": 3 * 64} and list(m["train"]) == ["azr"]
    assert m["train"]["azr"]["parameter_updates"] == -(-m["train"]["azr"]["rows"] // 128)
