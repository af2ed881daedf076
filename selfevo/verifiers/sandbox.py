"""Run untrusted Python in a contained child process and get back per-test results the code cannot forge.

Parent side: :func:`run_program` takes the candidate program and a list of *steps* (made with :func:`exec_step`,
:func:`pytest_step`, :func:`call_step`, :func:`io_step`) and returns a :class:`SandboxResult`. The child is this
same file run as a script (``python -I -B sandbox.py``); it only imports the standard library, so it runs the
same way whether ``selfevo`` is importable there or not.

Containment, outermost first (each layer is tested on its own in ``tests/test_sandbox_hostile.py``):

1. Process: a new session (``start_new_session``) whose whole process group is SIGKILLed when the job ends or its
   wall-clock deadline passes; rlimits on CPU time, address space (RLIMIT_AS), file size, open files and core
   dumps; an empty environment (minimal ``PATH``, ``HOME``/``TMPDIR`` = the work dir, single-threaded BLAS);
   ``-I`` so no ``PYTHON*`` variable, user site or script directory applies; a fresh work directory as cwd,
   removed afterwards.
2. Jail (only when the parent runs as root and the kernel allows it): new mount and network namespaces; the
   child pivots into a minimal root, a read-only tmpfs holding read-only bind mounts of the interpreter, its
   standard library and environment site-packages, the directories of its shared libraries,
   ``/etc/ld.so.cache``, ``/dev/null``, ``/dev/zero``, ``/dev/random``, ``/dev/urandom``, and its work dir
   (read-write); nothing else of the host (its ``/tmp``, ``/home``, ``/root``, the caller's cwd, ``/proc``) is
   there. If that root cannot be built, every host mount is remounted read-only except the work dir instead
   (directories on the interpreter's paths that others cannot traverse, e.g. ``/root``, covered by a tmpfs
   exposing only the needed entry). Then the child drops to a fresh uid/gid used by no one else, so RLIMIT_NPROC
   is enforced, it cannot signal the parent, and every process it leaves behind is found by uid and killed.
   Non-root parents get a user+network namespace when the kernel allows it and RLIMIT_NPROC = 0 (no threads, no
   processes); the child then reads whatever the caller can read. ``SandboxResult.isolation["fs"]`` says which
   filesystem view ran: ``minimal-root``, ``read-only-host`` or ``none``.
3. Guard (in-process, on by default): process creation, ``os.kill``, sockets, ``ctypes``, and writes outside the
   work dir raise ``PermissionError`` with a clear message. It gives readable failures; layers 1-2 hold even if
   code gets around it.

What decides a test (see "harness-owned comparisons" below; ``docs/sandbox.md`` has the full account): test code is
instrumented and compiled (assertions always on) before the program is loaded, so comparisons, truth tests and
values returned by calls are judged by the harness on plain data, never through special methods the program wrote.
The tests get their own copy of the builtins, and the task prefix's own helpers. Before the program runs, the
harness snapshots every loaded module, the classes they define, its own globals and classes, signal handlers and
import hooks; after loading and after every step it restores them and fails the step if the program changed
something that could sway a verdict, or left a thread running. An audit hook refuses frame, garbage-collector,
tracing and ``/proc`` access and rebinding the code of pre-existing functions, so code cannot walk to the harness's
locals (the result channel among them).

Result channel: the parent sends a random nonce through stdin (read and closed before the candidate runs); the
harness writes one JSON record per step, tagged with the nonce, to a pipe fd, then a final ``done`` record with
the step count; records are serialised with C functions captured at start. No ``done`` record (``sys.exit``/
``os._exit`` at load time is caught, but ``os._exit``, a kill, a crash or a timeout leave none) means score 0.
Limitation: code in the same process as the harness could in principle still reach the nonce or the harness's state
through an interpreter bug or a route the audit hook does not cover; the channel and the in-process checks defeat
early exits, printed fake results, exit codes and the known introspection routes, not every conceivable in-process
attacker, whose reach is still bounded by layers 1-2.
"""
from __future__ import annotations

import ast
import builtins
import collections
import io
import json
import json.encoder
import operator
import os
import pickle
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from _thread import allocate_lock
from dataclasses import dataclass, field
from decimal import Decimal as _Decimal
from math import isinf as _isinf
from math import pow as _pow
from typing import Any

HARNESS_PATH = os.path.abspath(__file__)
_RESULT_CAP_BYTES = 32 << 20  # the parent stops reading results beyond this
_LOG_TAIL_BYTES = 2000
_FS_MODES: collections.Counter = collections.Counter()  # jobs per ``isolation["fs"]`` since the last take
_FS_MODES_LOCK = allocate_lock()


