"""What the program may not change: the snapshot taken before the program runs (:func:`_take_snapshot`), restored
and checked after loading it and after every step (:func:`_check_integrity`), and the audit hook
(:func:`_install_audit_hook`) that keeps code from the routes around them.
"""
from __future__ import annotations

import _thread
import gc
import os
import signal
import sys
import time
import types

from .bounded import _HarnessState
from .guard import _BLOCKED_MODULES
from .judge import _HEAPTYPE, _TYPE_DICT, _TYPE_FLAGS, _VOUCH, AccessDenied, _fingerprint, _Judge

# The snapshot is taken before the program runs (``_take_snapshot``); after loading it and after every step,
# ``_check_integrity`` restores it and reports what changed. By then the program may have rebound any of the harness's
# globals (those of each of its modules, this one's included) or patched its classes (a harness function's
# ``__globals__`` leads there), so the functions from ``_restore_namespace`` to ``_watch`` look nothing up there: what
# they call is bound as positional defaults (the parameters after the documented ones, never passed), evaluated when
# this module is loaded. The audit hook refuses to replace a harness function's ``__defaults__`` (a tuple) or
# ``__code__``; keyword-only defaults would not do, as ``__kwdefaults__`` is a dict code could edit in place. The
# snapshot is a ``SimpleNamespace`` (a C type nothing can patch) held only in ``_run_all``'s locals and the audit hook's
# closure, which no code can reach (frames are refused). The harness's tables are plain dicts, restored like the rest: a
# ``MappingProxyType`` would not protect them, as comparing one hands the dict inside to the other operand's ``__eq__``.

_CORE_MODULES = frozenset({"builtins", "sys", "os", "posix", "io", "_io", "signal", "time", "math", "json",
                           "json.encoder", "_json", "decimal", "_decimal", "threading", "_thread", "operator",
                           "collections", "types", "ast", "gc"})
_QUIET_KEYS = {  # restored, but changing them is ordinary (not reported)
    "sys": frozenset({"stdout", "stderr", "stdin", "argv", "last_type", "last_value", "last_traceback", "ps1",
                      "ps2", "__warningregistry__", "__annotations__"}),
    "": frozenset({"__warningregistry__", "__annotations__"})}
_LAZY_CLASS_KEYS = frozenset({"__annotations__"})  # reading ``cls.__annotations__`` creates it (Python < 3.14)


def _take_snapshot(harness: list, state: _HarnessState) -> types.SimpleNamespace:
    """Record, now (before the program runs), every module's namespace, every class they define, the harness's
    globals (``harness``: those of each of its modules), tables (its dicts, the job's limits and ``state``) and
    classes, ``sys.modules``, signal handlers, import hooks and the number of threads.

    ``library`` (id -> (class, fingerprint of its namespace)) is what the judge believes; ``functions`` holds the
    ids of the functions that exist now (the audit hook fixes their code and defaults); ``watched`` is filled by
    :func:`_watch`; ``compromised`` holds why every later step fails, once a thread outlived a step;
    ``classes_vouched``, ``objects_vouched`` and ``refusals`` are the audit hook's copies of what the judge believes
    (see :class:`_Judge`)."""
    modules, library = _snapshot_modules()
    harness_classes = _snapshot_harness_classes(harness, library)
    classes = [[cls, dict(_TYPE_DICT(cls)), _fingerprint(_TYPE_DICT(cls))] for cls, _ in library.values()]
    namespaces = [entry[3] for entry in modules] + [entry[1] for entry in classes] + harness
    return types.SimpleNamespace(
        modules=modules, classes=classes, library=library, harness_classes=harness_classes,
        functions=_existing_functions(namespaces),
        harness=[[namespace, dict(namespace), _fingerprint(namespace)] for namespace in harness],
        saved_modules={entry[0]: entry[1] for entry in modules}, handlers=_signal_handlers(),
        meta_path=sys.meta_path, saved_meta_path=list(sys.meta_path), path_hooks=sys.path_hooks,
        saved_path_hooks=list(sys.path_hooks), threads=_thread._count(), watched=[], compromised=[""],
        tables=_harness_tables(harness, state), classes_vouched={}, objects_vouched={}, refusals=[0])


