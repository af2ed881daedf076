"""What running CLPO's listwise candidate rows with their slate saves: one update of the embedded model on
MAESTRO-shaped slates, run as ``optimizers/clpo.py`` runs them (``clpo``: per slate, whichever runs fewer token
positions of its candidate rows in the slate's micro-batch, sharing the slate's prompt, ``packing.SHARED_PREFIX``,
and the layout before) against the layout before (``before``: a slate's rows one micro-batch sharing its prompt,
each row's K candidate rows in micro-batches of their own sharing that row's prompt and rationale).

    .venv/bin/python -m benchmarks.clpo_packing [--slates 8] [--rows 8] [--prompt 650] [--rationale 42]
                                                [--decision 2] [--candidates 2] [--repeats 3] [--dtype auto]
                                                [--count-only]

The defaults are the shapes of a ``maestro_selectors.yaml`` CLPO step on the embedded model (8 slates of 8
central samples, ~650 prompt tokens: the question and 4 candidate solutions of ~118 tokens; ~42 rationale
tokens; a 2-token decision; 2 candidates shown to each sample). Token ids are random: the cost is the shapes'.
Both layouts run the same rows (``trainer.micro_batch=4``, gradient checkpointing on) with a token-mean loss over
every scored token; interleaved (before, clpo, ...) after one warm-up pair. Keys per layout: ``median_s``,
``all_s``, ``positions`` (token positions the forwards run: packed rows × padded width, summed over micro-batches;
exact), ``packed_rows``;
``time_ratio`` (clpo / before, the median of the pairs' ratios) and ``positions_ratio``. Writes
results/clpo_packing.json. Time it on a quiet machine only. ``--count-only`` loads no model and times nothing: the
token positions of ``unpacked``, ``before`` and ``clpo`` (exact, any machine), in
results/clpo_packing_positions.json.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import machine, save

from selfevo.optimizers.objectives import count_tokens, token_mean
from selfevo.policy import PolicyStore, SeqBatch, StoreSettings
from selfevo.optimizers.clpo import apart_groups, candidate_layout, join
from selfevo.policy.packing import SHARED_PREFIX

MODEL = "smollm2-135m-instruct"
MICRO_BATCH = 4  # trainer.micro_batch of the maestro recipe


def slates_batch(slates: int, rows: int, prompt: int, rationale: int, decision: int, candidates: int,
                 seed: int = 0) -> tuple[SeqBatch, SeqBatch, list[int]]:
    """The sampled rows (each slate's prompt, a rationale and a decision), their candidate rows (the slate's prompt
    and the row's rationale, then one candidate's decision; extra ``parent``) and each sampled row's slate."""
    gen = torch.Generator().manual_seed(seed)

    def draw(n: int) -> list[int]:
        return torch.randint(100, 40000, (n,), generator=gen).tolist()

    prompts, comps, slate_of, c_prompts, c_comps, parent = [], [], [], [], [], []
    for s in range(slates):
        p = draw(prompt)
        for _ in range(rows):
            r = draw(rationale)
            for _ in range(candidates):
                c_prompts.append(p + r)
                c_comps.append(draw(decision))
                parent.append(len(prompts))
            prompts.append(p)
            comps.append(r + draw(decision))
            slate_of.append(s)
    choices = SeqBatch.build(c_prompts, c_comps, pad_id=2).with_extras(parent=torch.tensor(parent, dtype=torch.float32))
    return SeqBatch.build(prompts, comps, pad_id=2), choices, slate_of


