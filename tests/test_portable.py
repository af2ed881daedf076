"""The float pins hold on another CPU: the tests that compare floats computed through torch's CPU kernels run again
in a subprocess under each kernel setting that stands in for a different machine on this one.

- ``ATEN_CPU_CAPABILITY=default`` / ``avx2``: ATen's vectorised kernels as on a CPU without AVX-512 (or without
  any AVX);
- ``MKL_ENABLE_INSTRUCTIONS=AVX2`` and ``ONEDNN_MAX_CPU_ISA=AVX2``: the BLAS and oneDNN code paths of an AVX2-only
  CPU (an AMD Zen 2/3 or an older Xeon);
- ``OMP_NUM_THREADS=1`` and ``2``: other summation orders in multi-threaded reductions (native kernels at 2 threads
  are the main suite's own setting, tests/conftest.py, so they are not run twice).

A pin that holds only on the machine it was written on fails here, on any machine. The files are found from their
pins (:func:`float_pins`, the comparisons ``grep -E "approx\\(|allclose|assert_close|torch.equal"`` finds): a
tolerance under 1e-6 (as the call reads, its defaults included; a tolerance not written as a number counts), a
bit-for-bit comparison (``torch.equal``), or a golden checksum (the file imports :mod:`helpers.golden`, ``GOLDEN``
or a golden test). A file whose pins need no other kernels is left out in :data:`LEFT_OUT`, with the pins it is
allowed: one more pin there fails :func:`test_left_out_files_pin_no_more_than_they_are_allowed`.
"""
import ast
import collections
import os
import subprocess
import sys

import pytest

from helpers.paths import ROOT

UNDER = 1e-6
# the tolerance each comparison has when the call does not name it: (relative, absolute)
DEFAULTS = {"approx": (1e-6, 1e-12), "allclose": (1e-5, 1e-8), "assert_close": (1.3e-6, 1e-5)}  # float32's
# where positional tolerances start: approx(expected, rel, abs), allclose(a, b, rtol, atol); assert_close: keywords
FIRST_TOLERANCE_ARG = {"approx": 1, "allclose": 2, "assert_close": 4}

# file -> (the pins it may have, why they need no other kernels)
LEFT_OUT = {
    "tests/algorithms/test_comas.py": ({"torch.equal": 1}, "a checkpoint's adapters against the step's saved copy"),
    "tests/loop/test_faults.py": ({"torch.equal": 1}, "a checkpoint's adapters against the step's saved copy"),
    "tests/algorithms/test_maestro.py": ({"torch.equal": 2}, "a reference adapter against its saved source; an "
                                         "adapter that moved"),
    "tests/benchmarks/test_trl_grpo.py": ({"torch.equal": 1}, "a second step that moved the adapter"),
    "tests/test_gpu.py": ({"tolerance": 3}, "CUDA only: these settings change CPU kernels"),
    "tests/test_stats.py": ({"tolerance": 6}, "selfevo.stats: Python's math, no torch kernel"),
    "tests/test_sweep.py": ({"tolerance": 7}, "sweep tables from recorded items: selfevo.stats, no torch kernel"),
}


def _number(node) -> float | None:
    """The value of a tolerance written as a number or arithmetic of numbers (``2 ** -8``), else None."""
    try:
        value = eval(compile(ast.Expression(node), "<tolerance>", "eval"), {"__builtins__": {}})  # noqa: S307
    except Exception:  # a name or a call: not a number written here
        return None
    return float(value) if isinstance(value, (int, float)) else None


def tolerance(call: ast.Call, name: str) -> float | None:
    """The largest gap ``call`` accepts, relative or absolute (None: not written as a number)."""
    kw = {k.arg: k.value for k in call.keywords}
    rel, abs_ = kw.get("rel", kw.get("rtol")), kw.get("abs", kw.get("atol"))
    positional = call.args[FIRST_TOLERANCE_ARG[name]:]
    rel, abs_ = (positional + [rel, abs_])[:2] if positional else (rel, abs_)
    if name == "approx" and abs_ is not None and rel is None:  # approx with abs alone has no relative tolerance
        return _number(abs_)
    values = [default if node is None else _number(node) for node, default in zip((rel, abs_), DEFAULTS[name])]
    return None if None in values else max(values)


def float_pins(source: str) -> collections.Counter:
    """The pins in a test file's source, by kind: ``torch.equal``, ``tolerance`` (under :data:`UNDER` or not a
    number) and ``golden``."""
    pins = collections.Counter()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and ((node.module or "").startswith(("helpers.golden", "test_golden_"))
                                                 or "GOLDEN" in {alias.name for alias in node.names}):
            pins["golden"] += 1
        elif isinstance(node, ast.Attribute) and node.attr == "equal" and getattr(node.value, "id", None) == "torch":
            pins["torch.equal"] += 1
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in DEFAULTS and ((tol := tolerance(node, name)) is None or tol < UNDER):
                pins["tolerance"] += 1
    return pins


def pinned_files() -> dict[str, collections.Counter]:
    """Every test file with a float pin: its path under the repository -> its pins."""
    files = sorted((ROOT / "tests").rglob("test_*.py"))
    found = {p.relative_to(ROOT).as_posix(): float_pins(p.read_text()) for p in files}
    return {path: pins for path, pins in found.items() if pins}


FLOAT_PIN_FILES = sorted(set(pinned_files()) - set(LEFT_OUT))

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


def test_the_pins_are_found_by_what_they_compare():
    source = """
from helpers.golden import adapter_checksums
assert a == pytest.approx(b, abs=1e-7) and c == approx(d, 1e-9) and torch.equal(x, y)
torch.testing.assert_close(x, y, atol=tol, rtol=tol)
assert a == pytest.approx(b) and a == approx(b, abs=1e-6) and a == approx(b, rel=1e-7, abs=1e-3)
assert torch.allclose(x, y) and torch.allclose(x, y, 1e-5, 1e-8) and not torch.allclose(x, y, 1e-7, 1e-9)
"""
    # abs=1e-7, rel 1e-9, a tolerance by name, allclose at 1e-7 / 1e-9; not: approx's default (rel 1e-6), abs=1e-6,
    # rel=1e-7 with abs=1e-3, allclose's defaults (1e-5)
    assert float_pins(source) == {"golden": 1, "tolerance": 4, "torch.equal": 1}
    assert float_pins("from helpers.paths import GOLDEN\nfrom test_golden_recipes import _compare\n") == {"golden": 2}


def test_the_golden_and_objective_files_are_run_under_other_kernels():
    assert {"tests/algorithms/test_golden_comas.py", "tests/algorithms/test_golden_recipes.py",
            "tests/setups/test_setups_golden.py", "tests/optimizers/test_objectives.py",
            "tests/optimizers/test_optimizers.py", "tests/policy/test_policy.py"} <= set(FLOAT_PIN_FILES)


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_left_out_files_pin_no_more_than_they_are_allowed():
    """A left-out file with a pin beyond those listed runs under other kernels or says why not; an entry whose pins
    went is dropped."""
    found = pinned_files()
    assert {path: dict(found.get(path, {})) for path in LEFT_OUT} == {path: allowed for path, (allowed, _) in
                                                                         LEFT_OUT.items()}
