"""What decides a test: the judge (:class:`_Judge`) that instrumented test code calls to compare, truth-test and
vet values, on plain data (:class:`_Reduction`), and the rule for which classes it believes (:func:`_class_offence`).
"""
from __future__ import annotations

import collections
import operator
import sys
import types

# Test code (exec steps; the pytest and ``check`` functions they define run it too) is rewritten before the program
# is loaded (``instrument._Instrument``), so that what decides a test is computed by the judge (``_Judge``) on values
# the program does not control: comparisons ``a == b``, ``!=``, ``<``, ``in``... become ``_selfevo_cmp(op, a, b)``
# (chains: ``_selfevo_chain``), on both sides reduced to plain built-in data first (``_Reduction``); truth tests
# (``assert x``, ``if``, ``while``, ``not x``...) become ``_selfevo_truth(x)``; calls ``f(x)`` become
# ``_selfevo_call(f, x)``, whose result is vetted like a compared value; ``with cm:`` becomes
# ``with _selfevo_ctx(cm):``; a class the test defines gets ``@_selfevo_trust``. Test code is compiled with
# ``optimize=0``: ``assert`` always runs. ``docs/sandbox.md`` ("What decides a test") states the rules in full.

_H_CMP, _H_CHAIN, _H_TRUTH, _H_CALL, _H_CTX, _H_TRUST = ("_selfevo_cmp", "_selfevo_chain", "_selfevo_truth",
                                                        "_selfevo_call", "_selfevo_ctx", "_selfevo_trust")
_AUDIT, _VOUCH = sys.audit, "selfevo.vouch"  # how the judge tells the audit hook what it believes (see the hook)
_HEAPTYPE = 1 << 9
_MAX_DEPTH = 200  # nesting depth of a value the harness will reduce to plain data
_PLAIN_BUDGET = 5_000_000  # objects the harness will inspect in one value
_SCALAR_TYPES = (type(None), bool, int, float, complex, str, bytes)
_SCALAR_IDS = frozenset(map(id, _SCALAR_TYPES))
_CONTAINER_IDS = frozenset(map(id, (list, tuple, dict, set, frozenset, bytearray)))
_VALUE_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
_VALUE_BASE_IDS = frozenset(map(id, _VALUE_BASES))
_AS_BASE = {  # an instance of a subclass -> the plain value of its built-in base (C code)
    id(int): int.__index__, id(float): float.__pos__, id(complex): complex.__pos__, id(str): str.__str__,
    id(bytes): lambda v: bytes(memoryview(v)), id(bytearray): lambda v: bytearray(memoryview(v)),
    id(list): lambda v: list(list.__iter__(v)), id(tuple): lambda v: tuple(tuple.__iter__(v)),
    id(dict): lambda v: dict(dict.items(v)), id(set): lambda v: set(set.__iter__(v)),
    id(frozenset): lambda v: frozenset(frozenset.__iter__(v))}
_TYPE_DICT = type.__dict__["__dict__"].__get__  # a class's real namespace, whatever its metaclass claims
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_TYPE_NAME = type.__dict__["__name__"].__get__
_TYPE_MODULE = type.__dict__["__module__"].__get__
# C-level attributes a class defines for itself (``__dict__``/``__weakref__``/slot members; the slots of a C heap type
# such as ``re.Match``): when their ``__objclass__`` is the class, they are C code, not the program's
_SLOT_DESCRIPTOR_IDS = frozenset(map(id, (types.GetSetDescriptorType, types.MemberDescriptorType,
                                          types.WrapperDescriptorType, types.MethodDescriptorType,
                                          types.ClassMethodDescriptorType)))
