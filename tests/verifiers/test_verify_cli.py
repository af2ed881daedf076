"""``selfevo verify``: one output line per input line, bad lines scored 0 with a reason, never a crash."""
from __future__ import annotations

import json

import pytest

from selfevo.verifiers.cli import main, score_line
from selfevo.verifiers.sandbox import take_fs_modes

LIMITS = {"wall_s": 10.0, "unit_s": 2.0, "load_s": 5.0}
GOOD_LINES = [
    ({"domain": "math", "response": r"so \boxed{\frac{1}{2}}", "reference": "0.5"}, 1.0),
    ({"domain": "math", "response": "#### 7", "reference": "8"}, 0.0),
    ({"domain": "mcq", "response": "The answer is (C).", "reference": "C"}, 1.0),
    ({"domain": "numeric", "response": "v = 9.9 m/s", "reference": "10"}, 1.0),
    ({"domain": "code", "response": "```python\ndef sq(x):\n    return x * x\n```",
      "tests": "assert sq(2) == 4\nassert sq(3) == 9", "reference": "", "meta": {"limits": LIMITS}}, 1.0),
    ({"domain": "code", "response": "def sq(x):\n    return x + x\n", "tests": "assert sq(2) == 4\nassert sq(3) == 9",
      "entry_point": "sq", "meta": {"limits": LIMITS}}, 0.5),
    ({"domain": "code", "response": "print(int(input()) * 2)",
      "meta": {"limits": LIMITS, "io": [{"input": "4\n", "output": "8\n"}]}}, 1.0),
]
BAD_LINES = [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"response": "4", "reference": "4"}), "missing field 'domain'"),
    (json.dumps({"domain": "math", "reference": "4"}), "'response'"),
    (json.dumps({"domain": "code", "response": "x = 1"}), "'tests'"),
    (json.dumps({"domain": "poetry", "response": "x", "reference": "y"}), "unknown domain"),
    (json.dumps({"domain": "math", "response": "4", "reference": "4", "meta": 3}), "'meta'"),
    (json.dumps({"domain": "code", "response": "x = 1", "tests": "assert x == 1", "meta": {"limits": {"bad": 1}}}),
     "unknown sandbox limit"),
]


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@pytest.mark.parametrize("workers", [1, 2])
def test_cli_scores_every_line_in_order(tmp_path, workers, capsys):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [json.dumps(rec) for rec, _ in GOOD_LINES] + [text for text, _ in BAD_LINES]
    src.write_text("\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n")  # a blank line is skipped
    take_fs_modes()  # forget sandbox jobs other tests ran in this process
    assert main(["--input", str(src), "--output", str(dst), "--workers", str(workers)]) == 0
    err = capsys.readouterr().err
    modes = dict(part.rsplit(" x", 1) for part in err.split("sandbox filesystem: ", 1)[1].strip().split(", "))
    assert sum(map(int, modes.values())) == 3 and set(modes) <= {"minimal-root", "read-only-host", "none"}, err
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert len(out) == len(lines)
    for (record, score), result in zip(GOOD_LINES, out):
        assert {k: result[k] for k in record} == record  # input fields are kept
        assert result["score"] == score, result["reason"]
        assert result["reason"]
    for (_, fragment), result in zip(BAD_LINES, out[len(GOOD_LINES):]):
        assert result["score"] == 0.0 and fragment in result["reason"], result["reason"]


def test_cli_usage_errors(tmp_path, capsys):
    assert main(["--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o.jsonl")]) == 2
    assert "cannot read --input" in capsys.readouterr().err
    (tmp_path / "in.jsonl").write_text("")
    assert main(["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path), "--workers", "1"]) == 2
    assert main(["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "o"), "--workers", "0"]) == 2


def test_score_line_keeps_raw_text_of_invalid_json():
    assert score_line("oops\n") == {"raw": "oops", "score": 0.0, "reason": score_line("oops")["reason"]}
