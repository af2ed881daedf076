"""benchmarks/logprob_memory.py: the chunked head's peak against the plain log-softmax's, each in a fresh process."""
import json

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
    assert out["plain_over_chunked"] == round(out["peak_gib"]["plain"] / out["peak_gib"]["chunked"], 2)


def test_bad_sizes_are_a_usage_error():
    with pytest.raises(SystemExit) as e:
        lm.main(["--tokens", "0"])
    assert e.value.code == 2
