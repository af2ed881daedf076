"""Generated task sets: seeded arithmetic the embedded 135M model can partly solve (a learnable curriculum).

``arith1`` … ``arith5`` (one level each) and ``arith`` (levels 1-3 mixed) are registered benchmarks with no files:
``load_tasks("arith2", "train")``; option ``count`` (default: 4000 train, 500 test items). Each item
is drawn from ``random.Random(f"arith|{level}|{i}")`` (the same items on every machine, whatever the count), and
its exact integer answer is the reference (the ``math`` verifier checks it). Splits are disjoint by construction:
an item belongs to ``test`` iff a stable hash of its question is 0 mod 8, else to ``train`` — so no held-out
question is ever a training question, for any count or level mix.

Levels (the untrained embedded model's greedy accuracy is measured in ``docs/results.md``):

1. ``a + b``, one-digit operands (81 items: too few for a 500-item held-out set);
2. a two-digit number plus or minus a one-digit one;
3. a one-step word problem with small numbers (buys more / gives away);
4. a two-digit number plus or minus a two-digit one;
5. a two-step word problem.

``arith`` mixes levels 1-3 in equal parts (item i has level 1 + i mod 3).
"""
from __future__ import annotations

import hashlib
import random
from typing import Iterator

from selfevo.tasks.base import LoadContext, TaskDataError, TaskSpec, register_task
from selfevo.types import Task

NAMES = ("Ana", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena")
THINGS = ("apples", "marbles", "stickers", "books", "coins", "pencils", "cards", "shells")
LEVELS = (0, 1, 2, 3, 4, 5)
TEST_SHARE = 8  # one item in TEST_SHARE (by question hash) is held out


PHRASES = ("What is {a} + {b}?", "Compute {a} + {b}.", "What is the sum of {a} and {b}?", "Add {a} and {b}.",
           "What is {a} plus {b}?", "Calculate {a} + {b}.")


def level1(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return rng.choice(PHRASES).format(a=a, b=b), a + b


def level2(rng: random.Random) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"{name} has {a} {thing} and buys {b} more. How many {thing} does {name} have now?", a + b


def level3(rng: random.Random) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 20), rng.randint(1, 9)
    if rng.random() < 0.5:
        return f"{name} has {a} {thing}. {name} buys {b} more. How many {thing} does {name} have now?", a + b
    a += b
    return f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?", a - b


def level4(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", a + b
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def level5(rng: random.Random) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(5, 30), rng.randint(2, 20)
    c = rng.randint(1, a + b - 1)
    return (f"{name} has {a} {thing}, buys {b} more, then gives {c} to a friend. How many {thing} does {name} have "
            f"now?", a + b - c)


GENERATORS = {1: level1, 2: level2, 3: level3, 4: level4, 5: level5}


def is_test(question: str) -> bool:
    """The split of a question: held out iff its stable hash is 0 mod ``TEST_SHARE``."""
    return int(hashlib.sha256(question.encode()).hexdigest(), 16) % TEST_SHARE == 0


def arith_items(split: str, level: int, count: int) -> Iterator[dict]:
    """The first ``count`` distinct items of ``split`` at ``level`` (0: levels 1-3 alternating)."""
    if level not in LEVELS:
        raise TaskDataError(f"arith: level must be one of {LEVELS}, got {level!r}")
    if not isinstance(count, int) or count < 1:
        raise TaskDataError(f"arith: count must be a positive integer, got {count!r}")
    seen: set[str] = set()
    for i in range(count * TEST_SHARE * 4):  # far more draws than needed: the splits are 1/8 and 7/8 of them
        lv = level or 1 + i % 3
        question, answer = GENERATORS[lv](random.Random(f"arith|{lv}|{i}"))
        if question in seen or is_test(question) != (split == "test"):
            continue
        seen.add(question)
        yield {"question": question, "answer": answer, "level": lv}
        if len(seen) == count:
            return
    raise TaskDataError(f"arith: level {level} has fewer than {count} distinct {split} items")


DEFAULT_COUNT = {"train": 4000, "test": 500}
DESCRIPTION = {0: "levels 1-3 mixed", 1: "one-digit a + b", 2: "two-digit ± one-digit",
               3: "one-step word problems, small numbers", 4: "two-digit ± two-digit", 5: "two-step word problems"}


def register_arith(level: int) -> None:
    name = f"arith{level or ''}"

    def read(ctx: LoadContext) -> Iterator[dict]:
        count = ctx.options["count"]
        return arith_items(ctx.split, level, DEFAULT_COUNT[ctx.split] if count is None else count)

    def to_task(row: dict, index: int, ctx: LoadContext) -> Task:
        return Task(id=f"{name}/{ctx.split}/{index}", domain="math", question=row["question"],
                    reference=str(row["answer"]), meta={"level": row["level"]})

    register_task(TaskSpec(
        name=name, description=f"generated arithmetic ({DESCRIPTION[level]}; seeded, no files): a curriculum the "
                               f"embedded model can partly solve",
        domain="math", verifier="math", prompt_format="math", splits=("train", "test"), default_split="test",
        to_task=to_task, read_local=read, read_hub=read, options={"count": None}, counts=DEFAULT_COUNT,
        local_note="generated"))


for _level in LEVELS:
    register_arith(_level)
