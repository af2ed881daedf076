"""The scripted engine of the MAESTRO tests: answers keyed by the request seed (never by batch position), real token
ids of the backbone's tokenizer. Importing registers it as engine "maestro_script"."""
import re

from helpers.scripted import ScriptedEngine
from selfevo.engines import ENGINES
from selfevo.engines.base import truncate_at_stop
from selfevo.types import Request


def script(r: Request) -> str:
    """Execution agents: the right sum for seeds ≡ 0 (mod 3), else one more. Central: by seed mod 5, no choice,
    an out-of-range choice, or a valid pick of the displayed candidate ``seed % n + 1`` (its boxed answer); the
    number stage of a chained selection (prefix ending ``Candidate ``) likewise: no number, ``n + 7`` or the pick."""
    content, s = r.messages[-1]["content"], r.seed
    if content.startswith("You are the Center Arbiter"):
        n = content.count("\n- Candidate ")
        if r.prefix.endswith("Chosen: Candidate "):
            return "none" if s % 5 == 0 else f"{n + 7}\n" if s % 5 == 1 else f"{s % n + 1}\nFinal"
        if "write your own complete solution" in content:
            return f"My own work. \\boxed{{{s % 4}}}"
        if s % 5 == 0:
            text = "Reason: I cannot decide."
        elif s % 5 == 1:
            text = f"Reason: too many.\nChosen: {n + 7}\nFinal: \\boxed{{1}}"
        else:
            k = s % n + 1
            ans = re.findall(rf"- Candidate {k}: .*?\\boxed\{{(\d+)\}}", content)
            text = f"Reason: candidate {k} adds the numbers.\nChosen: {k}\nFinal: \\boxed{{{ans[0] if ans else 0}}}"
        return text[len(r.prefix):] if text.startswith(r.prefix) else text
    found = re.findall(r"What is (\d+) \+ (\d+)", content)
    if not found:  # a benchmark question
        return f"The answer is \\boxed{{{s % 10}}}"
    a, b = map(int, found[-1])
    return f"Add {a} and {b}. The answer is \\boxed{{{a + b if s % 3 == 0 else a + b + 1}}}"


class ScriptEngine(ScriptedEngine):
    """``answer`` (default ``script``) cut before the first stop string as a real engine does; records every
    call."""

    calls: list = []

    def __init__(self, store=None, answer=None, **_):
        super().__init__(store)
        self.script = answer or script
        ScriptEngine.calls = self.calls = []

    def generate(self, requests):
        self.calls.append(list(requests))
        return super().generate(requests)

    def answer(self, r) -> str:
        return truncate_at_stop(self.script(r), r.sampling.stop)[0]


if "maestro_script" not in ENGINES:
    ENGINES.register("maestro_script")(ScriptEngine)
