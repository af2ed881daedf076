"""The float pins hold on another CPU: the tests that compare floats computed through torch's CPU kernels run again
in a subprocess under each kernel setting that stands in for a different machine on this one.

- ``ATEN_CPU_CAPABILITY=default`` / ``avx2``: ATen's vectorised kernels as on a CPU without AVX-512 (or without
  any AVX);
- ``MKL_ENABLE_INSTRUCTIONS=AVX2`` and ``ONEDNN_MAX_CPU_ISA=AVX2``: the BLAS and oneDNN code paths of an AVX2-only
  CPU (an AMD Zen 2/3 or an older Xeon);
- ``OMP_NUM_THREADS=1`` and ``2``: other summation orders in multi-threaded reductions (native kernels at 2 threads
  are the main suite's own setting, tests/conftest.py, so they are not run twice).

A pin that holds only on the machine it was written on fails here, on any machine. The files below are every test
file with a tolerance under 1e-6, a bit-for-bit comparison (``torch.equal``) or a golden checksum of a float that
passes through torch kernels (found with ``grep -E "approx\\(|allclose|assert_close|torch.equal"``); files whose
float comparisons are all pure-Python arithmetic are left out.
"""
import os
import subprocess
import sys

import pytest

from helpers.paths import ROOT

FLOAT_PIN_FILES = [
    "tests/algorithms/test_golden_comas.py", "tests/algorithms/test_golden_recipes.py", "tests/algorithms/test_grpo.py",
    "tests/algorithms/test_azr.py", "tests/algorithms/test_mae.py",
    "tests/engines/test_engine_hf.py", "tests/optimizers/test_clpo.py", "tests/optimizers/test_objectives.py",
    "tests/optimizers/test_optimizers.py", "tests/policy/test_adamw.py", "tests/policy/test_batch.py",
    "tests/policy/test_policy.py", "tests/rewards/test_rewards.py", "tests/setups/test_setups_golden.py",
    "tests/test_stats.py",
]

SETTINGS = {
    "aten-default-1thread": {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"},
    "aten-avx2-2threads": {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2"},
    "mkl-onednn-avx2-1thread": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                "OMP_NUM_THREADS": "1"},
    "native-1thread": {"OMP_NUM_THREADS": "1"},
}


@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_float_pins_hold_under_other_kernels(setting):
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                                                             "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")}
    env.update(SETTINGS[setting])
    # the quick subset of those files: the slow ones load the embedded bf16 model, whose greedy tokens may flip
    # between batch compositions under other kernels (a bf16 argmax, not a float pin; docs/results.md's caveat)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                           *FLOAT_PIN_FILES], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)
    tail = "\n".join(proc.stdout.splitlines()[-25:])
    assert proc.returncode == 0, f"{setting}: float pins fail under {SETTINGS[setting]}:\n{tail}"