# ----------------------------------------------------------------------------------------------------------------
# Parent side: configuration and results
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed job (one program, all its steps)."""

    wall_s: float = 30.0  # whole job, wall clock
    cpu_s: float = 30.0  # whole job, CPU seconds (RLIMIT_CPU)
    unit_s: float = 5.0  # default time limit of one step
    load_s: float = 10.0  # executing the candidate module once
    memory_mb: int = 2048  # RLIMIT_AS
    output_bytes: int = 1 << 20  # captured stdout+stderr of one step
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE: any file the child writes, including its raw stdout/stderr
    open_files: int = 256  # RLIMIT_NOFILE
    threads: int = 8  # tasks the child may run at once (threads included) under a dedicated uid


@dataclass(frozen=True)
class StepOutcome:
    """What the harness reported for one step."""

    index: int
    label: str
    unit: bool
    passed: bool
    ms: float
    error: str


@dataclass
class SandboxResult:
    """Everything the parent learned from one job."""

    completed: bool  # a valid ``done`` record arrived
    status: str  # completed | timeout | exited | killed | channel-closed | result-flood | spawn-failed
    detail: str  # one line: why the job ended the way it did
    steps: list[StepOutcome] = field(default_factory=list)
    load_error: str = ""
    n_units: int = 0
    wall_ms: float = 0.0
    isolation: dict[str, Any] = field(default_factory=dict)  # netns, jail, fs, uid, errors (see ``_isolate``)
    log_tail: str = ""

    @property
    def units(self) -> list[StepOutcome]:
        return [s for s in self.steps if s.unit]

    @property
    def passed(self) -> int:
        return sum(1 for s in self.units if s.passed)

    @property
    def score(self) -> float:
        """Fraction of unit steps passed; 0 unless the harness completed."""
        if not self.completed or self.n_units == 0:
            return 0.0
        return self.passed / self.n_units

    @property
    def exec_ms(self) -> float:
        """Time the harness spent inside steps (the rest of ``wall_ms`` is sandbox overhead plus loading)."""
        return sum(s.ms for s in self.steps)


# ----------------------------------------------------------------------------------------------------------------
# Step constructors (the protocol between parent and harness)
# ----------------------------------------------------------------------------------------------------------------


def exec_step(code: str, unit: bool = True, label: str = "", timeout: float | None = None) -> dict:
    """Execute ``code`` in the test namespace; as a unit it passes when nothing is raised."""
    return {"kind": "exec", "code": code, "unit": unit, "label": label or (code.strip().splitlines() or [""])[0][:80],
            "timeout": timeout}


def pytest_step(name: str, timeout: float | None = None) -> dict:
    """Call the test function ``name`` (or ``Class.method``), expanding ``pytest.mark.parametrize``."""
    return {"kind": "pytest", "name": name, "unit": True, "label": name, "timeout": timeout}


def call_step(target: str, args: list, expected: Any, compare: dict, label: str = "",
              timeout: float | None = None) -> dict:
    """Evaluate ``target`` (an expression, e.g. ``f`` or ``Solution().f``), call it with ``args``, compare.

    ``compare`` is ``{"kind": "json"}`` (tuples become lists, then ``==``) or ``{"kind": "evalplus", "mode":
    "exact"|"set"|"not_none"|"always"|"poly"|"alt"|"alt_close", "atol": float, "alt": value}``.
    """
    return {"kind": "call", "target": target, "args": args, "expected": expected, "compare": compare,
            "unit": True, "label": label or target, "timeout": timeout}


def io_step(stdin: str, expected_stdout: str, label: str = "", timeout: float | None = None) -> dict:
    """Run the program as ``__main__`` with ``stdin``; pass when its stdout matches (whitespace-tolerant)."""
    return {"kind": "io", "input": stdin, "output": expected_stdout, "unit": True, "label": label or "stdin case",
            "timeout": timeout}


# ----------------------------------------------------------------------------------------------------------------
# Parent side: running a job
# ----------------------------------------------------------------------------------------------------------------


def run_program(program: str, steps: list[dict], limits: Limits = Limits(), *, prefix: str = "",
                entry_point: str = "", guard: bool = True, jail: bool = True,
                python: str | None = None) -> SandboxResult:
    """Run ``program`` (after ``prefix``, e.g. a HumanEval prompt) and ``steps`` in a fresh contained child.

    ``entry_point`` names the function the tests call (if known): it stays visible to the tests even when it
    shadows a builtin, and calling it is never treated as constructing an object the test asked for.
    """
    nonce = secrets.token_hex(16)
    uid = _pick_uid() if (jail and os.geteuid() == 0) else None
    workdir = _make_workdir(uid)
    stash = tempfile.mkdtemp(prefix="selfevo-stash-")
    config = {"nonce": nonce, "workdir": workdir, "stash": stash, "uid": uid, "jail": jail, "guard": guard,
              "limits": limits.__dict__, "program": program, "prefix": prefix, "steps": steps,
              "entry_points": [entry_point] if entry_point else []}
    start = time.monotonic()
    try:
        result = _spawn_and_collect(config, limits, python or sys.executable)
    finally:
        _remove_tree(workdir)
        _remove_tree(stash)
    result.wall_ms = (time.monotonic() - start) * 1000.0
    result.n_units = sum(1 for s in steps if s.get("unit"))
    _count_fs_mode(str(result.isolation.get("fs", "unknown")))
    return result


def _count_fs_mode(mode: str) -> None:
    with _FS_MODES_LOCK:
        _FS_MODES[mode] += 1


def take_fs_modes() -> dict[str, int]:
    """How many jobs this process ran under each filesystem mode (``isolation["fs"]``: ``minimal-root``,
    ``read-only-host``, ``none``, or ``unknown`` when the child died before reporting) since the last call; resets
    the counts. The training loop logs them per step as ``sandbox_fs``."""
    with _FS_MODES_LOCK:
        counts = dict(_FS_MODES)
        _FS_MODES.clear()
    return counts


def _spawn_and_collect(config: dict, limits: Limits, python: str) -> SandboxResult:
    """Start the harness, feed it the config, collect its records, then kill everything it left."""
    read_fd, write_fd = os.pipe()
    config["result_fd"] = write_fd
    payload = pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
    log = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen([python, "-I", "-B", HARNESS_PATH], stdin=subprocess.PIPE, stdout=log, stderr=log,
                                pass_fds=(write_fd,), env=_child_env(config["workdir"]), cwd=config["workdir"],
                                start_new_session=True)
    except OSError as exc:
        os.close(read_fd)
        log.close()
        return SandboxResult(False, "spawn-failed", f"could not start the sandbox: {exc}")
    finally:
        os.close(write_fd)
    try:
        raw, status = _pump(proc, read_fd, payload, time.monotonic() + limits.wall_s)
    finally:
        _kill_all(proc, config["uid"])
        os.close(read_fd)
    result = _parse_records(raw, config["nonce"], config["steps"])
    result.log_tail = _read_tail(log)
    log.close()
    _finish_status(result, status, proc.returncode, limits)
    return result


def _pump(proc: subprocess.Popen, read_fd: int, payload: bytes, deadline: float) -> tuple[bytes, str]:
    """Write the config to the child's stdin and read its result pipe until EOF, exit or the deadline."""
    sel = selectors.DefaultSelector()
    stdin_fd = proc.stdin.fileno()
    os.set_blocking(stdin_fd, False)
    sel.register(stdin_fd, selectors.EVENT_WRITE)
    sel.register(read_fd, selectors.EVENT_READ)
    pending, buf, status = memoryview(payload), bytearray(), ""
    try:
        while not status:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(buf), "timeout"
            for key, _ in sel.select(timeout=min(remaining, 0.1)):
                if key.fd == stdin_fd:
                    pending = _feed(sel, proc, pending)
                else:
                    status = _drain(read_fd, buf, sel)
            if not status and proc.poll() is not None:
                status = _drain_rest(read_fd, buf)
    finally:
        sel.close()
        _close_stdin(proc)
    return bytes(buf), status


def _feed(sel: selectors.BaseSelector, proc: subprocess.Popen, pending: memoryview) -> memoryview:
    """Write the next chunk of the config; close stdin once all of it is written (or the child is gone)."""
    try:
        pending = pending[os.write(proc.stdin.fileno(), pending[:65536]):]
    except (BrokenPipeError, BlockingIOError, OSError):
        pending = pending[len(pending):]
    if not pending:
        sel.unregister(proc.stdin.fileno())
        _close_stdin(proc)
    return pending


def _drain(read_fd: int, buf: bytearray, sel: selectors.BaseSelector) -> str:
    """Read what is available; return "eof", "result-flood" or "" (keep going)."""
    data = os.read(read_fd, 1 << 16)
    if not data:
        sel.unregister(read_fd)
        return "eof"
    buf.extend(data)
    return "result-flood" if len(buf) > _RESULT_CAP_BYTES else ""


def _drain_rest(read_fd: int, buf: bytearray) -> str:
    """After the child exited, take whatever is still buffered without blocking on leftover writers."""
    os.set_blocking(read_fd, False)
    try:
        while len(buf) <= _RESULT_CAP_BYTES:
            data = os.read(read_fd, 1 << 16)
            if not data:
                break
            buf.extend(data)
    except BlockingIOError:
        pass
    return "exited"


def _close_stdin(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
    except OSError:
        pass


def _kill_all(proc: subprocess.Popen, uid: int | None) -> None:
    """SIGKILL the child's process group, reap the child, then kill every live process of the dedicated uid."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if uid is not None:
        _kill_uid(uid)


def _kill_uid(uid: int, rounds: int = 100) -> None:
    """Kill every live (non-zombie) process whose real or effective uid is ``uid`` until none is left."""
    for _ in range(rounds):
        pids = _pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def _pids_of_uid(uid: int) -> list[int]:
    """Live processes (from /proc, zombies excluded) whose real or effective uid is ``uid``."""
    found, wanted = [], str(uid).encode()
    for name in os.listdir("/proc"):
        if name.isdigit() and _proc_matches(name, wanted):
            found.append(int(name))
    return found


def _proc_matches(pid: str, wanted_uid: bytes) -> bool:
    """Whether /proc/<pid> is a live process with real or effective uid ``wanted_uid``."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            fields = dict(line.split(b":", 1) for line in fh if b":" in line)
    except OSError:
        return False
    state = fields.get(b"State", b"").split()
    if not state or state[0] in (b"Z", b"X"):
        return False
    return wanted_uid in fields.get(b"Uid", b"").split()[:2]


def _pick_uid() -> int | None:
    """A uid/gid nobody uses: random in [1e6, 2e6) when this user namespace maps it, else None (no drop)."""
    for map_file in ("/proc/self/uid_map", "/proc/self/gid_map"):
        if not _id_mapped(map_file, 1_000_000, 2_000_000):
            return None
    return 1_000_000 + secrets.randbelow(1_000_000)


def _id_mapped(map_file: str, lo: int, hi: int) -> bool:
    """Whether ids ``lo..hi-1`` are all mapped in this namespace's id map file."""
    try:
        with open(map_file) as fh:
            ranges = [tuple(int(x) for x in line.split()) for line in fh if line.strip()]
    except OSError:
        return False
    return any(start <= lo and hi <= start + count for start, _, count in ranges)


def _make_workdir(uid: int | None) -> str:
    """A fresh private directory; owned by the sandbox uid when there is one."""
    path = tempfile.mkdtemp(prefix="selfevo-sbx-")
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def _remove_tree(path: str) -> None:
    """Remove ``path`` even when the child left unreadable or unwritable entries in it."""
    def fix_and_retry(func, target, _exc):
        try:
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)
        except OSError:
            pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix_and_retry)


