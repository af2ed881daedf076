"""A scripted engine for SAGE runs on tiny models: answers by the role's prefix, keyed by the request seed.

Challenger ("<question>"): a new addition question with its answer (a code reference: a new function ``f<n>`` with
its tests and reference solution); Critic ("<score>"): 8 or 3; Planner ("<plan>"):
a plan; Solver ("<answer>"): the right sum for even seeds, a wrong one for odd seeds. Importing registers it as
engine "sage_script"; ``SAGE_SCRIPT_DELAY`` (seconds per call) slows it down for kill tests.

Run as a script it is ``selfevo`` with the engine registered (``python tests/helpers/sage_engine.py run sage ...``).
"""
import os
import re
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # a script: the repository (for `selfevo`) and tests/ (for `helpers`) on the path
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from helpers.scripted import ScriptedEngine  # noqa: E402
from selfevo.engines import ENGINES  # noqa: E402
from selfevo.engines.base import truncate_at_stop  # noqa: E402


CODE_ITEM = """Write a function f{n} that returns x + {n}.</question>
<tests>
```python
assert f{n}(1) == {n1}
assert f{n}(-{n}) == 0
```
</tests>
<solution>
```python
def f{n}(x):
    return x + {n}
```
</solution>"""


def script(prefix: str, seed: int, prompt: str) -> str:
    if prefix == "<question>" and "<tests>" in prompt:  # a code challenge: a new function with tests and solution
        n = seed % 997
        return CODE_ITEM.format(n=n, n1=n + 1)
    if prefix.startswith("<question>") and prefix.endswith("<answer>"):  # second stage of a tag chain
        a, b = (int(x) for x in re.findall(r"What is (\d+) \+ (\d+)", prefix)[-1])
        return f"{a + b}</answer>"
    if prefix == "<question>":
        a, b = seed % 1000, (seed // 1000) % 1000
        return f"What is {a} + {b}?</question>\n<answer>{a + b}</answer>"
    if prefix == "<score>":
        return "8</score>" if seed % 3 else "3</score>"
    if prefix == "<plan>":
        return "Add the two numbers.</plan>"
    if prefix == "<answer>":
        nums = [int(x) for x in re.findall(r"What is (\d+) \+ (\d+)", prompt)[-1]] if "What is" in prompt else [0, 0]
        total = sum(nums) + (seed % 2)
        return f"\\boxed{{{total}}}</answer>"
    return f"Answer: \\boxed{{{seed % 10}}}"


class SageScriptEngine(ScriptedEngine):
    def generate(self, requests):
        time.sleep(float(os.environ.get("SAGE_SCRIPT_DELAY", "0")))
        return super().generate(requests)

    def answer(self, r) -> str:
        return truncate_at_stop(script(r.prefix, r.seed, "\n".join(m["content"] for m in r.messages)),
                                r.sampling.stop)[0]


if "sage_script" not in ENGINES:
    ENGINES.register("sage_script")(SageScriptEngine)


if __name__ == "__main__":
    from selfevo.cli import main

    sys.exit(main())
