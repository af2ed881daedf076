"""Peak memory of the chosen tokens' log-probs, forward and backward: selfevo's chunked head
(:func:`selfevo.policy.logprobs.chosen_logprobs`) against the plain full-vocabulary log-softmax
(:func:`~selfevo.policy.logprobs.reference_chosen_logprobs`), on the same inputs.

    .venv/bin/python -m benchmarks.logprob_memory                      # SmolLM2's head, 4,096 scored tokens, CPU
    python -m benchmarks.logprob_memory --device cuda --tokens 16384 --vocab 128256 --hidden 4096 \\
        --dtype bfloat16 --out logprob_memory_8b_head                  # an 8B model's head (Llama 3), on a GPU

Each path runs in a fresh process: the inputs are built (hidden states [tokens, hidden] that need a gradient, a
frozen head [vocab, hidden], targets, weights for the loss), the path runs once on the first ``chunk`` tokens (first
calls load kernels and workspaces), the peak is reset, then one forward and backward runs (``sum(w * logp)``, the
gradient reaching the hidden states). The peak above the inputs is taken from
``torch.cuda.max_memory_allocated`` on CUDA, and from the resident high-water mark on the CPU (``VmHWM``, reset
through ``/proc/self/clear_refs``; Linux), with blocks of 1 MB and more mapped alone
(:func:`selfevo.heap.map_large_blocks`), so that the mark is the tensors' and not the heap's.
The plain path holds the whole micro-batch's logits and their fp32 log-softmax at once (``tokens x vocab x 4``
bytes, ``full_fp32_gib``, several times over in its backward); the chunked one at most a few ``chunk x vocab``
blocks. Prints and writes results/<out>.json: per path ``peak_gib``, and ``plain_over_chunked``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from benchmarks.common import machine, save
from benchmarks.recipe_memory import PhasePeaks

PATHS = ("chunked", "plain")


def measure(path: str, tokens: int, vocab: int, hidden: int, dtype: str, chunk: int, device: str) -> int:
    """Bytes above the inputs at the peak of one forward + backward of ``path`` (this process)."""
    import torch

    from selfevo.heap import map_large_blocks, trim
    from selfevo.policy.logprobs import chosen_logprobs, reference_chosen_logprobs

    map_large_blocks(1 << 20)  # blocks of 1 MB and more mapped alone: the mark is the tensors', not the heap's

    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    h = (torch.randn(tokens, hidden, generator=gen) * 0.5).to(device=device, dtype=dt).requires_grad_()
    weight = (torch.randn(vocab, hidden, generator=gen) * hidden ** -0.5).to(device=device, dtype=dt)
    targets = torch.randint(0, vocab, (tokens,), generator=gen).to(device)
    w = torch.randn(tokens, generator=gen).to(device)
    run = (lambda x=h, t=targets: chosen_logprobs(x, weight, t, chunk)) if path == "chunked" else \
        (lambda x=h, t=targets: reference_chosen_logprobs(x, weight, t))
    few = min(tokens, chunk)  # first calls load kernels and workspaces: not the path's memory
    run(h[:few].detach().requires_grad_(), targets[:few]).sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        (run() * w).sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    trim()
    peaks = PhasePeaks()
    with peaks.phase("path"):  # the mark starts at the resident size
        base = peaks.high_water()
        (run() * w).sum().backward()
    return peaks.peaks["path"] - base


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096, help="scored tokens in one micro-batch")
    ap.add_argument("--vocab", type=int, default=49152, help="the head's rows (SmolLM2: 49,152)")
    ap.add_argument("--hidden", type=int, default=576, help="the head's width (SmolLM2: 576)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--chunk", type=int, default=1024, help="rows per chunk (the store's default)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", default="logprob_memory")
    ap.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> dict | None:
    ap = parser()
    args = ap.parse_args(argv)
    if min(args.tokens, args.vocab, args.hidden, args.chunk) < 1:
        ap.error("--tokens, --vocab, --hidden and --chunk must be >= 1")
    shape = (args.tokens, args.vocab, args.hidden, args.dtype, args.chunk, args.device)
    if args.child:
        print(json.dumps({"bytes": measure(args.child, *shape)}))
        return None
    if args.device == "cpu" and not PhasePeaks.available():
        ap.error("the CPU measurement needs Linux's /proc/self/status and /proc/self/clear_refs")
    forwarded = [f"--{k}={getattr(args, k)}" for k in ("tokens", "vocab", "hidden", "dtype", "chunk", "device")]
    peaks = {}
    for path in PATHS:
        done = subprocess.run([sys.executable, "-m", __spec__.name, *forwarded, "--child", path], capture_output=True,
                              text=True)
        if done.returncode != 0:
            sys.exit(f"logprob_memory: the {path} path failed: {done.stderr.strip().splitlines()[-1:]}")
        peaks[path] = round(json.loads(done.stdout.strip().splitlines()[-1])["bytes"] / 2**30, 4)
    result = {"tokens": args.tokens, "vocab": args.vocab, "hidden": args.hidden, "dtype": args.dtype,
              "chunk": args.chunk, "device": args.device,
              "full_fp32_gib": round(args.tokens * args.vocab * 4 / 2**30, 4),
              "peak_gib": peaks, "plain_over_chunked": round(peaks["plain"] / max(peaks["chunked"], 1e-9), 2),
              "machine": machine()}
    if args.device == "cuda":
        import torch

        result["machine"]["cuda"] = torch.cuda.get_device_name(0)
    save(args.out, result)
    return result


if __name__ == "__main__":
    main()