_TUPLEGETTER_ID = id(type(collections.namedtuple("_Pair", "a b").a))  # a namedtuple field (C, honest)
_TRUTH_DUNDERS = frozenset({"__bool__", "__len__"})
_CONTEXT_DUNDERS = frozenset({"__enter__", "__exit__"})
_DICT_VIEW_IDS = frozenset(map(id, (type({}.keys()), type({}.items()))))
# C types whose comparison runs the comparison of arbitrary objects inside them: refused in comparisons
_OPAQUE_CONTAINER_IDS = frozenset(map(id, (
    type({}.values()), types.SimpleNamespace, slice, types.MappingProxyType, types.CellType, types.GenericAlias,
    types.UnionType, __import__("weakref").ref, __import__("weakref").ProxyType,
    __import__("weakref").CallableProxyType)))
_ZONED_IDS = frozenset(map(id, (__import__("datetime").datetime, __import__("datetime").time)))  # may carry a tzinfo
_PROXY_IDS = frozenset(map(id, (__import__("weakref").ProxyType, __import__("weakref").CallableProxyType)))
_COMPARE_OPS = {
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
    "GtE": operator.ge, "In": lambda a, b: operator.contains(b, a), "NotIn": lambda a, b: not operator.contains(b, a)}


# Special methods and attributes that cannot make a value lie about what it is (construction, display, pickling,
# attribute plumbing, calling, context management -- ``with`` is guarded separately -- and class metadata). Any
# other one defined by a class the program wrote (``__eq__``, ``__hash__``, ``__bool__``, ``__len__``, ``__iter__``,
# ``__contains__``, ``__getitem__``, arithmetic, conversions, ``__class__``, ``__getattr__``...) makes its
# instances untrusted.
_BENIGN_DUNDERS = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__init__", "__new__",
    "__repr__", "__str__", "__format__", "__init_subclass__", "__annotations__", "__match_args__", "__getnewargs__",
    "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__", "__sizeof__", "__class_getitem__", "__orig_bases__",
    "__parameters__", "__firstlineno__", "__static_attributes__", "__getnewargs_ex__", "__getstate__",
    "__setstate__", "__setattr__", "__delattr__", "__dir__", "__call__", "__del__", "__enter__", "__exit__",
    "__aenter__", "__aexit__", "__set_name__", "__get__", "__set__", "__delete__", "__post_init__",
    "__dataclass_fields__", "__dataclass_params__", "__abstractmethods__", "__fspath__", "__type_params__"})


class UntrustedValue(BaseException):
    """An instrumented comparison, truth test or call refused a value whose behaviour is the program's own code.

    A ``BaseException``: test code catching ``Exception`` (e.g. ``pytest.raises(Exception)``) does not turn it into
    a pass; every refusal is also counted, and a step with one fails even if something caught it.
    """


class AccessDenied(RuntimeError, AttributeError, ValueError):
    """Raised by the harness's audit hook. The bases let library code that probes frames (``logging``,
    ``collections.namedtuple``, ``typing``) fall back as it does on interpreters without frame access."""


def _class_offence(cls: type, believed, names: frozenset | None = None) -> str:
    """``Class.name`` of the first attribute through which a class the program wrote decides how ``cls`` instances
    behave, else "".

    Classes that are not heap types (C code) and classes ``believed(klass)`` says to trust are skipped. Otherwise
    an attribute counts when it is a special method (``__eq__``, ``__iter__``, ``__len__``, ...; with ``names``,
    only those) other than the benign ones (``__init__``, ``__repr__``, ...), whatever its value: a function, a
    callable object, another class's slot (``__eq__ = int.__ne__``); only a class's own ``__dict__``/``__slots__``
    descriptors are exempt. On a subclass of a built-in value type (``int``, ``str``, ``list``, ...), a method
    shadowing one of the base type's (``startswith``, ``count``, ``keys``) counts too: the object would pose as a
    plain value while answering differently.
    """
    mro = _TYPE_MRO(cls)
    base = None
    if names is None:
        base = next((b for b in mro if id(b) in _VALUE_BASE_IDS), None)
    for klass in mro:
        if not _TYPE_FLAGS(klass) & _HEAPTYPE or believed(klass):
            continue
        for name, attr in _TYPE_DICT(klass).items():
            if type(name) is not str:
                return f"{_TYPE_NAME(klass)}.<an attribute whose name is not a str>"
            if name[:2] == "__" and name[-2:] == "__" and len(name) > 4:
                if names is not None:
                    if name in names:
                        return f"{_TYPE_NAME(klass)}.{name}"
                    continue
                if name in _BENIGN_DUNDERS or (name == "__hash__" and attr is None):
                    continue
                if id(type(attr)) in _SLOT_DESCRIPTOR_IDS and attr.__objclass__ is klass:
                    continue
                return f"{_TYPE_NAME(klass)}.{name}"
            if base is not None and id(type(attr)) != _TUPLEGETTER_ID and hasattr(base, name):
                return f"{_TYPE_NAME(klass)}.{name}"
    return ""


