"""A scripted engine for MAE runs on tiny models: answers by the role's prefix and the request seed, so every role's
output parses in some requests and fails in others. Importing registers it as engine "mae_script".

Proposer ("<question>"): a new addition question, or (seed % 3 == 0) text without its closing tag; Judge
("<score>"): 8, 3, or (seed % 3 == 0) "great" (no score); Solver (no prefix): the right sum in <answer> for even
seeds, a wrong one for seeds ≡ 1 (mod 4), no <answer> tag for seeds ≡ 3 (mod 4).
"""
import re

from helpers.scripted import ScriptedEngine
from selfevo.engines import ENGINES
from selfevo.engines.base import truncate_at_stop


def script(prefix: str, seed: int, prompt: str) -> str:
    if prefix == "<question>":
        a, b = seed % 100, (seed // 100) % 100
        return "I cannot think of one." if seed % 3 == 0 else f"What is {a} + {b}?</question>"
    if prefix == "<score>":
        return ("great", "8</score>", "3</score>")[seed % 3]
    found = re.findall(r"What is (\d+) \+ (\d+)", prompt)
    total = sum(int(x) for x in found[-1]) if found else 0
    if seed % 2 == 0:
        return f"Adding the numbers gives {total}.\n<answer>{total}</answer>"
    return f"<answer>{total + 1}</answer>" if seed % 4 == 1 else f"It is {total}, I think."


class MaeScriptEngine(ScriptedEngine):
    def answer(self, r) -> str:
        return truncate_at_stop(script(r.prefix, r.seed, "\n".join(m["content"] for m in r.messages)),
                                r.sampling.stop)[0]


if "mae_script" not in ENGINES:
    ENGINES.register("mae_script")(MaeScriptEngine)
