"""The scripts of ``benchmarks/ablations`` and ``benchmarks`` as modules (they import their neighbours: their folder
goes on the path)."""
import importlib.util
import sys

from helpers.paths import ROOT

ABLATIONS = ROOT / "benchmarks" / "ablations"


def load(name: str):
    """``benchmarks/ablations/<name>.py`` as the module ``ablation_<name>``."""
    sys.path.insert(0, str(ABLATIONS))
    spec = importlib.util.spec_from_file_location(f"ablation_{name}", ABLATIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def load_benchmark(name: str, monkeypatch):
    """``benchmarks/<name>.py`` as the module ``bench_<name>``, its folder on the path for this test only (its
    ``common`` is ``benchmarks/common.py``: an ablation's ``common`` loaded earlier is dropped)."""
    bench = ROOT / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    monkeypatch.delitem(sys.modules, "common", raising=False)  # benchmarks/ablations has a module of that name
    spec = importlib.util.spec_from_file_location(f"bench_{name}", bench / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
