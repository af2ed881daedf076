"""The CoMAS training mixture: MATH (levels 4-5) + KodCode (medium/hard) + science, shuffled with a seed."""
from __future__ import annotations

import logging
import random
from collections import Counter

from selfevo.tasks.base import load_tasks
from selfevo.types import Task

log = logging.getLogger(__name__)

# (part, benchmark, options) per source; science is WebInstruct-verified on the hub, SciBench worked solutions here.
COMAS_PARTS = {
    "hub": (("math", "math", {"levels": [4, 5]}), ("code", "kodcode", {"difficulties": ("medium", "hard")}),
            ("science", "webinstruct", {})),
    "local": (("math", "math", {"levels": [4, 5]}), ("code", "kodcode", {"difficulties": ("medium", "hard")}),
              ("science", "scibench_sol", {})),
}


def comas_training_mix(n_math: int = 600, n_code: int = 600, n_science: int = 800, seed: int = 0,
                       data_root: str | None = None, source: str = "local") -> list[Task]:
    """``n_math`` MATH train level-4/5 problems, ``n_code`` KodCode problems (medium/hard where ``gpt_difficulty``
    exists: the hub's KodCode-V1, not the local demo files) and ``n_science`` science problems (hub:
    TIGER-Lab/WebInstruct-verified; local: scibench_sol), each drawn without replacement with a seed derived from
    ``seed``, then shuffled together. A part with fewer items than asked gives all it has (logged); count what you
    got with :func:`mix_counts`. Each task's ``meta["mix_part"]`` is "math", "code" or "science".
    """
    if source not in COMAS_PARTS:
        raise ValueError(f"unknown source {source!r}; known: {', '.join(COMAS_PARTS)}")
    wanted = {"math": n_math, "code": n_code, "science": n_science}
    mixture: list[Task] = []
    for part, benchmark, options in COMAS_PARTS[source]:
        n = wanted[part]
        if n <= 0:
            continue
        pool = load_tasks(benchmark, "train", data_root=data_root, source=source, **options)
        if len(pool) < n:
            log.warning("comas_training_mix: %s part wants %d items but %s (%s) has %d; using all of them",
                        part, n, benchmark, source, len(pool))
        for task in random.Random(f"comas:{seed}:{part}").sample(pool, min(n, len(pool))):
            task.meta["mix_part"] = part
            mixture.append(task)
    random.Random(f"comas:{seed}:shuffle").shuffle(mixture)
    return mixture


def mix_counts(tasks: list[Task]) -> dict[str, int]:
    """How many tasks of each ``meta["mix_part"]`` (else benchmark) a list holds."""
    return dict(Counter(str(t.meta.get("mix_part") or t.meta.get("benchmark")) for t in tasks))
