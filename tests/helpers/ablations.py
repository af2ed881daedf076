"""The scripts of ``benchmarks/ablations`` as modules (they import their neighbours: their folder goes on the path)."""
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