def _is_object_array(value, kind: type) -> bool:
    """A numpy array (or scalar) holding arbitrary Python objects, whose comparison would run theirs."""
    module = _TYPE_MODULE(kind)
    if type(module) is not str or not module.startswith("numpy"):
        return False
    return bool(getattr(getattr(value, "dtype", None), "hasobject", False))


def _fingerprint(mapping, to_tuple=tuple, apply=map, ident=id) -> tuple:
    """Identities of a namespace's keys and values: equal fingerprints mean nothing was rebound. (The defaults pin
    builtins: see "snapshot and restore" below.)"""
    return to_tuple(apply(ident, mapping)), to_tuple(apply(ident, mapping.values()))


class _GuardedContext:
    """Runs a context manager the program wrote, but its ``__exit__`` may only suppress an ``Exception`` that is
    not an ``AssertionError``, and only on a plain truth value."""

    __slots__ = ("_manager", "_enter", "_exit", "_truth")

    def __init__(self, manager, truth):
        kind = type(manager)
        self._manager, self._enter, self._exit, self._truth = manager, kind.__enter__, kind.__exit__, truth

    def __enter__(self):
        return self._enter(self._manager)

    def __exit__(self, kind, value, traceback):
        verdict = self._exit(self._manager, kind, value, traceback)
        if kind is None or not issubclass(kind, Exception) or issubclass(kind, AssertionError):
            return False
        return self._truth(verdict)


