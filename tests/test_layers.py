"""The package's floors: every module of ``selfevo`` imports only from its own floor or the floors below it, and no
import cycle runs through module-level imports. Read from the source with ``ast``: nothing is imported.

The floor table below is the one ``docs/design.md`` ("Floors") documents. An import counts wherever it is written:
at module level, in a class body, or inside a function (a lazy import is still a dependency). ``from pkg import name``
is an import of the module ``pkg.name`` when that module exists, else of ``pkg``. Importing ``pkg.mod`` from outside
``pkg`` first runs ``pkg/__init__.py``, so for the cycle check that import also reaches ``pkg`` (a module inside
``pkg`` is imported while ``pkg`` is: its package's ``__init__`` importing it is how a package is assembled).

And the sizes: no file of the package over 500 lines, no function or method over 60 (the sandbox's files excepted).
"""
from __future__ import annotations

import ast
from pathlib import Path


from helpers.paths import ROOT

PACKAGE = ROOT / "selfevo"

# Bottom to top. A module belongs to the floor of its longest listed prefix; the bare ``selfevo`` package is floor 0.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("ground: plain types, registry, errors, statistics, forward-shape counts, process group, heap",
     ("selfevo.types", "selfevo.registry", "selfevo.errors", "selfevo.stats", "selfevo.shapes", "selfevo.distributed",
      "selfevo.heap")),
    ("models, data, checks", ("selfevo.models", "selfevo.attention", "selfevo.verifiers", "selfevo.tasks")),
    ("agents and generation", ("selfevo.roles", "selfevo.interaction", "selfevo.engines", "selfevo.policy")),
    # config sits above the engines: its engine section checks engine.name against the engine registry
    ("config, rewards, optimizers", ("selfevo.config", "selfevo.rewards", "selfevo.optimizers")),
    # the inference setups sit below the loop and the recipes: a setup never uses training code (the MAESTRO rounds,
    # selfevo.setups.maestro_rounds, are shared with the maestro recipe)
    ("inference setups", ("selfevo.setups",)),
    ("the training loop", ("selfevo.loop",)),
    ("recipes", ("selfevo.algorithms",)),
    ("evaluation, reports, sweeps", ("selfevo.evaluation", "selfevo.report", "selfevo.sweep")),
    ("command line", ("selfevo.cli", "selfevo.__main__")),
]


def module_name(path: Path) -> str:
    """``selfevo/setups/base.py`` → ``selfevo.setups.base``; a package's ``__init__.py`` → the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def floor_of(module: str) -> int | None:
    """The floor index of ``module`` (None when the table does not place it)."""
    if module == "selfevo":
        return 0
    best = None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def imports(module: str) -> list[tuple[str, int, bool]]:
    """``(imported selfevo module, line, at module level)`` for every import statement in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            here = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, here) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([child.module] if child.module else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in MODULES else base, child.lineno, here))
            visit(child, here)

    visit(ast.parse(path.read_text(), str(path)), True)
    return [(name, line, top) for name, line, top in found if name in MODULES and name != module]


IMPORTS = {m: imports(m) for m in MODULES}


def test_every_module_has_a_floor():
    missing = [m for m in MODULES if floor_of(m) is None]
    assert not missing, f"modules without a floor (add them to FLOORS here and in docs/design.md): {missing}"


def test_no_import_from_a_higher_floor():
    upward = sorted({f"{m} (floor {floor_of(m)}) imports {target} (floor {floor_of(target)}) at line {line}"
                     for m, found in IMPORTS.items() for target, line, _ in found
                     if floor_of(m) is not None and floor_of(target) is not None and floor_of(target) > floor_of(m)})
    assert not upward, "imports from a higher floor:\n" + "\n".join(upward)


def reached(importer: str, target: str) -> set[str]:
    """What importing ``target`` from ``importer`` runs: ``target`` and its packages that do not hold ``importer``."""
    parts = target.split(".")
    packages = {".".join(parts[:i]) for i in range(1, len(parts))}
    return {target} | {p for p in packages if p in MODULES and not importer.startswith(p + ".")}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_no_import_cycle_at_module_level():
    graph = {m: {r for target, _, top in found if top for r in reached(m, target)} - {m}
             for m, found in IMPORTS.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "module-level import cycle: " + " -> ".join(cycle)


def test_the_checks_see_what_they_must():
    """The parser sees function-level imports (the command line's lazy dispatch), the cycle search finds a cycle,
    and the table orders the floors the way the package is built."""
    assert any(t == "selfevo.evaluation" and not top for t, _, top in IMPORTS["selfevo.cli"])
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert reached("selfevo.algorithms.maestro", "selfevo.setups.base") == {"selfevo.setups.base", "selfevo.setups"}
    assert reached("selfevo.setups.maestro", "selfevo.setups.base") == {"selfevo.setups.base"}
    assert floor_of("selfevo.algorithms.maestro") > floor_of("selfevo.setups.maestro_rounds") > floor_of("selfevo.optimizers")
    assert floor_of("selfevo.setups.base") > floor_of("selfevo.rewards") > floor_of("selfevo.verifiers.voting")
    assert floor_of("selfevo.cli") > floor_of("selfevo.evaluation") > floor_of("selfevo.errors")


# ---- sizes: no package file over 500 lines, no function or method over 60 --------------------------------------
MAX_FILE_LINES, MAX_FUNCTION_LINES = 500, 60
SIZE_EXEMPT = "verifiers/sandbox"  # sandbox.py and sandbox_child/: the sandbox's security code is left as it is


def sized_sources() -> dict[str, str]:
    """Each file of the package but the sandbox's, by its path under ``selfevo/``, with its text."""
    paths = {p.relative_to(PACKAGE).as_posix(): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {rel: p.read_text() for rel, p in paths.items() if not rel.startswith(SIZE_EXEMPT)}


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Functions and methods (nested ones too) over ``limit`` lines, ``def`` line to last line: name -> lines."""
    return {f"{node.name}:{node.lineno}": node.end_lineno - node.lineno + 1 for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= limit}


SOURCES = sized_sources()


def test_no_package_file_over_500_lines():
    over = {rel: len(text.splitlines()) for rel, text in SOURCES.items() if len(text.splitlines()) > MAX_FILE_LINES}
    assert not over, f"files over {MAX_FILE_LINES} lines: {over}"


def test_no_function_over_60_lines():
    over = {rel: found for rel, text in SOURCES.items() if (found := long_functions(text))}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_the_size_checks_see_what_they_must():
    """Methods and nested functions are measured, a 60-line function passes and a 61-line one does not, and the
    sandbox is the only part left out."""
    def body(n):
        return "".join(f"        x{i} = {i}\n" for i in range(n))

    source = "class A:\n    def ok(self):\n" + body(59) + "def outer():\n    def inner():\n" + body(60)
    assert long_functions(source) == {"inner:63": 61, "outer:62": 62}
    assert "cli.py" in SOURCES and "policy/__init__.py" in SOURCES
    assert not any(rel.startswith("verifiers/sandbox") for rel in SOURCES) and "verifiers/__init__.py" in SOURCES