def _child_env(workdir: str) -> dict[str, str]:
    """The child's whole environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = "1"
    return env


def _read_tail(log) -> str:
    """The last bytes the child wrote to its raw stdout/stderr."""
    try:
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - _LOG_TAIL_BYTES))
        return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _parse_records(raw: bytes, nonce: str, steps: list[dict]) -> SandboxResult:
    """Turn the nonce-tagged JSON lines into a result; lines without the nonce are ignored."""
    result = SandboxResult(False, "", "")
    outcomes: dict[int, StepOutcome] = {}
    for line in raw.split(b"\n"):
        rec = _load_record(line, nonce)
        if rec is None:
            continue
        kind = rec.get("t")
        if kind == "start":
            result.isolation = rec.get("iso", {})
        elif kind == "load":
            result.load_error = str(rec.get("err", ""))
        elif kind == "step":
            outcome = _outcome(rec, steps)
            if outcome is not None and outcome.index not in outcomes:
                outcomes[outcome.index] = outcome
        elif kind == "done":
            result.completed = rec.get("n") == len(steps) and len(outcomes) == len(steps)
    result.steps = [outcomes[i] for i in sorted(outcomes)]
    return result


def _load_record(line: bytes, nonce: str) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and rec.get("k") == nonce else None


def _outcome(rec: dict, steps: list[dict]) -> StepOutcome | None:
    idx = rec.get("i")
    if not isinstance(idx, int) or not 0 <= idx < len(steps):
        return None
    step = steps[idx]
    return StepOutcome(idx, str(step.get("label", "")), bool(step.get("unit")), rec.get("ok") is True,
                       float(rec.get("ms", 0.0)), str(rec.get("err", ""))[:500])


def _finish_status(result: SandboxResult, status: str, returncode: int | None, limits: Limits) -> None:
    """Fill ``status``/``detail`` from how the pump ended and the child's exit status."""
    if result.completed:
        result.status, result.detail = "completed", "harness completed"
    elif status == "timeout":
        result.status, result.detail = "timeout", f"wall-clock limit of {limits.wall_s:g} s exceeded"
    elif status == "result-flood":
        result.status, result.detail = "result-flood", "result channel flooded"
    elif returncode is not None and returncode < 0 and returncode != -signal.SIGKILL:
        result.status, result.detail = "killed", _signal_reason(-returncode, limits)
    elif returncode == -signal.SIGKILL and status == "eof":  # it closed the channel; we killed the rest
        result.status = "channel-closed"
        result.detail = "the result channel was closed before the harness completed"
    elif returncode == -signal.SIGKILL:
        result.status, result.detail = "killed", _signal_reason(signal.SIGKILL, limits)
    else:
        result.status = "exited"
        result.detail = f"process ended (exit code {returncode}) before the harness completed"


def _signal_reason(signum: int, limits: Limits) -> str:
    """A one-line explanation of a deadly signal."""
    known = {signal.SIGXCPU: f"CPU time limit of {limits.cpu_s:g} s exceeded",
             signal.SIGXFSZ: f"file/output size limit of {limits.file_bytes} bytes exceeded",
             signal.SIGSEGV: "crashed with a segmentation fault (stack overflow or memory limit?)"}
    if signum in known:
        return known[signum]
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return f"killed by {name} before the harness completed"


# ----------------------------------------------------------------------------------------------------------------
# Child side: the harness (runs as ``python -I -B sandbox.py``; must stay standard-library only). ctypes and the
# low-level modules the guard patches (_socket, _posixsubprocess, posix, _thread, gc) are imported inside the
# functions that use them: ctypes must not stay a module global (``_forget_ctypes`` drops it before the program runs).
# ----------------------------------------------------------------------------------------------------------------

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS = {"rdonly": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "remount": 32, "bind": 4096, "rec": 16384,
       "private": 1 << 18}
_MS_KEEP = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
_MNT_DETACH = 2
_BLOCKED_MODULES = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})
_HEAPTYPE = 1 << 9


class _UnitTimeout(BaseException):
    """Raised by SIGALRM when a step exceeds its time limit (BaseException: ``except Exception`` can't eat it)."""


class _OutputLimit(BaseException):
    """Raised when a step writes more than its output cap."""


class _CappedBytes(io.BytesIO):
    """A byte buffer that refuses to grow past ``cap``."""

    def __init__(self, cap: int):
        super().__init__()
        self._cap = cap

    def write(self, data) -> int:
        if self.tell() + len(data) > self._cap:
            raise _OutputLimit(f"output limit of {self._cap} bytes exceeded")
        return super().write(data)


def _capture(cap: int) -> io.TextIOWrapper:
    """A text stream (with ``.buffer``) that captures at most ``cap`` bytes."""
    return io.TextIOWrapper(_CappedBytes(cap), encoding="utf-8", errors="replace", write_through=True)


def _stdin_stream(data: str) -> io.TextIOWrapper:
    """A text stream (with ``.buffer``) that yields ``data``."""
    return io.TextIOWrapper(io.BytesIO(data.encode("utf-8")), encoding="utf-8")


def _captured_text(stream: io.TextIOWrapper) -> str:
    return stream.buffer.getvalue().decode("utf-8", "replace")


def _child_main() -> None:
    """Entry point of the sandboxed process."""
    _snapshot_builtins()
    config = pickle.loads(sys.stdin.buffer.read())
    _detach_stdin()
    nonce, fd = config.pop("nonce"), config["result_fd"]
    emit, n_steps, leave = _emitter(fd, nonce), len(config["steps"]), os._exit
    iso = _isolate(config)
    state = _HarnessState(config)
    if config["guard"]:
        _install_guard(config["workdir"], state)
    emit({"t": "start", "iso": iso})
    _run_all(config, state, emit)
    emit({"t": "done", "n": n_steps})
    leave(0)


def _snapshot_builtins() -> None:
    """Copy the builtins into this module's globals, so code under test rebinding ``builtins.bool`` (say) cannot
    change how the harness compares results."""
    globals().update({name: value for name, value in vars(builtins).items() if not name.startswith("__")})


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


class _HarnessState:
    """Mutable per-job state the guard and the step runners share."""

    def __init__(self, config: dict):
        self.limits = config["limits"]
        self.workdir = config["workdir"]
        self.stdin_text: str | None = None  # the current io step's input, for ``open(0)``


# ---- isolation ----------------------------------------------------------------------------------------------


def _isolate(config: dict) -> dict:
    """Apply namespaces, the jail, the uid drop and rlimits; return what was achieved.

    ``fs`` names what the child sees of the filesystem: ``minimal-root`` (a fresh root holding only the
    interpreter, its libraries, four device nodes and the work dir), ``read-only-host`` (the host's tree, read-only
    but for the work dir, seen as an unprivileged uid) or ``none`` (the host's tree with the caller's rights).
    """
    iso = {"netns": False, "jail": False, "fs": "none", "uid": None, "errors": []}
    os.chdir(config["workdir"])
    if config["jail"] and os.geteuid() == 0 and config["uid"] is not None:
        _root_isolation(config, iso)
    elif config["jail"]:
        iso["netns"] = _try(iso, "user+net namespace", _enter_user_namespace)
    _set_rlimits(config["limits"], iso["uid"] is not None)
    os.chdir(config["workdir"])  # again: after the jail the work dir is a new (writable) mount
    sys.path.insert(0, config["workdir"])
    _forget_ctypes()
    return iso


def _root_isolation(config: dict, iso: dict) -> None:
    """Mount+net namespaces, a minimal root (else the read-only host), then a fresh uid (if paths allow)."""
    if _try(iso, "mount+net namespace", _unshare, _CLONE_NEWNS | _CLONE_NEWNET):
        iso["netns"] = True
        _jail_filesystem(config, iso)
    if iso["jail"] or _paths_world_readable(_needed_paths()):
        if _try(iso, "uid drop", _drop_to, config["uid"]):
            iso["uid"] = config["uid"]


def _jail_filesystem(config: dict, iso: dict) -> None:
    """The minimal root; if it cannot be built, the host's tree read-only (recorded in ``errors`` and ``fs``)."""
    workdir, stash = config["workdir"], config["stash"]
    if _try(iso, "minimal root", _build_minimal_root, workdir, stash):
        iso["jail"], iso["fs"] = True, "minimal-root"
    elif _try(iso, "read-only jail", _build_jail, workdir, stash, iso):
        iso["jail"], iso["fs"] = True, "read-only-host"