class _Judge:
    """The helpers instrumented test code calls (see above), and what they trust.

    ``library``: id -> (class, fingerprint of its namespace) for classes that existed before the program ran;
    ``test_classes``: the same for classes the test code defines (filled by ``_selfevo_trust``); ``constructed``:
    objects the test code made by calling a class the program wrote (id -> object); ``entry_ids``: ids of the task's
    entry points (calling one never counts as constructing an object); ``helpers``: name -> bound method, for the
    test namespace.

    The helpers are handed to test code, so a program given a test function can reach this object (``__globals__``,
    then ``__self__``), and can call them. So every entry the judge adds to ``test_classes`` or ``constructed``, and
    every refusal, is first told to the audit hook (``_VOUCH`` events), which keeps its own copy where no code can
    reach it and refuses an entry (which is then not made) unless test code asked for it; after every step the
    tables are compared with that copy (``library`` with a copy taken by :func:`_watch`) and restored. Its
    attributes are never rebound after loading, so the harness snapshots them and its class (:func:`_watch`) and
    restores both after every step; its methods are restored with the harness's classes.
    """

    __slots__ = ("library", "test_classes", "constructed", "entry_ids", "helpers")

    def __init__(self, library: dict):
        self.library = library
        self.test_classes: dict[int, tuple] = {}
        self.constructed: dict[int, object] = {}
        self.entry_ids: frozenset[int] = frozenset()
        self.helpers = {_H_CMP: self.compare, _H_CHAIN: self.chain, _H_TRUTH: self.truth, _H_CALL: self.call,
                        _H_CTX: self.ctx, _H_TRUST: self.trust}

    def believed(self, klass) -> bool:
        """Whether ``klass`` existed before the program ran, or the test code defined it, and is unmodified."""
        entry = self.library.get(id(klass)) or self.test_classes.get(id(klass))
        return entry is not None and entry[0] is klass and _fingerprint(_TYPE_DICT(klass)) == entry[1]

    def refuse(self, message: str):
        """Count a refusal (in the audit hook, where the program cannot uncount it); raise :class:`UntrustedValue`."""
        _AUDIT(_VOUCH, "refusal", 0, None)
        raise UntrustedValue(message)

    def reduce(self, value, purpose: str):
        """``value`` as plain data (copied) with believable objects kept as they are; refuse anything else."""
        return _Reduction(self, purpose).run(value)

    def compare(self, op: str, a, b):
        """``_selfevo_cmp``: one comparison, on plain data."""
        if op == "Is":
            return a is b
        if op == "IsNot":
            return a is not b
        return _COMPARE_OPS[op](self.reduce(a, "compared"), self.reduce(b, "compared"))

    def chain(self, ops: tuple, left, *thunks):
        """``_selfevo_chain``: a chained comparison, its right-hand sides evaluated lazily (``thunks``)."""
        result = True
        for op, thunk in zip(ops, thunks):
            right = thunk()
            result = self.compare(op, left, right)
            if not self.truth(result):
                return result
            left = right
        return result

    def truth(self, x) -> bool:
        """``_selfevo_truth``: the truth of plain data, or of an object whose truth is not the program's code."""
        kind = type(x)
        if kind is bool:
            return x
        key = id(kind)
        if key in _SCALAR_IDS or key in _CONTAINER_IDS:
            return bool(x)
        if key in _PROXY_IDS:
            self.refuse("tested the truth of a weak proxy, whose truth is its referent's")
        bad = _class_offence(kind, self.believed, _TRUTH_DUNDERS)
        if bad and self.constructed.get(id(x)) is not x:
            self.refuse(f"tested the truth of a {_TYPE_NAME(kind)}, which overrides {bad}: its truth value is the "
                        "program's own code")
        if _is_object_array(x, kind):
            self.refuse("tested the truth of an array of Python objects")
        return bool(x)

    def call(self, function, /, *args, **kwargs):
        """``_selfevo_call``: call ``function`` and vet what it returns (``all``/``any``/``map``/``filter`` through
        the judge's own truth test and calls)."""
        if (function is all or function is any) and len(args) == 1 and not kwargs:
            wanted = function is any
            for item in args[0]:
                if self.truth(item) is wanted:
                    return wanted
            return not wanted
        if (function is map or function is filter) and args and args[0] is not None:
            checked = args[0]
            args = (lambda *a, **k: self.call(checked, *a, **k),) + args[1:]
        try:
            result = function(*args, **kwargs)
        except StopIteration:
            if function is next or getattr(function, "__name__", "") == "__next__":
                raise
            raise RuntimeError("a call raised StopIteration (it would silently end the iteration around it)") \
                from None
        if type(result) is function and id(function) not in self.entry_ids:
            if _class_offence(function, self.believed):  # remember it: it may be passed on and truth-tested
                key = id(result)  # the same int object in both tables: they are compared by identity
                try:
                    _AUDIT(_VOUCH, "object", key, result)
                    self.constructed[key] = result
                except AccessDenied:  # not asked by test code (e.g. a map(cls, ...) the program iterates)
                    pass
            return result
        self.reduce(result, "returned")
        return result

    def ctx(self, manager):
        """``_selfevo_ctx``: ``manager`` itself, or guarded when the program wrote its ``__enter__``/``__exit__``."""
        if not _class_offence(type(manager), self.believed, _CONTEXT_DUNDERS):
            return manager
        return _GuardedContext(manager, self.truth)

    def trust(self, cls):
        """``_selfevo_trust``: believe a class the test code defines (while its namespace is unmodified)."""
        if isinstance(cls, type):
            key, entry = id(cls), (cls, _fingerprint(_TYPE_DICT(cls)))
            try:
                _AUDIT(_VOUCH, "class", key, entry)
                self.test_classes[key] = entry
            except AccessDenied:  # not asked by test code: not believed
                pass
        return cls


