"""The child's entry point and its result channel: read the job's configuration, isolate, guard, run the job, and
write nonce-tagged records to the result pipe.

``entry.py`` (the program the parent starts) calls :func:`_child_main` once every module of the harness is loaded.
"""
from __future__ import annotations

import builtins
import json.encoder
import os
import pickle
import sys

from .bounded import _HarnessState
from .guard import _install_guard
from .isolation import _isolate
from .steps import _run_all

# Standard modules imported first although the harness does not use them: their shared libraries (zlib, bz2, lzma,
# OpenSSL) are then mapped, so the minimal root binds their directories and code can import them under the jail; and
# they, with what they import (``threading``, ``typing``, ``random``, ``inspect``...), are in the snapshot that is
# restored after every step.
_PRELOADED_MODULES = ("dataclasses", "secrets", "selectors", "shutil", "subprocess", "tempfile", "typing")


def _child_main(harness: list[dict], harness_paths: frozenset) -> None:
    """Entry point of the sandboxed process. ``harness``: the globals of every module of the harness (the entry's
    included); ``harness_paths``: the files they were compiled from."""
    for name in _PRELOADED_MODULES:
        __import__(name)
    _snapshot_builtins(harness)
    config = pickle.loads(sys.stdin.buffer.read())
    _detach_stdin()
    nonce, fd = config.pop("nonce"), config["result_fd"]
    emit, n_steps, leave = _emitter(fd, nonce), len(config["steps"]), os._exit
    iso = _isolate(config)
    state = _HarnessState(config)
    if config["guard"]:
        _install_guard(config["workdir"], state)
    emit({"t": "start", "iso": iso})
    _run_all(config, state, emit, harness, harness_paths)
    emit({"t": "done", "n": n_steps})
    leave(0)


def _snapshot_builtins(harness: list[dict]) -> None:
    """Copy the builtins into the globals of every module of the harness (``harness``), so code under test rebinding
    ``builtins.bool`` (say) cannot change how the harness compares results."""
    copies = {name: value for name, value in vars(builtins).items() if not name.startswith("__")}
    for namespace in harness:
        namespace.update(copies)


def _detach_stdin() -> None:
    """Point fd 0 at /dev/null so nothing can read the (already consumed) config pipe."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _emitter(fd: int, nonce: str):
    """A function writing one nonce-tagged JSON record to the result pipe.

    It serialises with C functions captured now (not ``json.dumps``, whose module globals code under test could
    rebind, and which would be handed the nonce), so nothing the program does later changes what it writes.
    """
    write, encode_str, int_repr, float_repr = os.write, json.encoder.c_encode_basestring_ascii, int.__repr__, \
        float.__repr__
    kind_of, text, join, view, infinities = type, str, ", ".join, memoryview, (float("inf"), float("-inf"))

    def serialise(value) -> str:
        kind = kind_of(value)
        if kind is str:
            return encode_str(value)
        if value is None or kind is bool:
            return "null" if value is None else ("true" if value else "false")
        if kind is int:
            return int_repr(value)
        if kind is float:
            return float_repr(value) if value == value and value not in infinities else "null"
        if kind is dict:
            return "{" + join([encode_str(text(k)) + ": " + serialise(v) for k, v in value.items()]) + "}"
        if kind is list or kind is tuple:
            return "[" + join([serialise(v) for v in value]) + "]"
        return encode_str(text(value))

    def emit(record: dict) -> None:
        record["k"] = nonce
        data = view((serialise(record) + "\n").encode("utf-8"))
        while data:
            data = data[write(fd, data):]

    return emit
