"""Preparing the tests before the program runs: their code instrumented (:class:`_Instrument`: comparisons, truth
tests, calls, ``with`` and class definitions go through the judge's helpers) and compiled, the modules they import
loaded, the task prefix's own names, and the namespace the tests run in.
"""
from __future__ import annotations

import ast
import sys

from .bounded import _describe, _guarded
from .guard import _BLOCKED_MODULES
from .judge import _H_CALL, _H_CHAIN, _H_CMP, _H_CTX, _H_TRUST, _H_TRUTH

_FRAME_BOUND_CALLS = frozenset({"super", "locals", "vars", "globals", "dir", "eval", "exec", "breakpoint"})
_AST_OPS = {ast.Eq: "Eq", ast.NotEq: "NotEq", ast.Lt: "Lt", ast.LtE: "LtE", ast.Gt: "Gt", ast.GtE: "GtE", ast.Is: "Is",
            ast.IsNot: "IsNot", ast.In: "In", ast.NotIn: "NotIn"}


class _Instrument(ast.NodeTransformer):
    """Rewrite test code to use the judge's helpers (see the comment at the top of ``judge``)."""

    @staticmethod
    def _helper(name: str, args: list, keywords: list | None = None) -> ast.Call:
        return ast.Call(ast.Name(name, ast.Load()), args, keywords or [])

    def _truth(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(node.op, [self._truth(value) for value in node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return node  # its operand is a truth test already
        return self._helper(_H_TRUTH, [node])

    def _test_of(self, node):
        self.generic_visit(node)
        node.test = self._truth(node.test)
        return node

    visit_Assert = visit_If = visit_While = visit_IfExp = _test_of

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.ifs = [self._truth(test) for test in node.ifs]
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            node.operand = self._truth(node.operand)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        ops = [_AST_OPS[type(op)] for op in node.ops]
        if len(ops) == 1:
            return self._helper(_H_CMP, [ast.Constant(ops[0]), node.left, node.comparators[0]])
        thunks = [ast.Lambda(ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                                           kwarg=None, defaults=[]), comparator) for comparator in node.comparators]
        return self._helper(_H_CHAIN, [ast.Constant(tuple(ops)), node.left, *thunks])

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_BOUND_CALLS:
            return node
        return self._helper(_H_CALL, [node.func, *node.args], node.keywords)

    def visit_ClassDef(self, node):
        self.generic_visit(node)
        node.decorator_list.insert(0, ast.Name(_H_TRUST, ast.Load()))
        return node

    def visit_With(self, node):
        self.generic_visit(node)
        for item in node.items:
            item.context_expr = self._helper(_H_CTX, [item.context_expr])
        return node


def _prepare_tests(steps: list[dict]) -> list[str]:
    """Instrument and compile every exec step's test code now, before the program runs; return what it imports."""
    imported: list[str] = []
    for step in steps:
        if step["kind"] != "exec":
            continue
        try:
            tree = ast.parse(step["code"])
            imported += _imported_modules(tree)
            step["star_import"] = any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
                                      for n in ast.walk(tree))
            tree = ast.fix_missing_locations(_Instrument().visit(tree))
            step["compiled"] = compile(tree, f"<test: {step['label']}>", "exec", dont_inherit=True, optimize=0)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            step["compile_error"] = f"the test code could not be compiled: {_describe(exc)}"
    return imported


def _imported_modules(tree: ast.AST) -> list[str]:
    """Absolute module names an AST imports (``from m import x`` also tries ``m.x``, which may be a submodule)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
    return names


def _preimport(names: list[str], limits: dict) -> None:
    """Import the modules the tests use before the program runs, so they are in the snapshot the harness restores
    (a program cannot hand the tests a patched ``math`` or ``pytest``)."""
    def load():
        for name in dict.fromkeys(names):
            if name.partition(".")[0] in ("solution", *_BLOCKED_MODULES) or name in sys.modules:
                continue
            try:
                __import__(name)
            except BaseException:  # noqa: BLE001 - a missing or broken module fails the test that imports it
                pass

    _guarded(load, limits["load_s"], limits["output_bytes"])


def _is_stub(node: ast.stmt) -> bool:
    """A function whose body is only docstrings, ``pass``, ``...`` and imports: the part the program is to write."""
    return all(isinstance(s, (ast.Pass, ast.Import, ast.ImportFrom))
               or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in node.body)


def _trusted_prefix(prefix: str, builtins_dict: dict, limits: dict) -> dict:
    """Names the task's prefix (prompt, imports) binds, from running its imports, assignments and complete functions
    now, before the program: the tests see these, not the program's redefinitions of them (a program cannot replace
    a helper such as HumanEval's ``poly``, or a module such as ``math``, that the tests call)."""
    try:
        tree = ast.parse(prefix)
    except (SyntaxError, ValueError):
        try:
            tree = ast.parse("\n".join(line for line in prefix.splitlines() if line.startswith(("import ", "from "))))
        except (SyntaxError, ValueError):
            return {}
    scope = {"__builtins__": builtins_dict, "__name__": "solution"}
    kinds = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.AsyncFunctionDef)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = [n for n in tree.body if isinstance(n, kinds) and not (isinstance(n, functions) and _is_stub(n))]

    def run():
        for node in nodes:
            try:
                exec(compile(ast.Module([node], []), "<prefix>", "exec", dont_inherit=True), scope)
            except Exception:  # noqa: BLE001 - a statement that does not run alone (it needs the program) is skipped
                pass

    if nodes:
        _guarded(run, limits["load_s"], limits["output_bytes"])
    return {k: v for k, v in scope.items() if type(k) is str and not (k.startswith("__") and k.endswith("__"))}


def _call_targets(steps: list[dict]) -> set[str]:
    """The names call steps start from (``f`` in ``f``, ``Solution`` in ``Solution().f``): the program's, whatever
    they are called (MBPP+'s ``sum``)."""
    names = set()
    for step in steps:
        if step["kind"] == "call":
            head = step["target"].split("(", 1)[0].split(".", 1)[0].strip()
            if head.isidentifier():
                names.add(head)
    return names


def _test_namespace(module, trusted: dict, builtins_dict: dict, helpers: dict, keep: set) -> dict:
    """The namespace tests run in: the program's module globals, minus anything shadowing a builtin (the tests' own
    ``abs``, ``len``, ``isinstance`` ... are the real ones), plus the prefix's own names, a pristine copy of the
    builtins, and the harness helpers."""
    namespace = {}
    for name, value in module.__dict__.items():
        if type(name) is not str or name == "__builtins__":
            continue
        if name in builtins_dict and name not in keep and name not in ("__name__", "__doc__", "__package__",
                                                                       "__loader__", "__spec__"):
            continue
        namespace[name] = value
    namespace.update({k: v for k, v in trusted.items() if k not in keep})
    namespace.update({"__builtins__": builtins_dict, "__name__": "__selfevo_tests__"})
    namespace.update(helpers)
    return namespace