def layouts(sampled: SeqBatch, choices: SeqBatch, slate_of: list[int]) -> dict[str, SeqBatch]:
    """The update's rows two ways: ``before``, each slate's rows one micro-batch and each row's K candidate rows
    kept together in micro-batches of their own, every row packed by its prompt (how the update ran them before);
    ``clpo``, as the optimizer runs them: per slate, its candidate rows in the slate's micro-batch or apart
    (:func:`candidate_layout`)."""
    parents = [int(p) for p in choices.extras["parent"].tolist()]
    both = join(sampled, choices.without_extras("parent"))
    own, theirs, groups = candidate_layout(sampled, choices, slate_of, MICRO_BATCH)
    return {"before": both.with_groups(slate_of + apart_groups(parents)),
            "clpo": both.with_groups(slate_of + groups).with_extras(**{SHARED_PREFIX: torch.cat([own, theirs])})}


def counted_positions(store: PolicyStore, batch: SeqBatch) -> int:
    """The token positions (packed rows x padded width) the store's forwards would run over ``batch``, counted from
    its micro-batches and their packing without running the model."""
    total = 0
    for mb in store.micro_batches(batch):
        packed = store._packed(mb)
        total += (packed.input_ids if packed is not None else mb.input_ids).numel()
    return total


def update(store: PolicyStore, batch: SeqBatch) -> float:
    normaliser = count_tokens([batch.loss_mask])

    def loss_fn(logp, mb):
        return -token_mean(logp, mb.loss_mask, normaliser)

    start = time.perf_counter()
    store.update("agent", batch, loss_fn)
    return time.perf_counter() - start


def positions(store: PolicyStore) -> tuple[int, int]:
    """(token positions, packed rows) of the train passes counted so far."""
    train = store.shapes.counts["train"]
    return (sum(key[0] * total for key, (_, total) in train.items()),
            sum(key[0] * n for key, (n, _) in train.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slates", type=int, default=8)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=650)
    ap.add_argument("--rationale", type=int, default=42)
    ap.add_argument("--decision", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float32"))
    ap.add_argument("--count-only", action="store_true", help="count token positions only (no model, no timing)")
    args = ap.parse_args()
    sampled, choices, slate_of = slates_batch(args.slates, args.rows, args.prompt, args.rationale, args.decision,
                                              args.candidates)
    runs = layouts(sampled, choices, slate_of)
    shapes = {k: getattr(args, k) for k in ("slates", "rows", "prompt", "rationale", "decision", "candidates")}
    if args.count_only:
        store = PolicyStore(StoreSettings(micro_batch=MICRO_BATCH, shared_prompts=True))  # no model loaded
        unpacked = sum(mb.input_ids.numel() for mb in store.micro_batches(runs["before"]))
        counts = {name: counted_positions(store, batch) for name, batch in runs.items()}
        save("clpo_packing_positions", {**shapes, "rows_in_update": int(runs["clpo"].input_ids.shape[0]),
                                        "positions": {"unpacked": unpacked, **counts},
                                        "positions_ratio": round(counts["clpo"] / counts["before"], 3)})
        return
    store = PolicyStore(StoreSettings(dtype=args.dtype, micro_batch=MICRO_BATCH, shared_prompts=True))
    store.add_agent("agent", MODEL)
    times: dict[str, list[float]] = {k: [] for k in runs}
    counted: dict[str, tuple[int, int]] = {}
    for r in range(args.repeats + 1):  # the first pair warms up
        for name, batch in runs.items():
            store.shapes.counts.clear()
            seconds = update(store, batch)
            counted[name] = positions(store)
            if r:
                times[name].append(seconds)
    out = {name: {"median_s": round(statistics.median(t), 2), "all_s": [round(x, 2) for x in t],
                  "positions": counted[name][0], "packed_rows": counted[name][1]} for name, t in times.items()}
    ratio = statistics.median(b / a for a, b in zip(times["before"], times["clpo"]))
    save("clpo_packing", {"model": MODEL, "dtype": store.dtype, **shapes, "repeats": args.repeats,
        "rows_in_update": int(runs["clpo"].input_ids.shape[0]), "layouts": out, "time_ratio": round(ratio, 3),
        "positions_ratio": round(counted["clpo"][0] / counted["before"][0], 3),
        "bf16_native": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()), "machine": machine()})


if __name__ == "__main__":
    main()
