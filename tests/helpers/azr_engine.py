"""A scripted engine for AZR runs on tiny models: answers by the prompt's task, keyed by the request seed.

Proposer (deduction, abduction): by ``seed % 5`` a valid program ``f(x) = x * m`` with an input (0-2), a program that
crashes (3), a program that imports a banned module (4). Induction proposer: the number of inputs the prompt asks
for, then a message (an input that is not a literal for ``seed % 4 == 3``). Solver: the right answer for even seeds
(computed from the shown program or pairs: the scripted programs and the identity are ``x * m``), a wrong one for
odd seeds. With a prefix (``protocol.open_blocks``) the answer goes on after it. Importing registers it as engine "azr_script".
"""
import re

from helpers.scripted import ScriptedEngine
from selfevo.engines import ENGINES


def _block(text: str, name: str) -> str:
    return re.findall(rf"```{name}\n(.*?)\n```", text, re.DOTALL)[-1]


def _factor(program: str) -> int:
    found = re.search(r"return x \* (\d+)", program)
    return int(found.group(1)) if found else 1


def script(seed: int, prompt: str) -> str:
    if "write a new Python program" in prompt:
        m, case = 2 + seed % 7, seed % 5
        body = {3: "return x[10]", 4: "import random\n    return random.random()"}.get(case, f"return x * {m}")
        return f"Plan: keep it short.\n```python\ndef f(x):\n    {body}\n```\n```input\n{seed % 50}\n```"
    if "inputs for a Python program" in prompt:
        n = int(re.search(r"write (\d+) inputs", prompt).group(1))
        inputs = [str(seed % 9 + i) for i in range(n)]
        if seed % 4 == 3:
            inputs[0] = "f(1)"
        return "".join(f"```input\n{a}\n```\n" for a in inputs) + "```message\nMultiply the number.\n```"
    wrong = seed % 2 == 1
    if "deduce the output" in prompt:
        value = eval(_block(prompt, "input"))  # the scripted programs' inputs: a plain literal
        out = value * _factor(_block(prompt, "python")) if isinstance(value, int) else value
        return f"```output\n{out + 1 if wrong and isinstance(out, int) else ('nope' if wrong else repr(out))}\n```"
    if "find an input" in prompt:
        out = eval(_block(prompt, "output"))
        given = out // _factor(_block(prompt, "python")) if isinstance(out, int) else out
        return f"```input\n{'None' if wrong else repr(given)}\n```"
    if "program behind" in prompt:
        pairs = [(eval(a), eval(o)) for a, o in re.findall(r"```input_\d+\n(.*?)\n```\n```output_\d+\n(.*?)\n```",
                                                             prompt, re.DOTALL)]
        a, o = pairs[0]
        m = o // a if isinstance(a, int) and a else 1
        return f"```python\ndef f(x):\n    return {'None' if wrong else f'x * {m}' if m != 1 else 'x'}\n```"
    return "I do not know."


class AzrScriptEngine(ScriptedEngine):
    def answer(self, r) -> str:
        text = script(r.seed, "\n".join(m["content"] for m in r.messages))
        start = text.find(r.prefix) if r.prefix else -1
        return text[start + len(r.prefix):] if start >= 0 else text  # a given fence: the answer goes on after it


if "azr_script" not in ENGINES:
    ENGINES.register("azr_script")(AzrScriptEngine)
