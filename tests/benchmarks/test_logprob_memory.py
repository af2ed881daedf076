"""benchmarks/logprob_memory.py: the chunked head's peak against the plain log-softmax's, each in a fresh process."""
import json
import sys
import types

import pytest

from benchmarks import common
from benchmarks import logprob_memory as lm


@pytest.mark.slow
def test_the_chunked_head_holds_a_few_chunks_and_the_plain_one_the_whole_vocabulary(monkeypatch, tmp_path):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    out = lm.main(["--tokens", "2048", "--vocab", "16384", "--hidden", "64", "--chunk", "256"])
    assert out == json.loads((tmp_path / "logprob_memory.json").read_text())
    full, block = 2048 * 16384 * 4 / 2**30, 256 * 16384 * 4 / 2**30  # 0.125 GiB; 0.0156 GiB
    assert out["full_fp32_gib"] == 0.125
    # plain: the fp32 logits, their log-softmax and its gradient (3 x full, measured 0.377 GiB); chunked: the
    # chunk's logits, log-softmax and gradient (3 blocks, measured 0.048 GiB)
    assert out["peak_gib"]["plain"] > 2 * full
    assert out["peak_gib"]["chunked"] < 4 * block


def test_each_path_runs_in_its_own_process_with_the_sizes_and_the_peaks_are_reported_in_gib(monkeypatch, tmp_path):
    """The children are scripted (chunked: 2^28 bytes, plain: 3 x 2^30): 0.25 and 3.0 GiB, plain over chunked 12;
    the whole vocabulary's fp32 logits of 2,048 tokens x 16,384 rows: 2^27 bytes, 0.125 GiB."""
    children = []

    def child(cmd, **kw):
        children.append(cmd)
        peak = {"chunked": 2**28, "plain": 3 * 2**30}[cmd[-1]]
        return types.SimpleNamespace(returncode=0, stdout=f"warming up\n{json.dumps({'bytes': peak})}\n", stderr="")

    monkeypatch.setattr(lm, "subprocess", types.SimpleNamespace(run=child))  # machine() runs its own
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    out = lm.main(["--tokens", "2048", "--vocab", "16384", "--hidden", "64", "--chunk", "256"])
    sizes = ["--tokens=2048", "--vocab=16384", "--hidden=64", "--dtype=float32", "--chunk=256", "--device=cpu"]
    script = [sys.executable, "-m", "benchmarks.logprob_memory"]
    assert children == [[*script, *sizes, "--child", path] for path in ("chunked", "plain")]
    assert out["peak_gib"] == {"chunked": 0.25, "plain": 3.0} and out["plain_over_chunked"] == 12.0
    assert out["full_fp32_gib"] == 0.125 and out == json.loads((tmp_path / "logprob_memory.json").read_text())


def test_bad_sizes_are_a_usage_error():
    with pytest.raises(SystemExit) as e:
        lm.main(["--tokens", "0"])
    assert e.value.code == 2