def _enter_user_namespace() -> None:
    """Unprivileged: new user and network namespaces, mapping our own uid/gid so files stay ours."""
    uid, gid = os.getuid(), os.getgid()
    _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _drop_to(uid: int) -> None:
    """Become ``uid``/``uid`` with no supplementary groups (irreversible: no capabilities remain)."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _try(iso: dict, what: str, action, *args) -> bool:
    """Run an isolation action; record a failure instead of raising (a weaker sandbox, not a dead one)."""
    try:
        action(*args)
        return True
    except Exception as exc:  # noqa: BLE001 - OSError, ImportError (no ctypes), ValueError...
        iso["errors"].append(f"{what}: {type(exc).__name__}: {exc}")
        return False


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc().unshare(flags), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    args = [None if s is None else s.encode() for s in (source, target, fstype)]
    _check(_libc().mount(*args, flags, None if data is None else data.encode()), f"mount {target}")


def _build_jail(workdir: str, stash: str, iso: dict) -> None:
    """Make every mount read-only except ``workdir``, exposing only the interpreter's paths under private dirs."""
    _mount(None, "/", None, _MS["rec"] | _MS["private"])
    _mount(workdir, workdir, None, _MS["bind"])
    for directory, keep in _hidden_ancestors(_needed_paths()):
        _overlay(directory, keep, stash)
    failed = _remount_readonly(skip={workdir})
    if failed:
        iso["errors"].append("could not make read-only: " + ", ".join(failed))
    if "/" in failed:
        raise OSError("could not remount / read-only")


def _needed_paths() -> list[str]:
    """Directories the interpreter must still read after the uid drop."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted({os.path.realpath(p) for p in paths})


def _hidden_ancestors(paths: list[str]) -> list[tuple[str, set[str]]]:
    """Ancestors that others cannot traverse, shallowest first, each with the entries to keep visible."""
    keep: dict[str, set[str]] = {}
    for path in paths:
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts)):
            parent = "/" + "/".join(parts[:depth])
            if not os.stat(parent).st_mode & 0o001:
                keep.setdefault(parent, set()).add(parts[depth])
    return sorted(keep.items(), key=lambda item: len(item[0].rstrip("/").split("/")))


def _overlay(directory: str, keep: set[str], stash: str) -> None:
    """Cover ``directory`` with a world-traversable tmpfs showing only ``keep`` (bind-mounted from the original)."""
    original = os.path.join(stash, str(len(os.listdir(stash))))
    os.mkdir(original, 0o700)
    _mount(directory, original, None, _MS["bind"] | _MS["rec"])
    _mount("tmpfs", directory, "tmpfs", _MS["nosuid"] | _MS["nodev"], "mode=755,size=1m")
    for name in keep:
        source, target = os.path.join(original, name), os.path.join(directory, name)
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            open(target, "w").close()
        _mount(source, target, None, _MS["bind"] | _MS["rec"])
    _check(_libc().umount2(original.encode(), _MNT_DETACH), f"umount {original}")


def _remount_readonly(skip: set[str]) -> list[str]:
    """Remount every mount point read-only (keeping nosuid/nodev/... flags); return those that failed."""
    failed = []
    for target, options in _mounts():
        if target in skip:
            continue
        flags = _MS["remount"] | _MS["bind"] | _MS["rdonly"]
        flags |= sum(bit for name, bit in _MS_KEEP.items() if name in options)
        try:
            _mount(None, target, None, flags)
        except OSError:
            failed.append(target)
    return failed


def _mounts() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) from /proc/self/mountinfo, decoding octal escapes."""
    result = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            target = fields[4].encode().decode("unicode_escape")
            result.append((target, set(fields[5].split(","))))
    return result


def _paths_world_readable(paths: list[str]) -> bool:
    """Whether others can traverse every ancestor of every path."""
    return not _hidden_ancestors(paths)


# ---- the minimal root (jail, preferred) --------------------------------------------------------------------------

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217}
_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
_LOADER_FILES = ("/etc/ld.so.cache",)
_ST_TO_MS = {2: 2, 4: 4, 8: 8, 1024: 1024, 2048: 2048, 4096: 1 << 21}  # statvfs ST_* bit -> mount MS_* bit


def _build_minimal_root(workdir: str, stash: str) -> None:
    """Make a fresh root holding only what the interpreter needs, read-only, plus ``workdir`` read-write, and
    pivot into it; the host's tree is then detached from this mount namespace.

    The new root is a tmpfs; into it go read-only bind mounts, each at its own path, of the interpreter binary,
    the standard library and site-packages directories on ``sys.path`` that lie inside the interpreter's or the
    environment's prefix (not the project folder an editable install adds), the directories of the shared
    objects (and locale files) the process has mapped, ``/etc/ld.so.cache``, and the device nodes in
    :data:`_DEVICES`; the interpreter's symlink chain and those of the host's top-level symlinks whose target is
    there (``/lib -> usr/lib``) are recreated; ``/tmp`` is an empty directory (the work dir's parent when the
    work dir lies in ``/tmp``).
    """
    root = os.path.join(stash, "root")
    os.mkdir(root, 0o755)
    _mount(None, "/", None, _MS["rec"] | _MS["private"])
    _mount("tmpfs", root, "tmpfs", _MS["nosuid"] | _MS["nodev"], "mode=755,size=1m")
    try:
        _populate_root(root, workdir)
        _mount(None, root, None, _MS["remount"] | _MS["rdonly"] | _MS["nosuid"] | _MS["nodev"])
        _pivot_into(root)
    except BaseException:
        _detach(root)
        raise


def _populate_root(root: str, workdir: str) -> None:
    """Bind what the interpreter needs (read-only), the device nodes and the work dir into ``root``."""
    for source in _minimal_root_sources():
        _bind_into(root, source, _MS["rdonly"] | _MS["nosuid"] | _MS["nodev"])
    for device in _DEVICES:
        if os.path.exists(device):
            _bind_into(root, device, _MS["rdonly"] | _MS["nosuid"] | _MS["noexec"])
    os.makedirs(root + "/tmp", 0o755, exist_ok=True)
    _bind_into(root, workdir, _MS["nosuid"] | _MS["nodev"])
    for link, target in _interpreter_links():
        _recreate_symlink(root, link, target)
    for link, target in _top_level_links():
        if _resolves_in(root, link, target):
            _recreate_symlink(root, link, target)


def _minimal_root_sources() -> list[str]:
    """Absolute real paths to bind read-only into the minimal root, outermost first, none inside another one on
    the same filesystem (a bind mount already shows those)."""
    paths = {os.path.realpath(sys.executable)}
    paths.update(_environment_paths())
    paths.update(_mapped_paths())
    paths.update(p for p in _LOADER_FILES if os.path.exists(p))
    paths.discard("/")  # a file mapped from / must not bring the whole host along
    return _outermost(sorted(paths, key=_depth_first))


def _depth_first(path: str) -> tuple[int, str]:
    return path.count("/"), path


def _environment_paths() -> set[str]:
    """The existing ``sys.path`` entries (real paths) in a ``lib*`` directory of the interpreter's or the
    environment's prefix: the standard library, ``lib-dynload``, site-packages; not a project folder that an
    editable install puts on ``sys.path``."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    found = set()
    for entry in sys.path:
        real = os.path.realpath(entry) if entry and os.path.isabs(entry) else ""
        if real and os.path.exists(real) and any(_in_lib_of(real, prefix) for prefix in prefixes):
            found.add(real)
    return found


def _in_lib_of(path: str, prefix: str) -> bool:
    """Whether ``path`` lies in ``prefix/lib``, ``prefix/lib64``... (where Python keeps its modules)."""
    head = os.path.relpath(path, prefix).split(os.sep)[0]
    return head.startswith("lib") and path.startswith(prefix.rstrip("/") + "/")


def _mapped_paths() -> set[str]:
    """Directories of the files mapped into this process (shared objects, locale data), except the interpreter
    binary itself (bound as a file): extension modules loaded later find their libraries there."""
    executable = os.path.realpath(sys.executable)
    found = set()
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split(maxsplit=5)
            path = fields[5].strip() if len(fields) == 6 else ""
            if path.startswith("/") and os.path.isfile(path):
                real = os.path.realpath(path)
                if real != executable:
                    found.add(os.path.dirname(real))
    return found


def _outermost(paths: list[str]) -> list[str]:
    """Drop every path that lies inside an earlier one on the same filesystem (``paths`` sorted by depth)."""
    kept: list[str] = []
    for path in paths:
        device = os.stat(path).st_dev
        if not any(path.startswith(outer.rstrip("/") + "/") and os.stat(outer).st_dev == device for outer in kept):
            kept.append(path)
    return kept


def _bind_into(root: str, source: str, flags: int) -> None:
    """Bind-mount ``source`` at the same path under ``root`` (creating the mount point), then remount it with
    ``flags`` plus the flags its filesystem already has (a remount may not clear those)."""
    target = root + source
    if os.path.isdir(source):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()
    _mount(source, target, None, _MS["bind"])
    _mount(None, target, None, _MS["remount"] | _MS["bind"] | flags | _locked_flags(source))


def _locked_flags(path: str) -> int:
    """The nosuid/nodev/noexec/atime mount flags of the filesystem holding ``path``, as mount(2) flags."""
    current = os.statvfs(path).f_flag
    return sum(ms_bit for st_bit, ms_bit in _ST_TO_MS.items() if current & st_bit)


def _top_level_links() -> list[tuple[str, str]]:
    """The host's top-level symlinks (``/lib -> usr/lib``: the dynamic loader looks libraries up by such paths)."""
    return [("/" + name, os.readlink("/" + name)) for name in sorted(os.listdir("/")) if os.path.islink("/" + name)]


