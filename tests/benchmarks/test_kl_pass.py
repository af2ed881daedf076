"""benchmarks/kl_pass.py: the GRPO update timed as it runs and with the old current-policy scoring pass before it."""
import json
import sys

from benchmarks import common
from benchmarks import kl_pass as kp


def test_kl_pass_alternates_both_forms_and_writes_medians(monkeypatch, tmp_path):
    monkeypatch.setattr(kp, "MODEL", "tiny-random")
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["kl_pass.py", "--prompts", "2", "--per-prompt", "2", "--repeats", "2"])
    kp.main()
    out = json.loads((tmp_path / "kl_pass.json").read_text())
    assert out["rows"] == 4 and all(len(v) == 2 for v in out["runs"].values())
    assert all(o > s > 0 for o, s in zip(out["runs"]["old"], out["runs"]["score_only"]))
    assert out["old_over_now"] == round(out["median"]["old"] / out["median"]["now"], 3)
