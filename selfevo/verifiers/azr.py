"""AZR's code executor as a task validator and a verifier (Absolute Zero, arXiv 2505.03335, Sec. 3.2-3.3).

* :func:`validate_proposal` — a proposed task becomes a triplet iff its program runs on its input(s) in the sandbox,
  returns the same value twice in a row in each of ``runs`` separate processes (the paper runs it twice and compares),
  uses no banned word (AZR's list: :data:`BANNED`) and its inputs are Python literals. Deduction / abduction: the
  proposed program and input give the output; induction: the reference program on the proposed inputs gives the
  outputs, the first half are shown to the solver and the rest are its hidden tests.
* verifier ``azr`` — a solve task (``task.meta["azr"] = {"kind", "triplet"}``, :func:`solve_task`) and the solver's
  answer (its last answer block, :data:`ANSWER_BLOCK`): deduction — the answer equals the output
  as a Python value (no code runs); abduction — ``f(answer)`` returns the output (the answer must be literals);
  induction — the answer program returns every hidden output for its hidden input (binary, as the released code's
  ``code_f_reward_type=binary``).
"""
from __future__ import annotations

import hashlib

from selfevo.types import Task
from selfevo.verifiers.base import Verdict, fail, fenced_blocks, register_verifier
from selfevo.verifiers.execute import banned_words_used, call_values, deterministic_values, literal_args, same_value

ANSWER_BLOCK = {"deduction": "output", "abduction": "input", "induction": "python"}  # the solver's block per kind
# the released code's azr.data_selection_strategy.banned_words (configs/azr_ppo_trainer.yaml), duplicates dropped
BANNED = ("logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time", "hashlib",
          "hmac", "bcrypt", "os.sys", "os.path", "sys.exit", "os.environ", "calendar")
IDENTITY = {"id": "seed-identity", "program": "def f(x):\n    return x", "input": "'Hello World'",
            "output": "'Hello World'"}  # the paper's zero triplet (Sec. 3.3.1)
IDENTITY_INDUCTION = {"id": "seed-identity-induction", "program": IDENTITY["program"], "inputs": ["'Hello World'", "42"],
                      "outputs": ["'Hello World'", "42"], "message": "Return the argument unchanged.", "shown": 1}


def _triplet_id(*parts: object) -> str:
    return "azr-" + hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=6).hexdigest()


def validate_proposal(kind: str, proposal: dict, reference: dict | None = None, banned=BANNED, runs: int = 2,
                      shown: float = 0.5) -> tuple[dict | None, str]:
    """``(triplet, "")`` for a valid proposal (the parsed proposer value), else ``(None, reason)``; ``reference``: the
    program an induction proposal's inputs are for; ``shown``: the share of its pairs shown to the solver."""
    if kind == "induction":
        program, calls = reference["program"], list(proposal["inputs"])
    else:
        program, calls = proposal["program"], [proposal["input"]]
        if used := banned_words_used(program, banned):
            return None, f"banned: {', '.join(used)}"
    if any(literal_args(c) is None for c in calls):
        return None, "input not literal"
    values, reason = deterministic_values(program, calls, runs)
    if values is None:
        return None, reason
    if kind == "induction":
        return {"id": _triplet_id(program, calls), "program": program, "inputs": calls, "outputs": values,
                "message": proposal["message"], "shown": max(1, int(len(calls) * shown))}, ""
    return {"id": _triplet_id(program, calls[0]), "program": program, "input": calls[0], "output": values[0]}, ""


def solve_task(kind: str, triplet: dict) -> Task:
    """The solve task of a triplet (verified by ``azr``)."""
    return Task(f"{kind}:{triplet['id']}", "code", "", meta={"verifier": "azr", "azr": {"kind": kind,
                                                                                        "triplet": triplet}})


@register_verifier("azr")
def verify_azr(task: Task, response: str) -> Verdict:
    kind, t = task.meta["azr"]["kind"], task.meta["azr"]["triplet"]
    blocks = fenced_blocks(response, ANSWER_BLOCK[kind])
    if not blocks or not blocks[-1].strip():
        return fail(f"no ```{ANSWER_BLOCK[kind]} block")
    answer = blocks[-1].strip()
    if kind == "deduction":
        ok = same_value(answer, t["output"])
    elif kind == "abduction":
        if literal_args(answer) is None:
            return fail("the input is not Python literals", answer)
        got = call_values(t["program"], [answer])[0][0]
        ok = got.value is not None and same_value(got.value, t["output"])
    else:
        hidden = list(zip(t["inputs"][t["shown"]:], t["outputs"][t["shown"]:])) or list(zip(t["inputs"], t["outputs"]))
        got = call_values(answer, [a for a, _ in hidden])
        ok = all(r[0].value is not None and same_value(r[0].value, o) for r, (_, o) in zip(got, hidden))
    return Verdict(1.0 if ok else 0.0, "correct" if ok else "wrong", answer)