def _interpreter_links() -> list[tuple[str, str]]:
    """Each symlink on the way from ``sys.executable`` to the interpreter binary, as (link, target)."""
    links = []
    path = os.path.abspath(sys.executable)
    for _ in range(40):
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        links.append((path, target))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return links


def _recreate_symlink(root: str, link: str, target: str) -> None:
    """Create ``link -> target`` under ``root`` unless something (a mount point, a bound tree) is there."""
    where = root + link
    if os.path.lexists(where):
        return
    os.makedirs(os.path.dirname(where), 0o755, exist_ok=True)
    os.symlink(target, where)


def _resolves_in(root: str, link: str, target: str) -> bool:
    """Whether ``link -> target`` would point at something that exists under ``root``."""
    return os.path.exists(root + os.path.normpath(os.path.join(os.path.dirname(link), target)))


def _pivot_into(root: str) -> None:
    """Make ``root`` this mount namespace's root and detach the old one (``pivot_root(".", ".")``)."""
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: no syscall number known for {os.uname().machine}")
    os.chdir(root)
    _check(_libc().syscall(number, b".", b"."), "pivot_root")
    _check(_libc().umount2(b".", _MNT_DETACH), "umount the old root")
    os.chdir("/")


def _detach(path: str) -> None:
    """Lazily unmount ``path`` (and what is mounted under it); ignore a path that is not mounted."""
    try:
        _check(_libc().umount2(path.encode(), _MNT_DETACH), f"umount {path}")
    except OSError:
        pass


def _set_rlimits(limits: dict, dedicated_uid: bool) -> None:
    """CPU, memory, file size, open files, core dumps, stack and process count."""
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    memory = int(limits["memory_mb"]) << 20
    settings = [(resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory, memory)),
                (resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"])),
                (resource.RLIMIT_NOFILE, (limits["open_files"], limits["open_files"])),
                (resource.RLIMIT_CORE, (0, 0)),
                (resource.RLIMIT_NPROC, (limits["threads"], limits["threads"]) if dedicated_uid else (0, 0))]
    settings.append((resource.RLIMIT_STACK, (256 << 20, 256 << 20)))  # deep recursion in the main thread
    for which, (soft, hard) in settings:
        _lower_limit(which, soft, hard)


def _lower_limit(which: int, soft: int, hard: int) -> None:
    """Set an rlimit, never above the current hard limit (which an unprivileged process cannot raise)."""
    current_hard = resource.getrlimit(which)[1]
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _forget_ctypes() -> None:
    """Drop ctypes (used for unshare/mount) from sys.modules so the guard's import block applies to it."""
    for name in list(sys.modules):
        if name.split(".")[0] in _BLOCKED_MODULES:
            del sys.modules[name]


# ---- guard ----------------------------------------------------------------------------------------------------


def _install_guard(workdir: str, state: _HarnessState) -> None:
    """Patch process creation, signals to others, sockets, ctypes and out-of-dir writes to raise."""
    import posix

    _deny_process_functions(os, posix)
    _deny_sockets()
    _guard_writes(workdir, state, builtins, posix)
    sys.meta_path.insert(0, _ImportBlocker())


def _denied(what: str):
    def blocked(*_args, **_kwargs):
        raise PermissionError(f"{what} is not allowed in the sandbox")

    return blocked


def _deny_process_functions(*modules) -> None:
    names = ["fork", "forkpty", "system", "popen", "execv", "execve", "execl", "execle", "execlp", "execlpe",
             "execvp", "execvpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp",
             "spawnlpe", "posix_spawn", "posix_spawnp", "kill", "killpg"]
    for module in modules:
        for name in names:
            if hasattr(module, name):
                setattr(module, name, _denied(f"os.{name}"))
    import _posixsubprocess

    _posixsubprocess.fork_exec = _denied("starting a subprocess")
    subprocess_module = sys.modules.get("subprocess")  # imported before the guard: patch its bound copies
    if subprocess_module is not None:
        subprocess_module._fork_exec = _denied("starting a subprocess")
        subprocess_module._USE_POSIX_SPAWN = False
        subprocess_module.Popen._execute_child = _denied("starting a subprocess")


def _deny_sockets() -> None:
    import _socket

    class _NoSocket:
        __slots__ = ()

        def __init__(self, *_args, **_kwargs):
            raise PermissionError("network access is not allowed in the sandbox")

    _socket.socket = _socket.SocketType = _NoSocket
    for name in ("socketpair", "fromfd", "getaddrinfo", "gethostbyname", "gethostbyname_ex"):
        if hasattr(_socket, name):
            setattr(_socket, name, _denied(f"socket.{name}"))


