"""Golden test: every inference setup, on three fixed tasks with a scripted engine, is pinned exactly — the requests
of every engine call (agent, seed, sampling, messages), each task's final response, extraction, turns and info, the
run's metrics, wave and generation counts, and the progress labels (under the keys first written: "steps" for
the waves, a turn's "call" and "role" for its wave and label). A refactor of the setups or of the interaction
runner they run on must keep it green.

The engine answers from the request's seed and a hash of its messages (never from batch position), so any change
in prompts, seeds or agent mapping changes the texts and propagates through later rounds. Per seed, the assistant
of ``autogen`` says TERMINATE or not, its user proxy is satisfied or not, and MAESTRO's central agent answers in the
strict selection format or not.

Regenerate (only on purpose, after a change meant to alter behaviour):
``SELFEVO_UPDATE_GOLDEN=1 pytest tests/setups/test_setups_golden.py``.
"""
import hashlib
import json
import os
import pytest

from helpers.paths import GOLDEN
from selfevo.setups import run_setup
from selfevo.types import Completion, SamplingParams, Task

GOLDEN_FILE = GOLDEN / "setups.json"
SAMPLING = SamplingParams(max_new_tokens=16, temperature=0.6, top_p=0.9)
AGENTS = ["a0", "a1", "a2"]

CASES = {  # name -> (setup, agents, seed, options)
    "vanilla": ("vanilla", None, 7, {}),
    "vanilla_agents": ("vanilla", AGENTS, 7, {}),
    "consistency_vote": ("consistency", AGENTS, 7, {"k": 3}),
    "consistency_llm": ("consistency", AGENTS, 7, {"k": 3, "aggregate": "llm"}),
    "autogen": ("autogen", AGENTS, 7, {}),
    "autogen_seed3": ("autogen", AGENTS, 3, {"max_turns": 4}),
    "debate_vote": ("debate", AGENTS, 7, {"n_agents": 3, "rounds": 2}),
    "debate_llm": ("debate", AGENTS, 7, {"n_agents": 3, "rounds": 2, "aggregate": "llm"}),
    "maestro_select": ("maestro_select", AGENTS, 7, {"n_agents": 2, "k": 2, "rounds": 2, "epsilon": 0.5}),
    "maestro_select_one_agent": ("maestro_select", ["solo"], 5, {"n_agents": 2, "k": 2, "rounds": 3, "epsilon": 0.3,
                                                                  "justification_chars": 12}),
}


def tasks() -> list[Task]:
    meta = {"verifier": "math", "prompt_format": "math"}
    return [Task("t1", "math", "What is 1 + 0?", "1", meta=dict(meta)),
            Task("t2", "math", "What is 1 + 1?", "2", meta=dict(meta)),
            Task("t3", "math", "What is 2 + 1?", "3", meta=dict(meta))]


def digest(messages) -> str:
    return hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:8]


class GoldenEngine:
    """Completions that depend only on the request (seed, messages); records every call's requests."""

    def __init__(self):
        self.calls = []

    def generate(self, requests):
        self.calls.append([{"agent": r.agent, "seed": r.seed, "messages": digest(r.messages), "prefix": r.prefix,
                            "sampling": [r.sampling.max_new_tokens, r.sampling.temperature, r.sampling.top_p]}
                           for r in requests])
        return [Completion(r, [1, 2], list(range(1 + r.seed % 3)), [-0.5] * (1 + r.seed % 3), self.text(r),
                           "stop" if r.seed % 2 else "length") for r in requests]

    @staticmethod
    def text(r) -> str:
        h, s = digest(r.messages), r.seed
        content = r.messages[-1]["content"]
        if content.startswith("You are the Center Arbiter"):  # maestro_select's central agent
            if s % 3 == 0:
                return f"[{h}] I like the first candidate best."
            n = content.count("\n- Candidate ")
            return f"Reason: [{h}] it checks out, see the steps.\nChosen: {s % n + 1}\nFinal: \\boxed{{{s % 5}}}"
        if "Check the assistant's answer" in content:  # autogen's user proxy
            return "TERMINATE" if s % 3 == 0 else f"[{h}] Please check step {s % 4}."
        answer = f"[{h}] The answer is \\boxed{{{s % 5}}}"
        if r.messages[0]["role"] == "system" and s % 4 == 0:  # autogen's assistant ends sometimes
            answer += " TERMINATE"
        return answer


def turn_record(t) -> dict:
    """The golden record's keys as first written: the turn's label as "role", its wave as "call"."""
    return {"role": t.label, "agent": t.agent, "text": t.text, "slot": t.slot, "round": t.round, "call": t.wave,
            "finish_reason": t.finish_reason, "n_tokens": t.n_tokens, "meta": dict(t.meta)}


def record(case: str) -> dict:
    name, agents, seed, options = CASES[case]
    engine, labels = GoldenEngine(), []
    run = run_setup(name, tasks(), engine, SAMPLING, agents=agents, seed=seed, progress=labels.append, **options)
    out = {"results": [{"task_id": r.task_id, "final_response": r.final_response, "extracted": r.extracted,
                        "turns": [turn_record(t) for t in r.turns], "info": r.info} for r in run.results],
           "metrics": run.metrics, "steps": run.waves, "generations": run.generations, "options": run.options,
           "sampling": run.sampling, "calls": engine.calls, "progress": labels}
    return json.loads(json.dumps(out))


def test_setups_are_pinned():
    got = {case: record(case) for case in CASES}
    if os.environ.get("SELFEVO_UPDATE_GOLDEN") == "1":
        GOLDEN_FILE.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_FILE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("golden file regenerated")
    want = json.loads(GOLDEN_FILE.read_text())
    assert sorted(got) == sorted(want)
    for case in CASES:
        for key in want[case]:
            assert got[case][key] == want[case][key], f"{case}: {key} differs from the golden record"
        assert got[case] == want[case]


def test_golden_covers_the_interesting_branches():
    """The scripted texts exercise early stops, parse failures, exploration and disagreement (else the pin is weak)."""
    want = json.loads(GOLDEN_FILE.read_text())
    stops = {r["info"]["stopped_by"] for c in ("autogen", "autogen_seed3") for r in want[c]["results"]}
    assert stops == {"assistant", "user_proxy", "max_turns"}
    for case in ("maestro_select", "maestro_select_one_agent"):
        m = want[case]["metrics"]
        assert 0 < m["select_parse_failure_rate"] < 1
    assert want["maestro_select"]["metrics"]["explore_samples"] > 0
    assert want["maestro_select_one_agent"]["metrics"]["explore_samples"] > 0
    assert any(v["info"]["vote"]["count"] < 3 for v in want["debate_vote"]["results"])
    assert any(r["extracted"] == r["task_id"][1:] for c in want.values() for r in c["results"])
