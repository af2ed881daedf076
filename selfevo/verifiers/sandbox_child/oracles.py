"""The oracles of call and io steps: the types a call's result may hold, EvalPlus's and LiveCodeBench's comparisons,
and stdout matching. They compare values the judge's rules let through (:func:`_foreign_type`), in Python written
here, so that patching a library (numpy) cannot change them.
"""
from __future__ import annotations

from decimal import Decimal as _Decimal
from math import isinf as _isinf
from math import pow as _pow

from .judge import _HEAPTYPE, _SCALAR_IDS, _TYPE_FLAGS, _TYPE_NAME, _class_offence, _is_object_array

def _types_in(value, budget: int = 100_000) -> set:
    """All types occurring in a (trusted, expected) value."""
    found, stack = set(), [value]
    while stack and budget > 0:
        item = stack.pop()
        budget -= 1
        found.add(type(item))
        stack.extend(_children(item))
    return found


def _children(value) -> list:
    if isinstance(value, dict):
        return list(value.keys()) + list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return []


def _foreign_type(value, trusted: set, budget: int = 10_000_000) -> str:
    """Describe the first object in ``value`` whose class overrides behaviour in Python code, else "".

    A class counts as foreign when some heap class in its MRO defines a special method (``__eq__``, ``__iter__``,
    ``__len__``, ...) that is not that class's own C-level slot: a Python function, a lambda, or another
    class's slot (``__eq__ = int.__ne__``). That is how a returned object could fake equality. C types (built-in
    or extension, e.g. ``re.Match``), plain subclasses that override nothing relevant (namedtuples) and types
    occurring in the expected value are accepted.
    """
    stack, verdicts, trusted_ids = [value], {}, set(map(id, trusted))
    while stack:
        if budget <= 0:
            return "a value too large to check"
        item = stack.pop()
        budget -= 1
        kind = type(item)
        if id(kind) not in trusted_ids and _TYPE_FLAGS(kind) & _HEAPTYPE:
            if id(kind) not in verdicts:
                verdicts[id(kind)] = _python_override(kind)
            if verdicts[id(kind)]:
                return f"{_TYPE_NAME(kind)} (it overrides {verdicts[id(kind)]})"
        if _is_object_array(item, kind):
            return "an object array"
        children = _children(item)
        if children and not set(map(id, map(type, children))) <= _SCALAR_IDS:  # else: plain scalars, all fine
            stack.extend(children)
    return ""


def _python_override(cls: type) -> str:
    """``Class.name`` of the first attribute through which a class in ``cls``'s MRO written in Python decides how
    instances behave, or "" (see :func:`_class_offence`; no class is believed here)."""
    return _class_offence(cls, lambda klass: False)


def _json_equal(out, expected) -> bool:
    """LiveCodeBench functional comparison: tuples count as lists, then plain equality."""
    return bool(_tuples_to_lists(out) == expected)


def _tuples_to_lists(value):
    if isinstance(value, (list, tuple)):
        return [_tuples_to_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _tuples_to_lists(v) for k, v in value.items()}
    return value


def _evalplus_equal(out, expected, compare: dict, args: list) -> bool:
    """EvalPlus's output oracle: exact match, its special cases, then a float tolerance."""
    mode, atol = compare.get("mode", "exact"), compare.get("atol", 0) or 0
    if mode == "poly":
        return abs(_poly(*args, out)) <= atol
    exact = _special_match(out, expected, mode, compare, atol)
    if atol == 0 and _is_floats(expected):
        atol = 1e-6
    if exact or atol == 0:
        return bool(exact)
    return _close(out, expected, atol)


def _special_match(out, expected, mode: str, compare: dict, atol: float):
    """The exact-match part of the oracle, including EvalPlus's per-task special cases."""
    if mode == "set":
        return set(out) == set(expected)
    if mode == "not_none":
        return out == expected if isinstance(out, bool) else expected == (out is not None)
    exact = out == expected
    if mode == "always":
        return True
    if mode == "alt":
        return exact or out == compare.get("alt")
    if mode == "alt_close":
        return exact or abs(out - compare.get("alt")) <= atol
    return exact


def _close(out, expected, atol: float) -> bool:
    """``np.allclose(out, expected, rtol=1e-7, atol)`` after EvalPlus's type and length checks.

    Written in Python rather than calling numpy, so code under test cannot monkey-patch the comparison.
    """
    if type(out) is not type(expected):
        return False
    return _allclose(out, expected, atol, 1e-07)


def _allclose(a, b, atol: float, rtol: float) -> bool:
    """Element-wise ``|a - b| <= atol + rtol * |b|`` over equal-shaped nested lists/tuples of numbers."""
    if isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and len(a) == len(b)
                and all(_allclose(x, y, atol, rtol) for x, y in zip(a, b)))
    numbers = (int, float, complex)
    if not (isinstance(a, numbers) and isinstance(b, numbers)):
        return False
    if isinstance(a, complex) or isinstance(b, complex):
        return abs(a - b) <= atol + rtol * abs(b)
    if _isinf(a) or _isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def _is_floats(value) -> bool:
    """EvalPlus's test for float outputs: a float, or a non-empty list/tuple of floats."""
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, float) for v in value)
    return type(value).__name__ == "ndarray" and str(getattr(value, "dtype", "")) in ("float64", "float32")


def _poly(coefficients: list, x: float) -> float:
    """Value of the polynomial with ``coefficients`` (lowest degree first) at ``x``."""
    return sum(c * _pow(x, i) for i, c in enumerate(coefficients))


def outputs_match(got: str, expected: str) -> bool:
    """Stdout comparison: line by line after stripping; tokens may differ in numeric spelling (1.0 vs 1)."""
    got_lines = [line.strip() for line in got.strip().splitlines()]
    want_lines = [line.strip() for line in expected.strip().splitlines()]
    if got_lines == want_lines:
        return True
    if len(got_lines) != len(want_lines):
        return False
    return all(_tokens_match(g.split(), w.split()) for g, w in zip(got_lines, want_lines))


def _tokens_match(got: list[str], want: list[str]) -> bool:
    if len(got) != len(want):
        return False
    return all(g == w or _same_number(g, w) for g, w in zip(got, want))


def _same_number(a: str, b: str) -> bool:
    try:
        return _Decimal(a) == _Decimal(b)
    except (ArithmeticError, ValueError):  # decimal.InvalidOperation is an ArithmeticError
        return False
