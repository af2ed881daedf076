"""PHP (selfevo.setups.php) on a scripted engine: the hint lists the earlier answers, the agent is asked again until
two consecutive answers agree, unparsed answers neither hint nor agree, and max_rounds ends the rest."""
import pytest

from helpers.scripted import ReplyEngine
from selfevo.setups import SETUPS, run_setup
from selfevo.types import SamplingParams, Task

SAMPLING = SamplingParams(max_new_tokens=8, temperature=0.0)
INSTRUCTION = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."


def task(tid: str, question: str) -> Task:
    return Task(tid, "math", question, "5", meta={"verifier": "math", "prompt_format": "math"})


def scripted(answers: dict[str, list[str]]) -> ReplyEngine:
    """Each task's question (the prompt's first word) gets its answers in order, one per call."""
    seen: dict[str, int] = {}

    def reply(request):
        q = request.messages[0]["content"].split()[0]
        seen[q] = seen.get(q, -1) + 1
        return answers[q][seen[q]]

    return ReplyEngine(reply)


def test_php_re_asks_with_the_hint_until_two_answers_agree():
    engine = scripted({"QA": ["\\boxed{3}", "\\boxed{5}", "so \\boxed{5.0}", "unused"],
                       "QB": ["\\boxed{7}", "\\boxed{7}"]})
    run = run_setup("php", [task("a", "QA"), task("b", "QB")], engine, SAMPLING)
    assert [len(c) for c in engine.calls] == [2, 2, 1] and run.waves == 3  # B agrees at call 2, A at call 3
    prompts = [[r.messages[0]["content"] for r in call] for call in engine.calls]
    assert prompts[0] == ["QA" + INSTRUCTION, "QB" + INSTRUCTION]
    assert prompts[1] == ["QA (Hint: The answer is near to 3)." + INSTRUCTION,
                          "QB (Hint: The answer is near to 7)." + INSTRUCTION]
    assert prompts[2] == ["QA (Hint: The answer is near to 3, 5)." + INSTRUCTION]  # every earlier answer, in order
    a, b = run.results
    assert a.final_response == "so \\boxed{5.0}" and a.extracted == "5.0"  # 5 and 5.0 agree (normalised)
    assert a.info == {"answers": ["3", "5", "5.0"], "stopped": "agreement", "parse_failures": 0}
    assert [t.label for t in a.turns] == ["answer", "hinted", "hinted"] and [t.round for t in a.turns] == [1, 2, 3]
    assert b.info["answers"] == ["7", "7"] and b.extracted == "7"
    assert run.metrics == {"mean_rounds": 2.5, "agreement_rate": 1.0, "parse_failure_rate": 0.0}


def test_php_parse_failures_neither_hint_nor_agree():
    engine = scripted({"QA": ["no idea", "still none", "\\boxed{4}", "\\boxed{4}"]})
    run = run_setup("php", [task("a", "QA")], engine, SAMPLING)
    prompts = [call[0].messages[0]["content"] for call in engine.calls]
    assert prompts[:3] == ["QA" + INSTRUCTION] * 3  # nothing parsed yet: no hint, and two failures do not stop it
    assert prompts[3] == "QA (Hint: The answer is near to 4)." + INSTRUCTION
    [res] = run.results
    assert res.info == {"answers": [None, None, "4", "4"], "stopped": "agreement", "parse_failures": 2}
    assert run.metrics["parse_failure_rate"] == 0.5


def test_php_stops_at_max_rounds_with_the_last_answer():
    engine = scripted({"QA": ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]})
    run = run_setup("php", [task("a", "QA")], engine, SAMPLING, agents=["solo", "other"], max_rounds=3)
    [res] = run.results
    assert run.waves == 3 and res.final_response == "\\boxed{3}" and res.info["stopped"] == "max_rounds"
    assert {r.agent for call in engine.calls for r in call} == {"solo"}  # one agent: agents[0]
    assert run.metrics["agreement_rate"] == 0.0
    engine = scripted({"QA": ["\\boxed{1}"]})
    one = run_setup("php", [task("a", "QA")], engine, SAMPLING, max_rounds=1)
    assert one.waves == 1 and one.results[0].info["stopped"] == "max_rounds"


def test_php_defaults():
    assert SETUPS.get("php").default_temperature == 0.0
    assert SETUPS.get("php").Options().max_rounds == 10
    with pytest.raises(ValueError, match="max_rounds must be"):
        run_setup("php", [], ReplyEngine(str), SAMPLING, max_rounds=0)
