"""Data parallelism (``torchrun``, gloo on CPU): the split rollouts and updates give the single-process run.

* helpers: no-ops in one process; :meth:`SeqBatch.shard` deals rows (whole groups) over ranks, balanced.
* store: ``PolicyStore.step`` and ``score`` in 2 spawned gloo processes equal one process (an SGD optimizer with
  lr 1 makes the parameter change the clipped gradient itself, so the reduced gradient is compared directly),
  including a rank that gets no rows.
* recipe: a real CoMAS step on tiny-random in fp32 with the scripted "golden" engine
  (``tests/helpers/golden_engine.py``) under ``torchrun --nproc_per_node 2`` ends with the adapters (≤ 1e-5) and the
  logs of one process over the same global batch; resuming that run with 1 process gives the 2-step 1-process run;
  the README's torchrun command line finishes with one metrics line.

Each test takes 30-45 s on a loaded 2-core CPU (the processes start, import torch and transformers, load the model).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import helpers.golden_engine  # noqa: F401  (registers engine "golden")
from helpers.paths import HELPERS, ROOT
from selfevo import cli, distributed
from selfevo.policy import SeqBatch

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def one_thread():
    """In-process runs with one thread, like each torchrun process (2 threads on a loaded 2-core box: 5× slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def env1() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1"}


# ---- helpers, one process ------------------------------------------------------------------------------------
def test_helpers_are_no_ops_in_one_process():
    assert not distributed.active() and distributed.world_size() == 1 and distributed.rank() == 0
    assert distributed.is_main() and not distributed.init()
    t = torch.ones(3)
    assert distributed.all_reduce_sum(t) is t and distributed.all_reduce_sum(2.5) == 2.5
    assert distributed.all_gather_object({"a": 1}) == [{"a": 1}] and distributed.broadcast_object(7) == 7
    assert distributed.shard([1, 2, 3]) == [1, 2, 3] and distributed.gather_shards(3, [1, 2, 3]) == [1, 2, 3]
    distributed.barrier()


def _batch(lengths, groups=None) -> SeqBatch:
    b = SeqBatch.build([[1, 2]] * len(lengths), [[3] * n for n in lengths], pad_id=0)
    return b.with_groups(groups) if groups is not None else b


def test_shard_deals_rows_and_keeps_groups_whole():
    b = _batch([5, 1, 9, 3, 7, 2, 8])
    assert b.shard(0, 1) is b
    parts = [b.shard(r, 3) for r in range(3)]
    dealt = [n for p in parts for n in p.loss_mask.sum(-1).int().tolist()]
    assert sorted(dealt) == [1, 2, 3, 5, 7, 8, 9]  # every row exactly once (their lengths differ)
    tokens = [int(p.loss_mask.sum()) for p in parts]
    assert max(tokens) - min(tokens) <= 9  # dealt back and forth: 9+2+1 / 8+3 / 7+5
    g = _batch([5, 1, 9, 3, 7, 2], groups=["a", "a", "b", "b", "c", "c"])
    for r in range(2):
        part = g.shard(r, 2)
        assert part is not None and all(part.groups.count(k) == 2 for k in set(part.groups))
    assert _batch([4]).shard(1, 2) is None  # a rank may get no rows


# ---- store: 2 gloo processes vs 1 --------------------------------------------------------------------------------
def _store_run(out: Path) -> None:
    """One SGD step (lr 1) of agent a0 over 7 rows (groups of 2) and of a1 over 1 row, and a score of the batch."""
    from selfevo.optimizers import score
    from selfevo.optimizers.objectives import count_tokens, token_mean
    from selfevo.policy import LoraSettings, PolicyStore, StoreSettings

    torch.manual_seed(0)
    store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=4, alpha=8), micro_batch=2,
                                      max_grad_norm=0.5))
    for agent in ("a0", "a1"):
        store.add_agent(agent, "tiny-random")
    gen = torch.Generator().manual_seed(1)
    for agent in ("a0", "a1"):
        for p in store.adapter_params(agent):
            p.data.copy_(torch.randn(p.shape, generator=gen) * 0.3)  # B ≠ 0: both A and B get gradients
        store.adamws[agent] = torch.optim.SGD(store.adapter_params(agent), lr=1.0)
    vocab = 200
    ids = torch.randint(3, vocab, (7, 12), generator=gen).tolist()
    batch = SeqBatch.build([x[:3] for x in ids], [x[3:3 + n] for x, n in zip(ids, (9, 2, 5, 7, 1, 4, 8))], 0)
    batch = batch.with_groups([0, 0, 1, 1, 2, 2, 3]).with_extras(w=torch.randn(batch.loss_mask.shape, generator=gen))
    n = count_tokens([batch.loss_mask])
    scored = score(store, "a0", batch)
    before = {a: [p.detach().clone() for p in store.adapter_params(a)] for a in ("a0", "a1")}
    stats = [store.update("a0", batch, lambda logp, mb: token_mean(-logp * mb.extras["w"], mb.loss_mask, n)),
             store.update("a1", batch.rows([4]), lambda logp, mb: token_mean(-logp, mb.loss_mask, 1.0))]
    delta = {a: [p.detach() - q for p, q in zip(store.adapter_params(a), before[a])] for a in ("a0", "a1")}
    torch.save({"delta": delta, "stats": stats, "score": scored}, out)