class _Reduction:
    """One value being reduced to plain data for :meth:`_Judge.reduce`, within the depth and object budgets."""

    __slots__ = ("judge", "purpose", "verdicts", "on_path", "budget")

    def __init__(self, judge: _Judge, purpose: str):
        self.judge, self.purpose = judge, purpose  # purpose: "compared" or "returned" (messages and rules)
        self.verdicts: dict[int, str] = {}  # id(class) -> its offence ("" if none)
        self.on_path: set[int] = set()  # ids of the containers being walked (a cycle refuses the value)
        self.budget = _PLAIN_BUDGET

    def run(self, value):
        """The reduced value."""
        try:
            return self.walk(value, 0)
        except RecursionError:
            self.refuse("a value too deeply nested to check")

    def refuse(self, what: str):
        """Refuse the value (through the judge, which counts refusals): "<purpose> <what>"."""
        self.judge.refuse(f"{self.purpose} {what}")

    def offence(self, kind) -> str:
        """How the program's code decides the behaviour of ``kind`` instances ("" if it does not)."""
        key = id(kind)
        if key not in self.verdicts:
            self.verdicts[key] = _class_offence(kind, self.judge.believed)
        return self.verdicts[key]

    def container(self, x, kind, depth):
        """A copy of an exact built-in container with reduced contents."""
        key = id(x)
        if key in self.on_path:
            self.refuse("a value that contains itself")
        elements = x.values() if kind is dict else x
        kinds = set(map(id, map(type, x)))
        if kind is dict:
            kinds |= set(map(id, map(type, elements)))
        self.budget -= len(x)
        if kinds <= _SCALAR_IDS:
            return x if kind is tuple or kind is frozenset else x.copy()
        self.on_path.add(key)
        try:
            if kind is dict:
                return {self.walk(k, depth + 1): self.walk(v, depth + 1) for k, v in x.items()}
            items = [self.walk(item, depth + 1) for item in x]
            return items if kind is list else kind(items)
        finally:
            self.on_path.discard(key)

    def walk(self, x, depth: int):
        """``x`` reduced: scalars as they are, containers copied, believable objects kept, anything else refused."""
        kind = type(x)
        key = id(kind)
        if key in _SCALAR_IDS:
            return x
        self.budget -= 1
        if self.budget < 0:
            self.refuse("a value too large to check")
        if depth > _MAX_DEPTH:
            self.refuse(f"a value nested more than {_MAX_DEPTH} levels deep")
        if key in _CONTAINER_IDS:
            return self.container(x, kind, depth)
        bad = self.offence(kind)
        if bad and self.purpose == "returned" and self.judge.constructed.get(id(x)) is x:
            return x  # passing on an object the test constructed (its class is what is tested)
        if bad:
            self.refuse(f"a value of type {_TYPE_NAME(kind)}, which overrides {bad}: its behaviour is the program's "
                        "own code")
        base = next((b for b in _TYPE_MRO(kind) if id(b) in _VALUE_BASE_IDS), None)
        if base is not None:
            return self.walk(_AS_BASE[id(base)](x), depth + 1)
        if self.purpose == "compared":
            if key in _DICT_VIEW_IDS:
                return set(self.walk(item, depth + 1) for item in x)
            if kind is collections.deque:
                return collections.deque(self.walk(item, depth + 1) for item in x)
            if key in _OPAQUE_CONTAINER_IDS:
                self.refuse(f"a {_TYPE_NAME(kind)}, whose comparison would run code inside it; compare plain values "
                            "instead")
        if _is_object_array(x, kind):
            self.refuse("an array of Python objects")
        if key in _ZONED_IDS and x.tzinfo is not None:
            zone = type(x.tzinfo)
            if _TYPE_FLAGS(zone) & _HEAPTYPE and not self.judge.believed(zone):  # its utcoffset() decides comparisons
                self.refuse(f"a {_TYPE_NAME(kind)} whose tzinfo is a {_TYPE_NAME(zone)} the program wrote")
        return x
