"""The program the parent starts for one job (``python -I -B entry.py``): load the harness's modules, run the job.

``-I`` leaves this file's folder off ``sys.path`` (and ``selfevo`` may not be importable at all), so this file loads
the harness's other modules itself, by path: each module of :data:`MODULES` is compiled from its file beside this one
and executed as ``_selfevo_sandbox_child.<name>``, in that order (each imports, by relative imports, only modules
loaded before it). They are in ``sys.modules`` only while they load, so that those imports find them, and are taken
out before anything else runs: the program must not find the harness there (this module, ``__main__``, is replaced
there before the program runs). Nothing is read from ``__pycache__``, and the package's ``__init__`` is not run here.

:func:`channel._child_main` then runs the job with the namespaces of all of them, this one's included, and the files
they were compiled from: the harness snapshots and restores each of those namespaces and the classes they define, and
the audit hook treats code compiled from those files, and only those, as the harness's own.
"""
from __future__ import annotations

import os
import sys
import types

PACKAGE = "_selfevo_sandbox_child"  # the private name the modules load under: no package of that name is on sys.path
MODULES = ("bounded", "judge", "oracles", "guard", "isolation", "instrument", "snapshot", "steps", "channel")


def load_modules(directory: str) -> dict[str, types.ModuleType]:
    """The harness's modules (:data:`MODULES`, from ``directory``) by name, each compiled from its file and executed
    in order, then taken out of ``sys.modules``."""
    modules = {}
    for name in MODULES:
        path = os.path.join(directory, name + ".py")
        module = types.ModuleType(f"{PACKAGE}.{name}")
        module.__file__, module.__package__ = path, PACKAGE
        sys.modules[module.__name__] = module
        with open(path, "rb") as fh:
            source = fh.read()
        exec(compile(source, path, "exec", dont_inherit=True), vars(module))
        modules[name] = module
    for module in modules.values():
        del sys.modules[module.__name__]
    return modules


def main() -> None:
    """Load the harness's modules and run the job (:func:`channel._child_main`)."""
    path = os.path.abspath(__file__)  # the name this file's code was compiled under, as for the modules' paths
    modules = load_modules(os.path.dirname(path))
    harness = [globals()] + [vars(module) for module in modules.values()]
    paths = frozenset([path] + [module.__file__ for module in modules.values()])
    modules["channel"]._child_main(harness, paths)


if __name__ == "__main__":
    main()
