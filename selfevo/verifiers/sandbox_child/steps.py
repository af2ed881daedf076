"""Running the job's steps: compile and load the program, then run every exec/pytest/call/io step under its limits,
check the snapshot after it and report it (:func:`_run_all`).
"""
from __future__ import annotations

import builtins
import os
import signal
import sys
import time
import types

from .bounded import _capture, _captured_text, _describe, _guarded, _HarnessState, _stdin_stream, _timed
from .instrument import _call_targets, _preimport, _prepare_tests, _test_namespace, _trusted_prefix
from .judge import _Judge
from .oracles import _evalplus_equal, _foreign_type, _json_equal, _types_in, outputs_match
from .snapshot import _check_integrity, _install_audit_hook, _take_snapshot, _watch

def _run_all(config: dict, state: _HarnessState, emit, harness: list, harness_paths: frozenset) -> None:
    """Prepare the tests, snapshot what the program may not change, load the program (if any step needs the
    module), then run every step, check the snapshot after it, and report it. ``harness``: the globals of every
    module of the harness; ``harness_paths``: the files they were compiled from.

    Everything this loop calls after the program has run is bound to a local first: rebinding the harness's
    globals (reachable from any of its functions) cannot change what runs here, and ``check`` restores them.
    """
    limits, steps = config["limits"], config["steps"]
    code, load_error = _compile_program(config["program"], config["prefix"])
    needs_module = any(step["kind"] != "io" for step in steps)
    imported = _prepare_tests(steps)
    builtins_dict = dict(vars(builtins))  # the tests' builtins: taken now, before the program can patch them
    trusted = _trusted_prefix(config["prefix"], builtins_dict, limits) if needs_module and config["prefix"] else {}
    if needs_module:
        _preimport(imported, limits)
    sys.modules["__main__"] = types.ModuleType("__main__")  # the harness's entry is not the program's to patch
    snapshot = _take_snapshot(harness, state)
    judge = _Judge(snapshot.library)
    check, watch, run_step, build_namespace, scopes = _check_integrity, _watch, _run_step, _test_namespace, \
        ["full" if step["kind"] in ("exec", "pytest") else "core" for step in steps]
    refusals, pairs, text_of, rounded = snapshot.refusals, list(enumerate(steps)), str, round
    _install_audit_hook(snapshot.functions, snapshot, _code_ids([step["compiled"] for step in steps
                                                                 if "compiled" in step]), harness_paths)
    namespace = None
    if code is not None and needs_module:
        module, load_error = _load_module(code, config["workdir"], limits)
        problem = check(snapshot, "load")
        load_error = load_error or (problem and f"program failed while loading: {problem}")
        if not load_error:
            keep = set(config.get("entry_points") or ()) | _call_targets(steps)
            namespace = build_namespace(module, trusted, builtins_dict, judge.helpers, keep)
            for step in steps:
                step["keep"] = keep
            judge.entry_ids = frozenset(id(namespace[name]) for name in keep if name in namespace)
            watch(snapshot, namespace, judge, builtins_dict)
    emit({"t": "load", "ok": not load_error, "err": load_error})
    for index, step in pairs:
        before = refusals[0]
        ok, err, ms = run_step(step, code, namespace, load_error, state)
        problem = check(snapshot, scopes[index])
        if problem:
            ok, err = False, f"{problem}, which is not allowed while tests run"
        elif ok and refusals[0] != before:
            ok, err = False, "a value was refused during the test (and the refusal caught)"
        emit({"t": "step", "i": index, "ok": ok, "err": text_of(err)[:500], "ms": rounded(ms, 3)})


def _code_ids(codes: list) -> frozenset:
    """Ids of the code objects ``codes`` and of every code object nested in them (functions, class bodies, lambdas,
    comprehensions): the test code, for the audit hook."""
    found, stack = set(), list(codes)
    while stack:
        code = stack.pop()
        if id(code) not in found:
            found.add(id(code))
            stack.extend(const for const in code.co_consts if type(const) is types.CodeType)
    return frozenset(found)


def _compile_program(program: str, prefix: str):
    """Compile prefix+program, else the prefix's import lines + program, else program alone."""
    imports = "\n".join(line for line in prefix.splitlines() if line.startswith(("import ", "from ")))
    variants = [prefix + "\n" + program, imports + "\n" + program, program] if prefix else [program]
    first_error = ""
    for source in variants:
        source = _hoist_future_imports(source)
        try:
            return compile(source, "solution.py", "exec", dont_inherit=True), ""
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            first_error = first_error or f"program does not compile: {_describe(exc)}"
    return None, first_error


def _hoist_future_imports(source: str) -> str:
    """Move ``from __future__`` lines to the top so a prefix cannot make them illegal."""
    lines = source.splitlines()
    future = [line for line in lines if line.startswith("from __future__ ")]
    if not future:
        return source
    return "\n".join(future + [line for line in lines if not line.startswith("from __future__ ")])