class _ImportBlocker:
    """A meta-path finder refusing modules that would bypass the guard."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED_MODULES:
            raise ImportError(f"module '{name}' is not allowed in the sandbox")
        return None


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_OPS_ONE = ("mkdir", "rmdir", "remove", "unlink", "chmod", "chown", "lchown", "truncate", "utime", "mkfifo",
                 "mknod", "chflags", "lchflags", "lchmod", "setxattr", "removexattr")
_PATH_OPS_TWO = ("rename", "replace", "link", "symlink")


def _guard_writes(workdir: str, state: _HarnessState, builtins_module, posix_module) -> None:
    """Refuse writes outside ``workdir`` through open/os.open and the os path functions; map ``open(0)``."""
    root = os.path.realpath(workdir)
    real_open, real_os_open = builtins_module.open, os.open

    def inside(path, dir_fd=None) -> bool:
        if isinstance(path, int):
            return True
        target = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(target):
            target = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), target)
        resolved = os.path.realpath(target)
        return resolved in (root, os.devnull) or resolved.startswith(root + os.sep)

    def refuse(path):
        raise PermissionError(f"writing outside the sandbox directory is not allowed: {os.fsdecode(path)}")

    def guarded_open(file, mode="r", *args, **kwargs):
        if file == 0 and not isinstance(file, bool) and state.stdin_text is not None:
            stream = _stdin_stream(state.stdin_text)
            return stream.buffer if "b" in mode else stream
        if any(ch in mode for ch in "wax+") and not inside(file):
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & _WRITE_FLAGS and not inside(path, dir_fd):
            refuse(path)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    builtins_module.open = io.open = guarded_open
    for module in (os, posix_module):
        module.open = guarded_os_open
        _wrap_path_ops(module, inside, refuse)


def _wrap_path_ops(module, inside, refuse) -> None:
    """Wrap os-level path mutators so both their path arguments must lie inside the work dir."""
    def wrap(func, n_paths):
        def guarded(*args, **kwargs):
            dir_fd = kwargs.get("dir_fd", kwargs.get("src_dir_fd"))
            for path in args[:n_paths]:
                if not inside(path, dir_fd):
                    refuse(path)
            return func(*args, **kwargs)

        return guarded

    for names, count in ((_PATH_OPS_ONE, 1), (_PATH_OPS_TWO, 2)):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, wrap(getattr(module, name), count))


# ---- what decides a test: harness-owned comparisons ---------------------------------------------------------------
#
# Test code (exec steps; the pytest and ``check`` functions they define run it too) is rewritten before the program
# is loaded, so that what decides a test is computed by the harness on values the program does not control:
#
# * comparisons ``a == b``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in`` become ``_selfevo_cmp(op, a, b)``
#   (chains: ``_selfevo_chain``): both sides are first reduced to plain built-in data (exact ``bool``/``int``/
#   ``float``/``complex``/``str``/``bytes``/``None`` and ``list``/``tuple``/``dict``/``set``/``frozenset`` of them,
#   copied), then compared with the operator on those copies, so no method of the program runs. Objects that are not
#   plain data are kept only if no class the program wrote decides how they behave (C types such as ``re.Match``,
#   ``datetime`` or numeric numpy arrays; classes from libraries imported before the program ran, e.g. ``Fraction``
#   or ``pytest.approx``, checked unmodified; classes the test code defines; and program classes that override no
#   special method, which compare by identity). Anything else fails the test: an object overriding ``__eq__`` (or
#   ``__hash__``, ``__len__``, ``__iter__``, ``__class__``, arithmetic ...), a subclass of a built-in type overriding
#   a special method or one of the base type's methods, self-referencing or overly deep values.
# * truth tests (``assert x``, ``if``/``while``/``x if c else y`` tests, comprehension filters, ``not x``, and/or in
#   those places) become ``_selfevo_truth(x)``: plain data, or an object whose ``__bool__``/``__len__`` is not the
#   program's code.
# * calls ``f(x)`` become ``_selfevo_call(f, x)``: the value returned is checked as above (so a lying object is
#   refused before any library or builtin code sees it) unless the test just constructed an instance of the class
#   it called (its class is what is tested: such an object may also be passed on and truth-tested, never compared
#   through its own ``__eq__``); a ``StopIteration`` escaping the callee becomes ``RuntimeError`` (it would
#   silently end ``map``);
#   ``all``/``any`` use the harness's truth test and ``map``/``filter`` call their function through the same check.
# * ``with cm:`` becomes ``with _selfevo_ctx(cm):``: a context manager the program wrote cannot swallow a failed
#   assertion, nor suppress anything on a truth value of its own making.
# * ``class X:`` gets ``@_selfevo_trust``: classes the test author wrote are believed while unmodified.
#
# Test code is compiled with ``optimize=0``: ``assert`` always runs, whatever the interpreter's flags.

_H_CMP, _H_CHAIN, _H_TRUTH, _H_CALL, _H_CTX, _H_TRUST = ("_selfevo_cmp", "_selfevo_chain", "_selfevo_truth",
                                                        "_selfevo_call", "_selfevo_ctx", "_selfevo_trust")
_FRAME_BOUND_CALLS = frozenset({"super", "locals", "vars", "globals", "dir", "eval", "exec", "breakpoint"})
_AST_OPS = types.MappingProxyType({ast.Eq: "Eq", ast.NotEq: "NotEq", ast.Lt: "Lt", ast.LtE: "LtE", ast.Gt: "Gt",
                                   ast.GtE: "GtE", ast.Is: "Is", ast.IsNot: "IsNot", ast.In: "In",
                                   ast.NotIn: "NotIn"})
_MAX_DEPTH = 200  # nesting depth of a value the harness will reduce to plain data
_PLAIN_BUDGET = 5_000_000  # objects the harness will inspect in one value
_SCALAR_TYPES = (type(None), bool, int, float, complex, str, bytes)
_SCALAR_IDS = frozenset(map(id, _SCALAR_TYPES))
_CONTAINER_IDS = frozenset(map(id, (list, tuple, dict, set, frozenset, bytearray)))
_VALUE_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
_VALUE_BASE_IDS = frozenset(map(id, _VALUE_BASES))
_AS_BASE = types.MappingProxyType({  # an instance of a subclass -> the plain value of its built-in base (C code)
    id(int): int.__index__, id(float): float.__pos__, id(complex): complex.__pos__, id(str): str.__str__,
    id(bytes): lambda v: bytes(memoryview(v)), id(bytearray): lambda v: bytearray(memoryview(v)),
    id(list): lambda v: list(list.__iter__(v)), id(tuple): lambda v: tuple(tuple.__iter__(v)),
    id(dict): lambda v: dict(dict.items(v)), id(set): lambda v: set(set.__iter__(v)),
    id(frozenset): lambda v: frozenset(frozenset.__iter__(v))})
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
_COMPARE_OPS = types.MappingProxyType({
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
    "GtE": operator.ge, "In": lambda a, b: operator.contains(b, a), "NotIn": lambda a, b: not operator.contains(b, a)})


class UntrustedValue(BaseException):
    """An instrumented comparison, truth test or call refused a value whose behaviour is the program's own code.

    A ``BaseException``: test code catching ``Exception`` (e.g. ``pytest.raises(Exception)``) does not turn it into
    a pass; every refusal is also counted, and a step with one fails even if something caught it.
    """


class AccessDenied(RuntimeError, AttributeError, ValueError):
    """Raised by the harness's audit hook. The bases let library code that probes frames (``logging``,
    ``collections.namedtuple``, ``typing``) fall back as it does on interpreters without frame access."""


class _Instrument(ast.NodeTransformer):
    """Rewrite test code to use the harness's helpers (see above)."""

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


def _make_judge(library: dict) -> types.SimpleNamespace:
    """The helpers instrumented test code calls (see above), as closures over what they trust.

    ``library``: id -> (class, fingerprint of its namespace) for classes that existed before the program ran.
    Returns ``helpers`` (name -> function, for the test namespace), ``test_classes`` (filled by ``_selfevo_trust``),
    ``entry_ids`` (ids of the task's entry points: calling one never counts as constructing an object) and
    ``refusals`` (a one-item list counting refused values).
    """
    test_classes: dict[int, tuple] = {}
    constructed: dict[int, object] = {}  # objects the test code constructed by calling a class: id -> object
    entry_ids: set[int] = set()
    refusals = [0]
    kind_of, ident, to_bool, fingerprint, type_dict = type, id, bool, _fingerprint, _TYPE_DICT
    all_, any_, map_, filter_, next_, deque = all, any, map, filter, next, collections.deque
    compare_ops, refused = _COMPARE_OPS, UntrustedValue

    def believed(klass) -> bool:
        entry = library.get(ident(klass)) or test_classes.get(ident(klass))
        return entry is not None and entry[0] is klass and fingerprint(type_dict(klass)) == entry[1]

    def refuse(message: str):
        refusals[0] += 1
        raise refused(message)

    def reduce(value, purpose: str):
        """``value`` as plain data (copied) with believable objects kept as they are; refuse anything else."""
        verdicts: dict[int, str] = {}
        on_path: set[int] = set()
        budget = [_PLAIN_BUDGET]

        def offence(kind) -> str:
            key = ident(kind)
            if key not in verdicts:
                verdicts[key] = _class_offence(kind, believed)
            return verdicts[key]

        def container(x, kind, depth):
            key = ident(x)
            if key in on_path:
                refuse(f"{purpose} a value that contains itself")
            elements = x.values() if kind is dict else x
            kinds = set(map_(ident, map_(kind_of, x)))
            if kind is dict:
                kinds |= set(map_(ident, map_(kind_of, elements)))
            budget[0] -= len(x)
            if kinds <= _SCALAR_IDS:
                return x if kind is tuple or kind is frozenset else x.copy()
            on_path.add(key)
            try:
                if kind is dict:
                    return {walk(k, depth + 1): walk(v, depth + 1) for k, v in x.items()}
                items = [walk(item, depth + 1) for item in x]
                return items if kind is list else kind(items)
            finally:
                on_path.discard(key)

        def walk(x, depth: int):
            kind = kind_of(x)
            key = ident(kind)
            if key in _SCALAR_IDS:
                return x
            budget[0] -= 1
            if budget[0] < 0:
                refuse(f"{purpose} a value too large to check")
            if depth > _MAX_DEPTH:
                refuse(f"{purpose} a value nested more than {_MAX_DEPTH} levels deep")
            if key in _CONTAINER_IDS:
                return container(x, kind, depth)
            bad = offence(kind)
            if bad and purpose == "returned" and constructed.get(ident(x)) is x:
                return x  # passing on an object the test constructed (its class is what is tested)
            if bad:
                refuse(f"{purpose} a value of type {_TYPE_NAME(kind)}, which overrides {bad}: its behaviour is "
                       "the program's own code")
            base = next((b for b in _TYPE_MRO(kind) if ident(b) in _VALUE_BASE_IDS), None)
            if base is not None:
                return walk(_AS_BASE[ident(base)](x), depth + 1)
            if purpose == "compared":
                if key in _DICT_VIEW_IDS:
                    return set(walk(item, depth + 1) for item in x)
                if kind is deque:
                    return deque(walk(item, depth + 1) for item in x)
                if key in _OPAQUE_CONTAINER_IDS:
                    refuse(f"compared a {_TYPE_NAME(kind)}, whose comparison would run code inside it; compare "
                           "plain values instead")
            if _is_object_array(x, kind):
                refuse(f"{purpose} an array of Python objects")
            if key in _ZONED_IDS and x.tzinfo is not None:
                zone = kind_of(x.tzinfo)
                if _TYPE_FLAGS(zone) & _HEAPTYPE and not believed(zone):  # its utcoffset() decides comparisons
                    refuse(f"{purpose} a {_TYPE_NAME(kind)} whose tzinfo is a {_TYPE_NAME(zone)} the program wrote")
            return x

        try:
            return walk(value, 0)
        except RecursionError:
            refuse(f"{purpose} a value too deeply nested to check")

    def compare(op: str, a, b):
        if op == "Is":
            return a is b
        if op == "IsNot":
            return a is not b
        return compare_ops[op](reduce(a, "compared"), reduce(b, "compared"))

    def chain(ops: tuple, left, *thunks):
        result = True
        for op, thunk in zip(ops, thunks):
            right = thunk()
            result = compare(op, left, right)
            if not truth(result):
                return result
            left = right
        return result

    def truth(x) -> bool:
        kind = kind_of(x)
        if kind is bool:
            return x
        key = ident(kind)
        if key in _SCALAR_IDS or key in _CONTAINER_IDS:
            return to_bool(x)
        if key in _PROXY_IDS:
            refuse("tested the truth of a weak proxy, whose truth is its referent's")
        bad = _class_offence(kind, believed, _TRUTH_DUNDERS)
        if bad and constructed.get(ident(x)) is not x:
            refuse(f"tested the truth of a {_TYPE_NAME(kind)}, which overrides {bad}: its truth value is the "
                   "program's own code")
        if _is_object_array(x, kind):
            refuse("tested the truth of an array of Python objects")
        return to_bool(x)

    def checked(function):
        return lambda *args, **kwargs: call(function, *args, **kwargs)

    def call(function, /, *args, **kwargs):
        if (function is all_ or function is any_) and len(args) == 1 and not kwargs:
            wanted = function is any_
            for item in args[0]:
                if truth(item) is wanted:
                    return wanted
            return not wanted
        if (function is map_ or function is filter_) and args and args[0] is not None:
            args = (checked(args[0]),) + args[1:]
        try:
            result = function(*args, **kwargs)
        except StopIteration:
            if function is next_ or getattr(function, "__name__", "") == "__next__":
                raise
            raise RuntimeError("a call raised StopIteration (it would silently end the iteration around it)") \
                from None
        if kind_of(result) is function and ident(function) not in entry_ids:
            if _class_offence(function, believed):  # remember it: it may be passed on and truth-tested
                constructed[ident(result)] = result
            return result
        reduce(result, "returned")
        return result

    def ctx(manager):
        if not _class_offence(kind_of(manager), believed, _CONTEXT_DUNDERS):
            return manager
        return _GuardedContext(manager, truth)

    def trust(cls):
        if isinstance(cls, type):
            test_classes[ident(cls)] = (cls, fingerprint(type_dict(cls)))
        return cls

    helpers = {_H_CMP: compare, _H_CHAIN: chain, _H_TRUTH: truth, _H_CALL: call, _H_CTX: ctx, _H_TRUST: trust}
    return types.SimpleNamespace(helpers=helpers, test_classes=test_classes, entry_ids=entry_ids, refusals=refusals)


