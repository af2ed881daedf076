"""Golden test: one CoMAS step (fp32, tiny-random, a scripted engine whose outputs parse) is pinned exactly:
episodes, rewards, and checksums of every adapter after the update. A refactor of the recipe, the interaction
runner, the reward sources or the optimizers must keep it green.

The scripted engine (``tests/helpers/golden_engine.py``) answers from the request's keyed seed (never from batch
position), with real token ids of the backbone's tokenizer, so the update trains on real batches. Scores are 1, 2, 3
or unparsable by ``seed % 4``.
Regenerate (only on purpose, after a change meant to alter behaviour): ``SELFEVO_UPDATE_GOLDEN=1 pytest
tests/algorithms/test_golden_comas.py``.
"""
import json
import os
from pathlib import Path

import pytest

from helpers.golden import adapter_checksums
from helpers.golden_engine import SCORES  # registers engine "golden"
from helpers.paths import GOLDEN
from selfevo import cli

GOLDEN_FILE = GOLDEN / "comas_step.json"

# The adapter checksums are floats computed through torch's CPU kernels (fp32 matmuls in MKL/oneDNN, ATen's
# vectorised reductions), whose summation order depends on the CPU's instruction set and the thread count, so they
# are pinned to a tolerance, not bit for bit. The step is one AdamW update, lr * m/(sqrt(v) + eps) per element: an
# element whose gradient is within a few eps (1e-8) of zero gets an update whose size and sign follow the last bits
# of its gradient, so a reordered sum moves the *signed* sum of an adapter by a fraction of lr (1e-2) while abs and
# sq barely move. Measured over AVX-512 / AVX2 / default ATen kernels, MKL and oneDNN capped at AVX2, 1 and 2
# threads (tests/test_portable.py runs this test under each): sum spread 6e-5, abs 6e-5 (5e-8 relative), sq 2e-7
# (3e-9 relative). A 1% change of lr moves every agent's sum by >= 3e-3, abs by 1.6 and sq by 3e-2; a changed
# reward flips whole rows of updates (far more). The tolerances sit ~8x above the kernel spread and >= 6x below
# the 1%-lr shift:
CHECKSUM_TOLERANCE = {"sum": {"abs": 5e-4, "rel": 0}, "abs": {"rel": 5e-7, "abs": 0}, "sq": {"rel": 5e-7, "abs": 0}}


def _record(run: Path) -> dict:
    episodes = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    turns = [[{k: t[k] for k in ("agent", "role", "round", "reward", "text", "tokens")} for t in e["turns"]]
             for e in episodes]
    return {"tasks": [e["task_id"] for e in episodes], "turns": turns,
            "adapters": adapter_checksums(run / "adapters" / "step_0")}


def test_one_comas_step_is_pinned(tmp_path):
    run = tmp_path / "run"
    rc = cli.main(["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "model.device=cpu",
                   "n_agents=3",
                   "engine.name=golden", "trainer.max_steps=1", "trainer.tasks_per_step=3", "trainer.lr=1e-2",
                   "trainer.micro_batch=4", "protocol.rounds=2", "protocol.score_prefix=<score>",
                   "data.n_math=4", "data.n_code=2", "data.n_science=2", "seed=2", f"output_dir={run}",
                   # the cpu preset as it was when this step was pinned: the CoMAS mix, T = 1, 128 tokens, no eval
                   "data.tasks=[]", "sampling.temperature=1.0", "sampling.max_new_tokens=128",
                   "eval.at_start=false", "eval.every=0"])
    assert rc == 0
    got = _record(run)
    if os.environ.get("SELFEVO_UPDATE_GOLDEN"):
        GOLDEN_FILE.parent.mkdir(exist_ok=True)
        GOLDEN_FILE.write_text(json.dumps(got, indent=1))
    want = json.loads(GOLDEN_FILE.read_text())
    # the pinned step exercises every score and a parse failure (else it would pin too little)
    scorer_texts = [t["text"] for e in want["turns"] for t in e if t["role"] == "scorer"]
    assert all(s[len("<score>"):] in scorer_texts for s in SCORES[:3]) and SCORES[3] in scorer_texts
    assert got["tasks"] == want["tasks"]
    assert got["turns"] == want["turns"]
    for agent, sums in want["adapters"].items():
        for k, v in sums.items():
            assert got["adapters"][agent][k] == pytest.approx(v, **CHECKSUM_TOLERANCE[k]), (agent, k)
