"""SAGE's seed set D_0 (paper 003, Sec. 4.2 and App. B, Table 5): about 500 items drawn from training splits.

Table 5: MATH 156, GSM8K 148, HumanEval 87, MBPP 109 (500). The paper says the samples come "from the official
training splits", but HumanEval has no training split (it is the 164-problem evaluation set, and HumanEval+ is one
of the paper's own evaluation benchmarks), so here the 87 HumanEval items are replaced by 87 items of MBPP's
``validation`` split (task ids 511-600, 90 items, from the original 974-problem MBPP, ``mbpp_full``: the sanitized
set has only 43 there). The 109 MBPP items come from the sanitized MBPP ``train`` split (ids 601-974, 120 items).
Neither overlaps MBPP's test ids (11-510), from which MBPP+ is drawn.

Parts (``meta["sage_part"]``) and sources:

* ``math``: MATH ``train`` (7,498 items), 156 drawn.
* ``gsm8k``: GSM8K ``train`` (7,473), 148 drawn.
* ``humaneval_substitute``: ``mbpp_full`` ``validation`` (90), 87 drawn.
* ``mbpp``: ``mbpp`` (sanitized) ``train`` (120), 109 drawn.

Each part is drawn without replacement with a seed derived from ``seed`` and the part; the parts are then
shuffled together. Math items whose reference math-verify cannot parse (6 of MATH train, e.g. ``a + b + c``) are
skipped in the draw (the next item of the seeded order is taken instead), so every math seed's verifier is valid.
Code items carry ``tests``, ``entry_point`` and ``meta["reference_solution"]`` (MBPP's ``meta["solution"]``); every
one of the 210 candidate code items' reference passes its tests in the sandbox (checked once with
:func:`selfevo.verifiers.validate.validate_item`; not re-run here, as it costs two sandbox runs per item).
"""
from __future__ import annotations

import logging
import random
from collections import Counter

from selfevo.tasks.base import load_tasks
from selfevo.types import Task
from selfevo.verifiers.validate import validate_item

log = logging.getLogger(__name__)

# part -> (benchmark, split, Table 5 count)
SAGE_PARTS: dict[str, tuple[str, str, int]] = {
    "math": ("math", "train", 156),
    "gsm8k": ("gsm8k", "train", 148),
    "humaneval_substitute": ("mbpp_full", "validation", 87),
    "mbpp": ("mbpp", "train", 109),
}
SAGE_COUNTS: dict[str, int] = {part: n for part, (_, _, n) in SAGE_PARTS.items()}


def sage_seed_set(seed: int = 0, data_root: str | None = None, source: str = "local",
                  counts: dict[str, int] | None = None) -> list[Task]:
    """The SAGE seed set: :data:`SAGE_COUNTS` items per part (``counts`` overrides some or all parts; 0 drops a
    part), drawn from training splits as the module docstring says, shuffled together; deterministic for a
    ``seed``. A part with fewer usable items than asked gives all it has (logged). Each task's ``meta`` gets
    ``sage_part``; code tasks also ``reference_solution``."""
    wanted = dict(SAGE_COUNTS)
    if counts:
        unknown = sorted(set(counts) - set(SAGE_PARTS))
        if unknown:
            raise ValueError(f"sage_seed_set: unknown part(s) {unknown}; parts: {', '.join(SAGE_PARTS)}")
        bad = {k: v for k, v in counts.items() if not isinstance(v, int) or v < 0}
        if bad:
            raise ValueError(f"sage_seed_set: counts must be integers >= 0, got {bad}")
        wanted.update(counts)
    seeds: list[Task] = []
    for part, (benchmark, split, _) in SAGE_PARTS.items():
        n = wanted[part]
        if n <= 0:
            continue
        pool = load_tasks(benchmark, split, data_root=data_root, source=source)
        drawn = _draw(pool, n, random.Random(f"sage:{seed}:{part}"))
        if len(drawn) < n:
            log.warning("sage_seed_set: %s part wants %d items but %s %s (%s) has %d usable; using all of them",
                        part, n, benchmark, split, source, len(drawn))
        for task in drawn:
            task.meta["sage_part"] = part
            if task.domain == "code":
                task.meta["reference_solution"] = str(task.meta.get("solution") or "")
            seeds.append(task)
    random.Random(f"sage:{seed}:shuffle").shuffle(seeds)
    return seeds


def _draw(pool: list[Task], n: int, rng: random.Random) -> list[Task]:
    """``n`` items of ``pool`` in a seeded order without replacement, skipping math items with unparsable
    references (checked only for the items reached)."""
    order = rng.sample(pool, len(pool))
    drawn: list[Task] = []
    for task in order:
        if len(drawn) >= n:
            break
        if task.domain == "math" and validate_item(task) is not None:
            log.info("sage_seed_set: skipping %s (reference %r does not parse as math)", task.id, task.reference)
            continue
        drawn.append(task)
    return drawn


def sage_part_counts(tasks: list[Task]) -> dict[str, int]:
    """How many tasks of each ``meta["sage_part"]`` a list holds."""
    return dict(Counter(str(t.meta.get("sage_part")) for t in tasks))
