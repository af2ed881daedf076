"""The scripted engine of the CoMAS golden test, importable by subprocesses (data-parallel tests run it under
torchrun): completions keyed by the request seed (never by batch position), with real token ids of the backbone's
tokenizer, so updates train on real batches. Scores are 1, 2, 3 or unparsable by ``seed % 4``. Importing registers
it as engine "golden".

Run as a script it is ``selfevo`` with the engine registered::

    torchrun --nproc_per_node 2 tests/helpers/golden_engine.py run comas engine.name=golden ...
"""
import sys
from pathlib import Path

if __name__ == "__main__":  # a script: the repository (for `selfevo`) and tests/ (for `helpers`) on the path
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from helpers.scripted import ScriptedEngine  # noqa: E402
from selfevo.engines import ENGINES  # noqa: E402

SCORES = ("<score>1</score>", "<score>2</score>", "<score>3</score>", "I cannot decide.")


class GoldenEngine(ScriptedEngine):
    """Deterministic completions keyed by the request seed; prompt ids from the real chat template."""

    def answer(self, r) -> str:
        if r.prefix == "<score>":
            return SCORES[r.seed % 4][len("<score>"):] if r.seed % 4 < 3 else SCORES[3]
        return f"Answer {r.seed % 97}: the value is \\boxed{{{r.seed % 7}}}."


if "golden" not in ENGINES:
    ENGINES.register("golden")(GoldenEngine)


if __name__ == "__main__":
    from selfevo.cli import main

    sys.exit(main())
