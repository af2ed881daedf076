"""benchmarks/kl_pass.py: the GRPO update timed as it runs and with the old current-policy scoring pass before it."""
import json
import math
import sys
import types

import pytest

from benchmarks import common
from benchmarks import kl_pass as kp


@pytest.mark.slow  # a benchmark script's test, four GRPO updates: not needed for a quick check
def test_kl_pass_alternates_both_forms_and_writes_medians(monkeypatch, tmp_path):
    """The real update and scoring pass run on tiny-random, on a clock the test moves: each scoring pass takes 1 s,
    the updates 2, 3, 4, 5 s in turn. So `now` (update) takes 2 and 4 s, `old` (score, then update) 1 + 3 and
    1 + 5 s: medians 3, 5 and 1, old over now 5 / 3."""
    clock, calls, updates = [0.0], [], []
    real_score, real_get = kp.score, kp.OPTIMIZERS.get

    def score(store, agent, batch):
        calls.append("score")
        clock[0] += 1.0
        return real_score(store, agent, batch)

    def optimizer(name):
        def build(cfg):
            update = real_get(name)(cfg)

            def timed(store, agent, samples):
                calls.append(f"{name} kl={cfg.kl_coef} {cfg.kl_estimator} in_reward={cfg.kl_in_reward}")
                clock[0] += 2.0 + len(updates)
                updates.append((update(store, agent, samples), store.is_untrained(agent)))
                return updates[-1][0]
            return timed
        return build

    monkeypatch.setattr(kp, "score", score)
    monkeypatch.setattr(kp.OPTIMIZERS, "get", optimizer)
    monkeypatch.setattr(kp, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(kp, "MODEL", "tiny-random")
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["kl_pass.py", "--prompts", "2", "--per-prompt", "2", "--repeats", "2"])
    kp.main()
    out = json.loads((tmp_path / "kl_pass.json").read_text())
    grpo = "grpo kl=0.04 k3 in_reward=False"  # β = 0.04 as a loss term (k3), as the script says
    assert calls == [grpo, "score", grpo, grpo, "score", grpo]
    assert out["rows"] == 4  # 2 prompts x 2 completions
    assert out["runs"] == {"now": [2.0, 4.0], "old": [4.0, 6.0], "score_only": [1.0, 1.0]}
    assert out["median"] == {"now": 3.0, "old": 5.0, "score_only": 1.0} and out["old_over_now"] == 1.667
    assert all(math.isfinite(stats["loss"]) and not untrained for stats, untrained in updates)  # real updates