def _fingerprint(mapping) -> tuple:
    """Identities of a namespace's keys and values: equal fingerprints mean nothing was rebound."""
    return tuple(map(id, mapping)), tuple(map(id, mapping.values()))


# ---- what the program may not change: snapshot and restore -----------------------------------------------------

_CORE_MODULES = frozenset({"builtins", "sys", "os", "posix", "io", "_io", "signal", "time", "math", "json",
                           "json.encoder", "_json", "decimal", "_decimal", "threading", "_thread", "operator",
                           "collections", "types", "ast", "gc"})
_QUIET_KEYS = types.MappingProxyType({  # restored, but changing them is ordinary (not reported)
    "sys": frozenset({"stdout", "stderr", "stdin", "argv", "last_type", "last_value", "last_traceback", "ps1",
                      "ps2", "__warningregistry__", "__annotations__"}),
    "": frozenset({"__warningregistry__", "__annotations__"})})
_LAZY_CLASS_KEYS = frozenset({"__annotations__"})  # reading ``cls.__annotations__`` creates it (Python < 3.14)


def _make_integrity(harness: dict) -> types.SimpleNamespace:
    """Snapshot, now (before the program runs), every module, every class they define, the harness's globals and
    classes, signal handlers, import hooks; return ``check(scope)`` and ``watch(...)``.

    ``check`` restores all of it and returns a description of the first change that could affect a verdict ("" if
    none): ``scope`` "full" (after test code: everything is checked), "core" (after a call or stdin/stdout step:
    the harness and the modules it uses) or "load" (after loading the program: everything is restored, only changes
    to the harness are reported). A Python thread still running also counts, from then on. ``watch`` adds the test
    namespace's helpers and builtins. ``library`` maps the snapshot classes for the judge.

    Everything ``check`` uses is bound here, so rebinding globals (the harness's included) cannot change it.
    """
    import _thread
    import gc

    kind_of, ident, to_tuple, apply, listed, set_type_attr, del_type_attr = \
        type, id, tuple, map, list, type.__setattr__, type.__delattr__
    type_dict, heap, count_threads, sleep, now = _TYPE_DICT, _HEAPTYPE, _thread._count, time.sleep, time.monotonic
    setitimer, getsignal, setsignal, set_wakeup_fd = signal.setitimer, signal.getsignal, signal.signal, \
        signal.set_wakeup_fd
    modules_dict, meta_path, path_hooks, gc_callbacks = sys.modules, sys.meta_path, sys.path_hooks, gc.callbacks
    quiet_keys, core, lazy_keys, module_type, text = _QUIET_KEYS, _CORE_MODULES, _LAZY_CLASS_KEYS, types.ModuleType, str
    timers = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)

    def fingerprint(mapping, _tuple=to_tuple, _map=apply, _id=ident):
        return _tuple(_map(_id, mapping)), _tuple(_map(_id, mapping.values()))

    modules, classes, library = [], [], {}
    for name, module in listed(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name == "__main__":
            continue
        namespace = vars(module)
        modules.append([name, module, namespace, dict(namespace), fingerprint(namespace)])
        for value in listed(namespace.values()):
            if (isinstance(value, type) and _TYPE_FLAGS(value) & heap and ident(value) not in library
                    and type_dict(value).get("__module__") == name):
                library[ident(value)] = (value, fingerprint(type_dict(value)))
    harness_classes = set()
    for value in listed(harness.values()):
        if isinstance(value, type) and _TYPE_FLAGS(value) & heap and type_dict(value).get("__module__") == "__main__":
            library[ident(value)] = (value, fingerprint(type_dict(value)))
            harness_classes.add(ident(value))
    for value, _ in library.values():
        classes.append([value, dict(type_dict(value)), fingerprint(type_dict(value))])
    functions = set()  # ids of functions that existed before the program ran: their code and defaults are fixed
    namespaces = [entry[3] for entry in modules] + [entry[1] for entry in classes] + [harness]
    for namespace in namespaces:
        for value in namespace.values():
            kind = kind_of(value)
            if kind is staticmethod or kind is classmethod:
                value = value.__func__
            elif kind is property:
                value = value.fget
            if kind_of(value) is types.FunctionType:
                functions.add(ident(value))
    harness_state = [harness, dict(harness), fingerprint(harness)]
    saved_modules = dict((entry[0], entry[1]) for entry in modules)
    saved_meta_path, saved_path_hooks = listed(meta_path), listed(path_hooks)
    handlers = {}
    for signum in signal.valid_signals():
        try:
            handlers[signum] = getsignal(signum)
        except (OSError, ValueError):
            pass
    baseline_threads = count_threads()
    watched: list = []
    compromised = [""]

    def restore(namespace, saved, entry, submodules_of=""):
        """Make ``namespace`` (a dict) equal to ``saved`` again; return the first key that differed."""
        if fingerprint(namespace) == entry[-1]:
            return ""
        changed, odd_keys = "", False
        for key in listed(namespace):
            if kind_of(key) is not str:
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
            kept = {key: value for key, value in namespace.items() if kind_of(key) is str}
            namespace.clear()
            namespace.update(kept)
        for key, value in saved.items():
            if key not in namespace:
                namespace[key] = value
                changed = changed or key
        entry[-1] = fingerprint(namespace)
        return changed

    def restore_class(entry):
        cls, saved, print_ = entry
        current = type_dict(cls)
        if fingerprint(current) == print_:
            return ""
        changed = ""
        for key in listed(current):
            if kind_of(key) is str and key not in saved and key in lazy_keys:
                continue
            if kind_of(key) is not str or key not in saved:
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

    def threads_problem() -> str:
        if compromised[0]:
            return compromised[0]
        deadline = now() + 0.2
        while count_threads() > baseline_threads:
            if now() > deadline:
                compromised[0] = "a thread the program started is still running"
                return compromised[0]
            sleep(0.005)
        return ""

    def reset_process_hooks() -> None:
        for which in timers:
            setitimer(which, 0)
        for signum, handler in handlers.items():
            if getsignal(signum) is not handler:
                try:
                    setsignal(signum, handler)
                except (OSError, ValueError, TypeError):
                    pass
        set_wakeup_fd(-1)
        del gc_callbacks[:]
        meta_path[:] = saved_meta_path
        path_hooks[:] = saved_path_hooks

    def check(scope: str) -> str:
        problem = threads_problem()
        reset_process_hooks()
        changed = restore(harness_state[0], harness_state[1], harness_state)
        problem = problem or (changed and f"the program changed the test harness ({changed})")
        for entry in classes:
            ours = ident(entry[0]) in harness_classes
            if ours or scope != "core":
                changed = restore_class(entry)
                if changed and (scope == "full" or ours):
                    problem = problem or f"the program changed {entry[0].__qualname__}.{changed}"
        for entry in modules:
            name = entry[0]
            if scope == "core" and name not in core:
                continue
            changed = restore(entry[2], entry[3], entry, submodules_of=name)
            quiet = quiet_keys.get(name, quiet_keys[""])
            if changed and scope == "full" and changed not in quiet:
                problem = problem or f"the program changed {name}.{changed}"
        for name, module in saved_modules.items():
            if (scope != "core" or name in core) and modules_dict.get(name) is not module:
                modules_dict[name] = module
                problem = problem or (scope == "full" and f"the program replaced the module {name}") or ""
        if scope != "core":
            for namespace, names, builtins_entry, helper_functions in watched:
                for name, value in names.items():
                    if namespace.get(name) is not value:
                        namespace[name] = value
                        problem = problem or f"the program changed the test helper {name}"
                changed = restore(builtins_entry[0], builtins_entry[1], builtins_entry)
                problem = problem or (changed and f"the program changed the tests' builtins ({changed})")
                for function, code, defaults, cells, contents in helper_functions:
                    if function.__code__ is not code or function.__defaults__ is not defaults or \
                            to_tuple(apply(ident, (c.cell_contents for c in cells))) != contents:
                        problem = problem or "the program changed a test helper's code"
        return problem

    def watch(namespace: dict, names: dict, builtins_dict: dict) -> None:
        helper_functions = []
        for function in names.values():
            functions.add(ident(function))  # the audit hook refuses to rebind their code from now on
            cells = function.__closure__ or ()
            helper_functions.append((function, function.__code__, function.__defaults__, cells,
                                     to_tuple(apply(ident, (c.cell_contents for c in cells)))))
        entry = [builtins_dict, dict(builtins_dict), fingerprint(builtins_dict)]
        watched.append((namespace, dict(names, __builtins__=builtins_dict), entry, helper_functions))

    return types.SimpleNamespace(check=check, watch=watch, library=library, functions=functions)


def _install_audit_hook(protected: set) -> None:
    """From now on refuse what would let code reach the harness's own state: frames (the call stack leads to the
    harness's locals, the result channel among them), the garbage collector's object lists, tracing and profiling,
    more audit hooks, ctypes, opening files on /proc (process memory), and rebinding the code or defaults of a
    function that existed before the program ran (``protected``: ids of library and harness functions) or of test
    code."""
    denied_events = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace",
                               "sys.setprofile", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                               "sys.addaudithook", "sys._getframemodulename"})
    frame_attributes = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
    function_internals = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
    blocked, denied, kind_of, text, stat, ident = _BLOCKED_MODULES, AccessDenied, type, str, os.stat, id
    function_type, harness_path = types.FunctionType, HARNESS_PATH

    def fixed(function) -> bool:
        if ident(function) in protected:
            return True
        if kind_of(function) is not function_type:
            return False
        filename = function.__code__.co_filename
        return kind_of(filename) is text and (filename == harness_path or filename.startswith("<test: ")
                                              or filename == "<prefix>")

    try:
        proc_device = os.stat("/proc/self").st_dev
    except OSError:
        proc_device = None

    def hook(event, args):
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