def _load_module(code, workdir: str, limits: dict):
    """Execute the program once as module ``solution``; return (module, error)."""
    module = types.ModuleType("solution")
    module.__file__ = os.path.join(workdir, "solution.py")
    sys.modules["solution"] = module
    ok, err = _guarded(lambda: exec(code, module.__dict__), limits["load_s"], limits["output_bytes"])
    if not ok:
        return None, f"program failed while loading: {err}"
    return module, ""


def _run_step(step: dict, code, namespace, load_error: str, state: _HarnessState) -> tuple[bool, str, float]:
    """Run one step; return (passed, error, milliseconds)."""
    if load_error:
        return False, load_error, 0.0
    limits = state.limits
    seconds = step.get("timeout") or limits["unit_s"]
    start = time.perf_counter()
    if step["kind"] == "io":
        ok, err = _run_io(step, code, seconds, state)
    else:
        ok, err = _guarded(lambda: _STEP_RUNNERS[step["kind"]](step, namespace), seconds, limits["output_bytes"])
    return ok, err, (time.perf_counter() - start) * 1000.0


def _run_exec(step: dict, namespace: dict) -> None:
    """Run a step's test code, instrumented and compiled before the program was loaded."""
    if "compiled" not in step:
        raise RuntimeError(step.get("compile_error", "the test code was not prepared"))
    exec(step["compiled"], namespace)
    if step.get("star_import"):  # ``from solution import *`` must not hand the tests the program's ``abs``
        module = sys.modules.get("solution")
        for name in list(namespace):
            if (type(name) is str and name in namespace["__builtins__"] and not name.startswith("__")
                    and name not in step.get("keep", ()) and module is not None
                    and namespace[name] is vars(module).get(name)):
                del namespace[name]


def _run_pytest(step: dict, namespace: dict) -> None:
    """Call a test function (or ``Class.method``) once per parametrize case."""
    name = step["name"]
    if "." in name:
        class_name, method = name.split(".", 1)
        instance = namespace[class_name]()
        if hasattr(instance, "setup_method"):
            instance.setup_method(getattr(instance, method))
        func = getattr(instance, method)
    else:
        func = namespace[name]
    cases = _parametrize_cases(func)
    if not cases:
        raise RuntimeError("the test has no parametrize cases")
    for kwargs in cases:
        func(**kwargs)


def _parametrize_cases(func) -> list[dict]:
    """Keyword sets from ``pytest.mark.parametrize`` marks (cartesian product over several marks)."""
    cases = [{}]
    for mark in getattr(func, "pytestmark", []):
        if getattr(mark, "name", "") != "parametrize":
            continue
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = [_parametrize_row(value, len(names)) for value in mark.args[1]]
        cases = [{**case, **dict(zip(names, row))} for case in cases for row in rows]
    return cases


def _parametrize_row(value, n_names: int) -> tuple:
    """One parametrize entry as a tuple of argument values (``pytest.param`` objects unwrapped)."""
    if hasattr(value, "values") and hasattr(value, "marks"):  # pytest.param(...)
        return tuple(value.values)
    return (value,) if n_names == 1 else tuple(value)


def _run_call(step: dict, namespace: dict) -> None:
    """Evaluate the target, call it with the step's arguments and compare the result.

    Only the call runs under the step's time limit (as in EvalPlus): checking and comparing a large output is
    the harness's own work on built-in types, bounded by the job's wall-clock and CPU limits.
    """
    target = eval(step["target"], namespace)
    out = target(*step["args"])
    signal.setitimer(signal.ITIMER_REAL, 0)
    bad_type = _foreign_type(out, _types_in(step["expected"]))
    if bad_type:
        described = bad_type if bad_type.startswith(("a ", "an ")) else f"a value of type {bad_type}"
        raise AssertionError(f"returned {described}, which tests do not accept")
    compare = step["compare"]
    if compare["kind"] == "json":
        same = _json_equal(out, step["expected"])
    else:
        same = _evalplus_equal(out, step["expected"], compare, step["args"])
    if not same:
        raise AssertionError(f"wrong result {_short_repr(out)}, expected {_short_repr(step['expected'])}")


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _run_io(step: dict, code, seconds: float, state: _HarnessState) -> tuple[bool, str]:
    """Run the program as ``__main__`` on the step's stdin and compare its stdout."""
    if code is None:
        return False, "program does not compile"
    out = _capture(max(state.limits["output_bytes"], 4 * len(step["output"])))
    saved = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr, sys.stdin = out, _capture(state.limits["output_bytes"]), _stdin_stream(step["input"])
    state.stdin_text = step["input"]
    try:
        ok, err = _timed(lambda: _exec_main(code, builtins), seconds)
    finally:
        sys.stdout, sys.stderr, sys.stdin = saved
        state.stdin_text = None
    if not ok:
        return False, err
    if outputs_match(_captured_text(out), step["output"]):
        return True, ""
    return False, f"wrong output {_short_repr(_captured_text(out)[:200])}, expected {_short_repr(step['output'])}"


def _exec_main(code, builtins_module) -> None:
    """Execute the program as a script; ``sys.exit(0)``/``exit()`` count as a normal end."""
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins_module})
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    finally:
        sys.stdout.flush()


_STEP_RUNNERS = {"exec": _run_exec, "pytest": _run_pytest, "call": _run_call}
