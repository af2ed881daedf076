"""What running CLPO's listwise candidate rows with their slate saves: one update of the embedded model on
MAESTRO-shaped slates, in three layouts of the same rows: ``before`` (a slate's rows one micro-batch sharing its
prompt, each row's K candidate rows in micro-batches of their own sharing that row's prompt and rationale),
``by_row_prompt`` (per slate, its candidate rows in the slate's micro-batch sharing each row's prompt, or apart,
whichever runs fewer token positions) and ``clpo`` (as ``optimizers/clpo.py`` runs them: also the slate's common
prefix, ``policy/packing.py::common_prefix``, shared by all its rows and candidate rows where that runs fewer).

    .venv/bin/python -m benchmarks.clpo_packing [--slates 8] [--rows 8] [--prompt 650] [--rationale 42]
                                                [--decision 2] [--candidates 2] [--chained] [--lead 6]
                                                [--repeats 3] [--dtype auto] [--count-only]

The defaults are the single-stage selection (rationale and decision one row; 8 samples of a slate, 2 candidates
each, ~650 prompt tokens). ``maestro_selectors.yaml`` and the maestro ``cpu`` preset chain the selection
(``protocol.central_chain``): each sample is a rationale row and a decision row whose prompt carries the rationale
and ``Chosen: Candidate`` (``--lead`` tokens), then the number; their shapes: ``--chained --rows 4 --prompt 617
--rationale 38 --decision 1 --candidates 4`` (means of a recorded step; its counts match the recorded step's
within 2%). Token ids are random: the cost is the shapes'. Every layout runs the same rows (``trainer.micro_batch=4``,
gradient checkpointing on) with a token-mean loss over every scored token; interleaved (before, by_row_prompt,
clpo, ...) after one warm-up round. Keys per layout: ``median_s``, ``all_s``, ``positions`` (token positions the
forwards run: packed rows × padded width, summed over micro-batches; exact), ``packed_rows``; ``time_ratio`` (clpo
/ before, the median of the rounds' ratios), ``slate_prefix_time_ratio`` (clpo / by_row_prompt) and
``positions_ratio``. Writes results/clpo_packing[_chained].json. Time it on a quiet machine only.
``--count-only`` loads no model and times nothing: the token positions of ``unpacked`` and each layout, and of the
reference's scoring pass over the sampled rows (``reference_positions``; the KL's, ``optimizers.base.score``),
and of one pass over the sampled rows alone as the other selectors' optimizers (GRPO, SFT) run them, a slate kept
in one micro-batch (``selector_positions``: ``by_row_prompt``, or ``by_slate_prefix`` as ``Samples.from_turns``
packs them, ``policy/packing.py::group_prefixes``) (exact, any machine), in
results/clpo_packing_positions[_chained].json.
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
from selfevo.policy.packing import SHARED_PREFIX, group_prefixes

MODEL = "smollm2-135m-instruct"
MICRO_BATCH = 4  # trainer.micro_batch of the maestro recipe


def slates_batch(slates: int, rows: int, prompt: int, rationale: int, decision: int, candidates: int,
                 chained: bool = False, lead: int = 6, seed: int = 0) -> tuple[SeqBatch, SeqBatch, list[int]]:
    """The sampled rows (each slate's prompt, a rationale and a decision), their candidate rows (the slate's prompt
    and the row's rationale, then one candidate's decision; extra ``parent``) and each sampled row's slate.
    ``chained`` (``protocol.central_chain``): each sample is two rows, its rationale (the slate's prompt, then the
    rationale) and its decision (the prompt, the rationale and ``lead`` tokens of ``Chosen: Candidate`` given, then
    the decision); the candidate rows follow the decision row's given part."""
    gen = torch.Generator().manual_seed(seed)

    def draw(n: int) -> list[int]:
        return torch.randint(100, 40000, (n,), generator=gen).tolist()

    given = draw(lead) if chained else []
    prompts, comps, slate_of, c_prompts, c_comps, parent = [], [], [], [], [], []
    for s in range(slates):
        p = draw(prompt)
        reasons = [draw(rationale) for _ in range(rows)] if chained else []
        for r in reasons:  # a chained slate: its rationale rows, then its decision rows (the recipe's turn order)
            prompts.append(p)
            comps.append(r)
            slate_of.append(s)
        for j in range(rows):
            r = reasons[j] if chained else draw(rationale)
            before = p + r + given
            for _ in range(candidates):
                c_prompts.append(before)
                c_comps.append(draw(decision))
                parent.append(len(prompts))
            prompts.append(before if chained else p)
            comps.append(draw(decision) if chained else r + draw(decision))
            slate_of.append(s)
    choices = SeqBatch.build(c_prompts, c_comps, pad_id=2).with_extras(parent=torch.tensor(parent, dtype=torch.float32))
    return SeqBatch.build(prompts, comps, pad_id=2), choices, slate_of