# ---- running steps -----------------------------------------------------------------------------------------------


def _run_all(config: dict, state: _HarnessState, emit) -> None:
    """Prepare the tests, snapshot what the program may not change, load the program (if any step needs the
    module), then run every step, check the snapshot after it, and report it.

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
    sys.modules["__main__"] = types.ModuleType("__main__")  # the harness's module is not the program's to patch
    integrity = _make_integrity(globals())
    judge = _make_judge(integrity.library)
    check, run_step, build_namespace, scopes = integrity.check, _run_step, _test_namespace, \
        ["full" if step["kind"] in ("exec", "pytest") else "core" for step in steps]
    refusals, pairs, text_of, rounded = judge.refusals, list(enumerate(steps)), str, round
    _install_audit_hook(integrity.functions)
    namespace = None
    if code is not None and needs_module:
        module, load_error = _load_module(code, config["workdir"], limits)
        problem = check("load")
        load_error = load_error or (problem and f"program failed while loading: {problem}")
        if not load_error:
            keep = set(config.get("entry_points") or ()) | _call_targets(steps)
            namespace = build_namespace(module, trusted, builtins_dict, judge.helpers, keep)
            for step in steps:
                step["keep"] = keep
            judge.entry_ids.update(id(namespace[name]) for name in keep if name in namespace)
            integrity.watch(namespace, judge.helpers, builtins_dict)
    emit({"t": "load", "ok": not load_error, "err": load_error})
    for index, step in pairs:
        before = refusals[0]
        ok, err, ms = run_step(step, code, namespace, load_error, state)
        problem = check(scopes[index])
        if problem:
            ok, err = False, f"{problem}, which is not allowed while tests run"
        elif ok and refusals[0] != before:
            ok, err = False, "a value was refused during the test (and the refusal caught)"
        emit({"t": "step", "i": index, "ok": ok, "err": text_of(err)[:500], "ms": rounded(ms, 3)})


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


def _guarded(action, seconds: float, output_cap: int) -> tuple[bool, str]:
    """Run ``action`` with stdout/stderr captured and a SIGALRM time limit; return (ok, error text)."""
    saved = sys.stdout, sys.stderr, sys.stdin
    sys.stdout = sys.stderr = _capture(output_cap)
    sys.stdin = _stdin_stream("")
    try:
        return _timed(action, seconds)
    finally:
        sys.stdout, sys.stderr, sys.stdin = saved


def _timed(action, seconds: float) -> tuple[bool, str]:
    """Run ``action`` under an interval timer; errors are described while the timer still runs."""
    def on_alarm(_signum, _frame):
        raise _UnitTimeout()

    def body():
        try:
            action()
            _join_threads(seconds)
            return True, ""
        except (_UnitTimeout, _OutputLimit):
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... all mean "failed"
            return False, _describe(exc)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return body()
    except _UnitTimeout:
        return False, f"timed out after {seconds:g} s"
    except _OutputLimit as exc:
        return False, str(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _join_threads(seconds: float) -> None:
    """Wait for threads the step started, daemon threads included (one left running could change state while
    later tests run); a thread still alive at the deadline fails the step."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(seconds)
            if thread.is_alive():
                raise RuntimeError("a background thread is still running")


def _describe(exc: BaseException) -> str:
    """``Type: message`` for an exception, safe against hostile ``__str__``."""
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001
        message = "<unprintable>"
    name = type(exc).__name__
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) raised"
    return f"{name}: {message}"[:500] if message else name


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


_STEP_RUNNERS = types.MappingProxyType({"exec": _run_exec, "pytest": _run_pytest, "call": _run_call})


if __name__ == "__main__":
    _child_main()