def _harness_tables(harness: list, state: _HarnessState) -> list:
    """``(name, table, saved copy)`` for every dict among the harness's globals (``_COMPARE_OPS``, ``_AS_BASE``,
    ``_STEP_RUNNERS``...), the job's limits and ``state``'s attributes: code reaching the harness (through any of
    its functions' ``__globals__`` or closures) could change them in place."""
    tables = [(name, value) for namespace in harness for name, value in namespace.items()
              if type(value) is dict and name != "__builtins__"]
    tables += [("limits", state.limits), ("state", vars(state))]
    return [(name, table, dict(table)) for name, table in tables]


def _snapshot_modules() -> tuple[list, dict]:
    """Every loaded module as ``[name, module, namespace, saved copy, fingerprint]``, and the classes each defines
    at top level as id -> (class, fingerprint of its namespace)."""
    modules, library = [], {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name == "__main__":
            continue
        namespace = vars(module)
        modules.append([name, module, namespace, dict(namespace), _fingerprint(namespace)])
        for value in list(namespace.values()):
            if (isinstance(value, type) and _TYPE_FLAGS(value) & _HEAPTYPE and id(value) not in library
                    and _TYPE_DICT(value).get("__module__") == name):
                library[id(value)] = (value, _fingerprint(_TYPE_DICT(value)))
    return modules, library


def _snapshot_harness_classes(harness: list, library: dict) -> set:
    """Add the harness's own classes (those each of its modules defines) to ``library``; return their ids."""
    ours = set()
    for namespace in harness:
        for value in list(namespace.values()):
            if isinstance(value, type) and _TYPE_FLAGS(value) & _HEAPTYPE and \
                    _TYPE_DICT(value).get("__module__") == namespace["__name__"]:
                library[id(value)] = (value, _fingerprint(_TYPE_DICT(value)))
                ours.add(id(value))
    return ours


def _existing_functions(namespaces: list) -> set:
    """Ids of the functions in ``namespaces`` (those of static and class methods and property getters included)."""
    functions = set()
    for namespace in namespaces:
        for value in namespace.values():
            kind = type(value)
            if kind is staticmethod or kind is classmethod:
                value = value.__func__
            elif kind is property:
                value = value.fget
            if type(value) is types.FunctionType:
                functions.add(id(value))
    return functions


def _signal_handlers() -> dict:
    """The current handler of every signal that has one."""
    handlers = {}
    for signum in signal.valid_signals():
        try:
            handlers[signum] = signal.getsignal(signum)
        except (OSError, ValueError):
            pass
    return handlers


def _restore_namespace(namespace, saved, entry, submodules_of="", fingerprint=_fingerprint, listed=list,
                       kind_of=type, text=str, module_type=types.ModuleType, modules_dict=sys.modules) -> str:
    """Make ``namespace`` (a dict) equal to ``saved`` again and store its fingerprint in ``entry[-1]``; return the
    first key that differed ("" if none). A submodule bound on its package (``submodules_of``) is ordinary."""
    if fingerprint(namespace) == entry[-1]:
        return ""
    changed, odd_keys = "", False
    for key in listed(namespace):
        if kind_of(key) is not text:
            odd_keys, changed = True, changed or "<a key that is not a str>"
        elif key not in saved:
            value = namespace[key]
            if submodules_of and kind_of(value) is module_type and \
                    modules_dict.get(submodules_of + "." + key) is value:
                continue  # an import of a submodule binds it on its package: ordinary
            del namespace[key]
            changed = changed or key
        elif namespace[key] is not saved[key]:
            namespace[key] = saved[key]
            changed = changed or key
    if odd_keys:
        kept = {key: value for key, value in namespace.items() if kind_of(key) is text}
        namespace.clear()
        namespace.update(kept)
    for key, value in saved.items():
        if key not in namespace:
            namespace[key] = value
            changed = changed or key
    entry[-1] = fingerprint(namespace)
    return changed


def _restore_class(entry, fingerprint=_fingerprint, type_dict=_TYPE_DICT, listed=list, kind_of=type, text=str,
                   lazy_keys=_LAZY_CLASS_KEYS, set_type_attr=type.__setattr__, del_type_attr=type.__delattr__) -> str:
    """Make a class's namespace (``entry``: [class, saved copy, fingerprint]) equal to the saved copy again; return
    the first attribute that differed ("" if none)."""
    cls, saved, print_ = entry
    current = type_dict(cls)
    if fingerprint(current) == print_:
        return ""
    changed = ""
    for key in listed(current):
        if kind_of(key) is text and key not in saved and key in lazy_keys:
            continue
        if kind_of(key) is not text or key not in saved:
            changed = changed or text(key)
            try:
                del_type_attr(cls, key)
            except (AttributeError, TypeError):
                pass
        elif current[key] is not saved[key]:
            changed = changed or key
            try:
                set_type_attr(cls, key, saved[key])
            except (AttributeError, TypeError):
                pass
    for key, value in saved.items():
        if key not in current:
            changed = changed or key
            try:
                set_type_attr(cls, key, value)
            except (AttributeError, TypeError):
                pass
    entry[-1] = fingerprint(type_dict(cls))
    return changed


def _restore_table(table, saved, fingerprint=_fingerprint) -> bool:
    """Make the dict ``table`` (keys of any type) equal to ``saved`` again; return whether it differed."""
    if fingerprint(table) == fingerprint(saved):
        return False
    table.clear()
    table.update(saved)
    return True


def _threads_problem(snapshot, count_threads=_thread._count, now=time.monotonic, sleep=time.sleep) -> str:
    """Why every step from now on fails: a thread the program started still runs 0.2 s after a step ("" if none)."""
    compromised = snapshot.compromised
    if compromised[0]:
        return compromised[0]
    deadline = now() + 0.2
    while count_threads() > snapshot.threads:
        if now() > deadline:
            compromised[0] = "a thread the program started is still running"
            return compromised[0]
        sleep(0.005)
    return ""


def _reset_process_hooks(snapshot, timers=(signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF),
                         setitimer=signal.setitimer, getsignal=signal.getsignal, setsignal=signal.signal,
                         set_wakeup_fd=signal.set_wakeup_fd, gc_callbacks=gc.callbacks) -> None:
    """Stop the interval timers; restore signal handlers, the wakeup fd, gc callbacks and the import hooks."""
    for which in timers:
        setitimer(which, 0)
    for signum, handler in snapshot.handlers.items():
        if getsignal(signum) is not handler:
            try:
                setsignal(signum, handler)
            except (OSError, ValueError, TypeError):
                pass
    set_wakeup_fd(-1)
    del gc_callbacks[:]
    snapshot.meta_path[:] = snapshot.saved_meta_path
    snapshot.path_hooks[:] = snapshot.saved_path_hooks


def _restore_watched(snapshot, restore=_restore_namespace, restore_table=_restore_table, kind_of=type,
                     set_class=object.__setattr__) -> str:
    """Restore what :func:`_watch` added: the helpers' names in the test namespace, the tests' builtins, the judge's
    class, attributes and tables; return the first change ("" if none)."""
    problem = ""
    for namespace, names, builtins_entry, judge, judge_class, slots, tables in snapshot.watched:
        for name, value in names.items():
            if namespace.get(name) is not value:
                namespace[name] = value
                problem = problem or f"the program changed the test helper {name}"
        changed = restore(builtins_entry[0], builtins_entry[1], builtins_entry)
        problem = problem or (changed and f"the program changed the tests' builtins ({changed})")
        if kind_of(judge) is not judge_class:  # assigned a class of the same layout: assigning back works too
            problem = problem or "the program changed a test helper's code"
            set_class(judge, "__class__", judge_class)
        for slot, value in slots:
            try:
                same = slot.__get__(judge) is value
            except AttributeError:  # deleted
                same = False
            if not same:
                problem = problem or "the program changed a test helper's code"
                slot.__set__(judge, value)
        for name, table, saved in tables:
            if restore_table(table, saved):
                problem = problem or f"the program changed a test helper's table ({name})"
    return problem


def _check_integrity(snapshot, scope: str, threads_problem=_threads_problem, reset_process_hooks=_reset_process_hooks,
                     restore=_restore_namespace, restore_class=_restore_class, restore_table=_restore_table,
                     restore_watched=_restore_watched, ident=id, core=_CORE_MODULES, quiet_keys=_QUIET_KEYS,
                     modules_dict=sys.modules) -> str:
    """Restore everything the snapshot holds; return the first change that could affect a verdict ("" if none).

    ``scope`` "full" (after test code: everything is checked), "core" (after a call or stdin/stdout step: the harness
    and the modules it uses) or "load" (after loading the program: everything is restored, only changes to the
    harness are reported). A Python thread still running also counts, from then on.
    """
    problem = threads_problem(snapshot)
    reset_process_hooks(snapshot)
    for entry in snapshot.harness:
        changed = restore(entry[0], entry[1], entry)
        problem = problem or (changed and f"the program changed the test harness ({changed})")
    for name, table, saved in snapshot.tables:
        if restore_table(table, saved):
            problem = problem or f"the program changed the test harness ({name})"
    for entry in snapshot.classes:
        ours = ident(entry[0]) in snapshot.harness_classes
        if ours or scope != "core":
            changed = restore_class(entry)
            if changed and (scope == "full" or ours):
                problem = problem or f"the program changed {entry[0].__qualname__}.{changed}"
    for entry in snapshot.modules:
        name = entry[0]
        if scope == "core" and name not in core:
            continue
        changed = restore(entry[2], entry[3], entry, name)
        quiet = quiet_keys.get(name, quiet_keys[""])
        if changed and scope == "full" and changed not in quiet:
            problem = problem or f"the program changed {name}.{changed}"
    for name, module in snapshot.saved_modules.items():
        if (scope != "core" or name in core) and modules_dict.get(name) is not module:
            modules_dict[name] = module
            problem = problem or (scope == "full" and f"the program replaced the module {name}") or ""
    if scope != "core":
        changed = restore_watched(snapshot)
        problem = problem or changed
    return problem


def _watch(snapshot, namespace: dict, judge: _Judge, builtins_dict: dict, fingerprint=_fingerprint, copy=dict,
           kind_of=type, type_dict=_TYPE_DICT) -> None:
    """From now on, also restore after every test step (and report changes to) the judge's helpers in the test
    ``namespace``, the tests' builtins ``builtins_dict``, and the judge's class, attributes and tables (a program
    handed a test function reaches it through ``__globals__``, then a helper's ``__self__``): ``library`` against a
    copy taken now, ``test_classes`` and ``constructed`` against the audit hook's copies."""
    judge_class = kind_of(judge)
    slots = [(type_dict(judge_class)[name], type_dict(judge_class)[name].__get__(judge))
             for name in type_dict(judge_class)["__slots__"]]
    entry = [builtins_dict, copy(builtins_dict), fingerprint(builtins_dict)]
    tables = [("library", judge.library, copy(judge.library)),
              ("test_classes", judge.test_classes, snapshot.classes_vouched),
              ("constructed", judge.constructed, snapshot.objects_vouched)]
    snapshot.watched.append((namespace, copy(judge.helpers, __builtins__=builtins_dict), entry, judge, judge_class,
                             slots, tables))


def _install_audit_hook(protected: set, snapshot, test_codes: frozenset, harness_paths: frozenset) -> None:
    """From now on refuse what would let code reach the harness's own state: frames (the call stack leads to the
    harness's locals, the result channel among them), the garbage collector's object lists, tracing and profiling,
    more audit hooks, ctypes, opening files on /proc (process memory), and rebinding the code or defaults of a
    function that existed before the program ran (``protected``: ids of library and harness functions), of code
    compiled from the harness's files (``harness_paths``, its modules' files and nothing else) or of test code; and
    keep what the judge vouches for in ``snapshot`` (:func:`_voucher`). The hook is a closure on purpose: no API
    hands an audit hook back, so what it holds is out of reach."""
    denied_events = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace",
                               "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                               "sys.addaudithook", "sys._getframemodulename"})
    frame_attributes = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
    function_internals = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
    blocked, denied, kind_of, text, stat, ident = _BLOCKED_MODULES, AccessDenied, type, str, os.stat, id
    function_type = types.FunctionType

    def fixed(function) -> bool:
        if ident(function) in protected:
            return True
        if kind_of(function) is not function_type:
            return False
        filename = function.__code__.co_filename
        return kind_of(filename) is text and (filename in harness_paths or filename.startswith("<test: ")
                                              or filename == "<prefix>")

    try:
        proc_device = os.stat("/proc/self").st_dev
    except OSError:
        proc_device = None
    vouch, vouch_event, reading, current_thread = _voucher(snapshot, test_codes), _VOUCH, [None], _thread.get_ident

    def hook(event, args):
        if reading[0] == current_thread():  # the hook itself, reading frames in ``vouch``
            return
        if event == vouch_event:
            reading[0] = current_thread()
            try:
                return vouch(*args)
            finally:
                reading[0] = None
        if event in denied_events:
            raise denied(f"{event} is not allowed in the sandbox")
        if event == "object.__getattr__":
            if kind_of(args[1]) is not text or args[1] in frame_attributes:
                raise denied(f"reading .{args[1]} is not allowed in the sandbox")
        elif event == "object.__setattr__" or event == "object.__delattr__":
            if kind_of(args[1]) is not text or (args[1] in function_internals and fixed(args[0])):
                raise denied(f"changing .{args[1]} of this function is not allowed in the sandbox")
        elif event == "open":
            path = args[0]
            if proc_device is not None and kind_of(path) is not int:
                try:
                    device = stat(path).st_dev
                except (OSError, ValueError, TypeError):
                    return
                if device == proc_device:
                    raise PermissionError(f"opening {path!r} is not allowed in the sandbox")
        elif event == "import":
            if kind_of(args[0]) is not text or args[0].partition(".")[0] in blocked:
                raise ImportError(f"module {args[0]!r} is not allowed in the sandbox")
        elif event[:7] == "ctypes.":
            raise denied(f"{event} is not allowed in the sandbox")

    sys.addaudithook(hook)


def _voucher(snapshot, test_codes: frozenset):
    """The audit hook's handler of ``_VOUCH`` events ``(what, key, value)``, raised by the judge: count a refusal
    (``what`` "refusal"), or record a class the test code defines ("class", from ``trust``) or an object it
    constructed ("object", from ``call``) in ``snapshot``'s copies, against which the judge's tables are checked after
    every step. A class or object is refused (``AccessDenied``) unless test code (``test_codes``: ids of its code
    objects) called the helper: directly, or for ``call`` through the judge's ``map``/``filter`` wrapper, iterated by
    test code or by a judge ``call``. The handler reads frames (the hook lets it) and runs no code a program wrote."""
    methods = _TYPE_DICT(_Judge)
    call_code = methods["call"].__code__
    helper_codes = {"class": methods["trust"].__code__, "object": call_code}
    wrapper_ids = frozenset(id(c) for c in call_code.co_consts if type(c) is types.CodeType)
    getframe, ident, kind_of, text, denied = sys._getframe, id, type, str, AccessDenied
    vouched = {"class": snapshot.classes_vouched, "object": snapshot.objects_vouched}

    def asked_by_tests(helper_code) -> bool:
        frame = getframe(3)  # this function, vouch, the hook, then the judge's helper
        if frame.f_code is not helper_code:
            return False
        frame = frame.f_back
        while helper_code is call_code and frame is not None and ident(frame.f_code) in wrapper_ids:
            frame = frame.f_back  # a map/filter wrapper: the frame iterating the map (a judge call, or test code)
            if frame is not None and frame.f_code is call_code:
                frame = frame.f_back
        return frame is not None and ident(frame.f_code) in test_codes

    def vouch(what, key, value) -> None:
        if kind_of(what) is not text or (what != "refusal" and what not in vouched):
            raise denied("unknown judge event")
        if what == "refusal":
            snapshot.refusals[0] += 1
        elif asked_by_tests(helper_codes[what]):
            vouched[what][key] = value
        else:
            raise denied(f"only test code may ask the judge to believe a {what}")

    return vouch