def layouts(sampled: SeqBatch, choices: SeqBatch, slate_of: list[int]) -> dict[str, SeqBatch]:
    """The update's rows three ways: ``before``, each slate's rows one micro-batch and each row's K candidate rows
    kept together in micro-batches of their own, every row packed by its prompt (how the update first ran them);
    ``by_row_prompt``, per slate its candidate rows in the slate's micro-batch sharing each row's prompt, or apart
    (:func:`candidate_layout` without the slate's prefix); ``clpo``, as the optimizer runs them
    (:func:`candidate_layout`). Each batch's sampled rows come first; ``sampled`` [extra]: 1 on them."""
    parents = [int(p) for p in choices.extras["parent"].tolist()]
    both = join(sampled, choices.without_extras("parent"))
    flag = torch.cat([torch.ones(sampled.input_ids.shape[0]), torch.zeros(choices.input_ids.shape[0])])
    out = {"before": both.with_groups(slate_of + apart_groups(parents)).with_extras(sampled=flag)}
    for name, slate_wide in (("by_row_prompt", False), ("clpo", True)):
        own, theirs, groups = candidate_layout(sampled, choices, slate_of, MICRO_BATCH, share_slate_prefix=slate_wide)
        out[name] = both.with_groups(slate_of + groups).with_extras(**{SHARED_PREFIX: torch.cat([own, theirs])},
                                                                      sampled=flag)
    return out


def score_positions(store: PolicyStore, batch: SeqBatch) -> int:
    """The token positions of the reference's scoring pass over the sampled rows (``optimizers.base.score``:
    consecutive runs of ``MICRO_BATCH`` rows, each packed by the rows' shared prefix)."""
    sampled = batch.rows([i for i, f in enumerate(batch.extras["sampled"].tolist()) if f])
    n = sampled.input_ids.shape[0]
    return sum(run_positions(store, sampled.rows(list(range(s, min(s + MICRO_BATCH, n)))))
               for s in range(0, n, MICRO_BATCH))


def counted_positions(store: PolicyStore, batch: SeqBatch) -> int:
    """The token positions (packed rows x padded width) the store's forwards would run over ``batch``, counted from
    its micro-batches and their packing without running the model."""
    return sum(run_positions(store, mb) for mb in store.micro_batches(batch))


def run_positions(store: PolicyStore, mb: SeqBatch) -> int:
    """The token positions one forward of ``mb`` runs: packed rows x width where the store packs it."""
    packed = store._packed(mb)
    return (packed.input_ids if packed is not None else mb.input_ids).numel()


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
    ap.add_argument("--chained", action="store_true", help="the chained selection's rows (protocol.central_chain)")
    ap.add_argument("--lead", type=int, default=6, help="--chained: tokens given before the decision")
    ap.add_argument("--count-only", action="store_true", help="count token positions only (no model, no timing)")
    args = ap.parse_args()
    sampled, choices, slate_of = slates_batch(args.slates, args.rows, args.prompt, args.rationale, args.decision,
                                              args.candidates, chained=args.chained, lead=args.lead)
    runs = layouts(sampled, choices, slate_of)
    shapes = {k: getattr(args, k) for k in ("slates", "rows", "prompt", "rationale", "decision", "candidates",
                                            "chained", "lead")}
    suffix = "_chained" if args.chained else ""
    if args.count_only:
        store = PolicyStore(StoreSettings(micro_batch=MICRO_BATCH, shared_prompts=True))  # no model loaded
        unpacked = sum(mb.input_ids.numel() for mb in store.micro_batches(runs["before"]))
        counts = {name: counted_positions(store, batch) for name, batch in runs.items()}
        scored = {name: score_positions(store, batch) for name, batch in runs.items()}
        slates = sampled.with_groups(slate_of)
        shared = group_prefixes(slates.input_ids, slates.attention_mask, slates.loss_mask, slate_of)
        selector = {"by_row_prompt": counted_positions(store, slates), "by_slate_prefix": counted_positions(
            store, slates if shared is None else slates.with_extras(**{SHARED_PREFIX: shared}))}
        save("clpo_packing_positions" + suffix, {**shapes, "rows_in_update": int(runs["clpo"].input_ids.shape[0]),
                                        "positions": {"unpacked": unpacked, **counts},
                                        "positions_ratio": round(counts["clpo"] / counts["before"], 3),
                                        "slate_prefix_ratio": round(counts["clpo"] / counts["by_row_prompt"], 3),
                                        "reference_positions": scored, "selector_positions": selector})
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
    by_row = statistics.median(b / a for a, b in zip(times["by_row_prompt"], times["clpo"]))
    save("clpo_packing" + suffix, {"model": MODEL, "dtype": store.dtype, **shapes, "repeats": args.repeats,
        "rows_in_update": int(runs["clpo"].input_ids.shape[0]), "layouts": out, "time_ratio": round(ratio, 3),
        "slate_prefix_time_ratio": round(by_row, 3),
        "positions_ratio": round(counted["clpo"][0] / counted["before"][0], 3),
        "bf16_native": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()), "machine": machine()})


if __name__ == "__main__":
    main()