def _store_worker(rank: int, world: int, port: int, folder: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    assert distributed.init() and distributed.world_size() == world
    _store_run(Path(folder) / f"rank{rank}.pt")
    distributed.shutdown()


@pytest.mark.slow
def test_store_step_and_score_split_over_two_ranks_equal_one_process(tmp_path, one_thread):
    import torch.multiprocessing as mp

    _store_run(tmp_path / "single.pt")
    mp.spawn(_store_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    single = torch.load(tmp_path / "single.pt")
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.allclose(got["score"], single["score"], rtol=0, atol=1e-6)  # micro-batches on 2 ranks
        for agent in ("a0", "a1"):
            for d1, d2 in zip(single["delta"][agent], got["delta"][agent]):
                assert torch.allclose(d1, d2, rtol=1e-5, atol=1e-6), agent  # the reduced, clipped gradient
        for s1, s2 in zip(single["stats"], got["stats"]):
            assert s2["loss"] == pytest.approx(s1["loss"], rel=1e-5)
            assert s2["grad_norm"] == pytest.approx(s1["grad_norm"], rel=1e-5)
    assert single["stats"][0]["grad_norm"] > 0.5  # the clip acted (on the reduced gradient)
    assert any(float(d.abs().max()) > 1e-3 for d in single["delta"]["a1"])  # the rank without rows took the step


# ---- the recipe under torchrun -----------------------------------------------------------------------------------
COMAS = ["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=3", "engine.name=golden",
         "trainer.tasks_per_step=4", "trainer.lr=1e-4", "trainer.micro_batch=2", "trainer.kl_coef=0.05",
         "trainer.train_batch=5", "trainer.epochs=2", "trainer.save_adapters_every=1", "protocol.rounds=2",
         "protocol.score_prefix=<score>", "data.n_math=4", "data.n_code=2", "data.n_science=2", "seed=2",
         "data.tasks=[]", "eval.at_start=false", "eval.every=0"]
# wall times, and the forward shapes each rank ran on its share of the rows: the only figures that may differ
TIMES = ("rollout_s", "update_s", "step_s", "update_shapes")


def _adapters(folder: Path) -> dict:
    return {a.name: load_file(str(a / "adapter_model.safetensors")) for a in sorted(folder.iterdir())}


def _max_diff(a: Path, b: Path) -> float:
    x, y = _adapters(a), _adapters(b)
    assert x.keys() == y.keys()
    return max(float((x[g][k] - y[g][k]).abs().max()) for g in x for k in x[g])


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _same_metrics(got: dict, want: dict) -> None:
    """Equal but for the timings; the rounded train statistics within one rounding step (sums over ranks)."""
    got, want = {k: v for k, v in got.items() if k not in TIMES}, {k: v for k, v in want.items() if k not in TIMES}
    assert got.keys() == want.keys()
    for k in got:
        if k == "train":
            assert json.dumps(got[k], sort_keys=True) == json.dumps(want[k], sort_keys=True) or all(
                got[k][a][s] == pytest.approx(v, abs=2e-5) for a in want[k] for s, v in want[k][a].items()), k
        else:
            assert got[k] == want[k], k


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``one``: 2 steps in one process; ``two``: step 0 in 2 processes (torchrun); ``resumed``: ``two`` resumed
    for step 1 in one process."""
    root = tmp_path_factory.mktemp("dp")
    one, two, resumed = root / "one", root / "two", root / "resumed"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    assert cli.main([*COMAS, "trainer.max_steps=2", "log.tensorboard=false", f"output_dir={one}"]) == 0
    cmd = [*TORCHRUN, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           str(HELPERS / "golden_engine.py"), *COMAS, "trainer.max_steps=1", f"output_dir={two}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env1(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.copytree(two, resumed)
    assert cli.main([*COMAS, "trainer.max_steps=2", "log.tensorboard=false", "resume=true",
                     f"output_dir={resumed}"]) == 0
    torch.set_num_threads(threads)
    return one, two, resumed


@pytest.mark.slow
def test_two_process_comas_step_equals_one_process(runs):
    one, two, _ = runs
    # the adapters really moved (PEFT starts lora_B at 0) and equal the single-process ones
    moved = max(float(t.norm()) for a in _adapters(two / "adapters" / "step_0").values()
                for k, t in a.items() if "lora_B" in k)
    assert moved > 1e-3
    assert _max_diff(two / "adapters" / "step_0", one / "adapters" / "step_0") <= 1e-5
    # the logs: the same episodes (turns, rewards) and metrics
    want_eps = [e for e in _lines(one / "episodes.jsonl") if e["step"] == 0]
    assert _lines(two / "episodes.jsonl") == want_eps
    (got,), want = _lines(two / "metrics.jsonl"), _lines(one / "metrics.jsonl")[0]
    _same_metrics(got, want)
    assert len({r for e in want_eps for t in e["turns"] for r in [t["reward"]] if r is not None}) > 2  # varied
    # rank 0 alone wrote the run directory
    launches = json.loads((two / "run.json").read_text())
    assert len(launches) == 1 and launches[0]["world_size"] == 2
    assert len(list((two / "tensorboard").iterdir())) == 1


@pytest.mark.slow
def test_two_process_run_resumes_with_one_process(runs):
    one, _, resumed = runs
    assert _max_diff(resumed / "adapters" / "step_1", one / "adapters" / "step_1") <= 1e-5
    assert _max_diff(resumed / "adapters" / "final", one / "adapters" / "final") <= 1e-5
    assert _lines(resumed / "episodes.jsonl") == _lines(one / "episodes.jsonl")
    got, want = _lines(resumed / "metrics.jsonl"), _lines(one / "metrics.jsonl")
    assert [m["step"] for m in got] == [0, 1]
    for g, w in zip(got, want):
        _same_metrics(g, w)
    assert [x["world_size"] for x in json.loads((resumed / "run.json").read_text())] == [2, 1]


@pytest.mark.slow
def test_torchrun_command_line(tmp_path):
    """The README line ``OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 -m selfevo run comas ...`` (cpu preset, HF
    engine), on a free port of 127.0.0.1."""
    torchrun = Path(sys.executable).parent / "torchrun"
    assert torchrun.exists()
    run = tmp_path / "run"
    cmd = [str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "selfevo", "run", "comas", "model.backbones=[tiny-random]", "trainer.max_steps=1",
           "trainer.tasks_per_step=2", f"output_dir={run}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env1(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = _lines(run / "metrics.jsonl")
    assert line["step"] == 0 and set(line["train"]) and line["tokens"] > 0
    assert line["eval_start"]["n"] == 50  # the preset's held-out evaluation, its tasks split over the two ranks
    assert proc.stdout.count("recipe: comas") == 1  # the config is printed by rank 0 only
    assert (run / "adapters" / "final").is_dir() and json.loads((run / "run.json").read_text())[0]["world_size"] == 2
