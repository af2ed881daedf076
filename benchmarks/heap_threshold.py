"""The update's time and peak under glibc's mmap threshold fixed at 8 MB against one that follows the micro-batch.

    .venv/bin/python -m benchmarks.heap_threshold [--rounds 2] [--steps 2] [--rows comas|maestro]
                                                  [--dtype float32|bfloat16]

Since selfevo.heap's layer threshold (``StoreSettings(heap_threshold=...)``, what ``build.policy_store`` sets), an
update maps blocks of 7/8 of one layer input's bytes and more on their own (between 1 and 8 MB), where before it
mapped blocks of 8 MB and more. Mapped blocks are unmapped when freed (no heap holes: less memory) but every fresh
page faults and is zeroed (time). This measures both on fixed rows, one checkpointed parameter update after another:

* ``comas``: 16 rows of 520-740 prompt + 12-128 completion tokens (11,401 in all, the main job's agent update);
* ``maestro``: 8 rows of 700-900 prompt + 6-40 completion tokens, two slates of 4 rows that share their prompt.

Each setting runs in a fresh process (its heap starts clean), the two alternate ``--rounds`` times (fixed, layer,
fixed, layer, ...); a process takes ``--steps`` steps and reports each step's seconds and the process's peak resident
size (``VmHWM``). Keys: per setting ``step_s`` (all steps), ``median_s`` (steps after each process's first),
``peak_gib`` (largest), and ``time_ratio`` (layer / fixed medians). Time it on a quiet machine. Writes
results/heap_threshold_<rows>.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from benchmarks.common import machine, save
from benchmarks.recipe_memory import PhasePeaks

MODEL = "smollm2-135m-instruct"
SETTINGS = ("fixed", "layer")
ROWS = {  # (prompt lengths, completion lengths, rows sharing a prompt)
    "comas": ([520, 560, 610, 650, 700, 740, 560, 600, 520, 680, 720, 590, 640, 610, 700, 560],
              [128, 90, 128, 14, 128, 110, 16, 128, 128, 60, 128, 12, 128, 100, 128, 15], 1),
    "maestro": ([760] * 4 + [880] * 4, [6, 12, 40, 9, 8, 30, 11, 7], 4),
}


def child(setting: str, rows: str, steps: int, dtype: str) -> dict:
    """One process: a store as ``build.policy_store`` makes it (``layer``) or with the threshold fixed at 8 MB."""
    import torch

    from selfevo import heap
    from selfevo.optimizers.objectives import count_tokens, ppo_clip_loss, token_mean
    from selfevo.policy import PolicyStore, StoreSettings, SeqBatch

    if not heap.map_large_blocks():
        raise SystemExit("heap_threshold.py: glibc's mallopt is not available here (or MALLOC_MMAP_THRESHOLD_ is "
                         "set), so there is nothing to compare")
    store = PolicyStore(StoreSettings(dtype=dtype, micro_batch=4, gradient_checkpointing=True, shared_prompts=True,
                                      heap_threshold=heap.MMAP_THRESHOLD if setting == "layer" else None))
    store.add_agent("agent", MODEL)
    plen, clen, share = ROWS[rows]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 40000, (p,), generator=gen).tolist() for p in plen[::share]]
    prompts = [p for p in prompts for _ in range(share)]
    completions = [torch.randint(100, 40000, (c,), generator=gen).tolist() for c in clen]
    batch = SeqBatch.build(prompts, completions, 2)
    adv = torch.randn(len(plen), generator=gen)
    batch = batch.with_extras(advantages=adv[:, None] * batch.loss_mask)
    normaliser = count_tokens([batch.loss_mask])

    def loss_fn(logp, mb):
        loss, _ = ppo_clip_loss(logp, logp.detach(), mb.extras["advantages"], mb.loss_mask)
        return token_mean(loss, mb.loss_mask, normaliser)

    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        store.update("agent", batch, loss_fn)
        seconds.append(round(time.perf_counter() - start, 2))
    return {"setting": setting, "step_s": seconds, "peak_gib": round(PhasePeaks.high_water() / 2**30, 3),
            "tokens": sum(plen) + sum(clen), "torch_threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rows", default="comas", choices=list(ROWS))
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 2:
        ap.error("--rounds must be >= 1 and --steps >= 2 (a process's first step is not counted)")
    if not PhasePeaks.available():
        ap.error("the peak is read from Linux's /proc/self/status")
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.steps, args.dtype)))
        return
    runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for _ in range(args.rounds):
        for setting in SETTINGS:
            cmd = [sys.executable, "-m", __spec__.name, "--child", setting, "--rows", args.rows,
                   "--steps", str(args.steps), "--dtype", args.dtype]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            runs[setting].append(json.loads(out))
            print(out, flush=True)
    result = {"rows": args.rows, "dtype": args.dtype, "rounds": args.rounds, "steps": args.steps,
              "tokens": runs["fixed"][0]["tokens"]}
    for setting, done in runs.items():
        counted = [s for r in done for s in r["step_s"][1:]]
        result[setting] = {"step_s": [r["step_s"] for r in done], "median_s": statistics.median(counted),
                           "peak_gib": max(r["peak_gib"] for r in done)}
    result["time_ratio"] = round(result["layer"]["median_s"] / result["fixed"]["median_s"], 3)
    result["machine"] = machine()
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}))
    save(f"heap_threshold_{args.rows}", result)


if __name__ == "__main__":
    main()
