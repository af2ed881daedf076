"""Run untrusted Python in a contained child process and get back per-test results the code cannot forge.

This module is the parent side: :func:`run_program` takes the candidate program and a list of *steps* (made with
:func:`exec_step`, :func:`pytest_step`, :func:`call_step`, :func:`io_step`) and returns a :class:`SandboxResult`.
The child is the harness, the package ``sandbox_child`` beside this file, whose ``entry.py`` (:data:`HARNESS_PATH`)
runs as its own program (``python -I -B sandbox_child/entry.py``) and loads the package's other modules itself; they
only import the standard library, so the child runs the same way whether ``selfevo`` is importable there or not.
Tests reach its pure parts through :func:`harness_for_tests`.

Containment, outermost first (each layer is tested on its own in ``tests/verifiers/test_sandbox_hostile.py``):

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

What decides a test (see the harness's ``judge`` module; ``docs/sandbox.md`` has the full account):
test code is instrumented and compiled (assertions always on) before the program is loaded, so comparisons, truth
tests and values returned by calls are judged by the harness on plain data, never through special methods the
program wrote. The tests get their own copy of the builtins, and the task prefix's own helpers. Before the program
runs, the harness snapshots every loaded module, the classes they define, its own globals and classes, signal
handlers and import hooks; after loading and after every step it restores them and fails the step if the program
changed something that could sway a verdict, or left a thread running. An audit hook refuses frame,
garbage-collector, tracing and ``/proc`` access and rebinding the code of pre-existing functions, so code cannot walk
to the harness's locals (the result channel among them).

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

import collections
import importlib
import json
import os
import pickle
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
from typing import Any

HARNESS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child", "entry.py")  # the child
_RESULT_CAP_BYTES = 32 << 20  # the parent stops reading results beyond this
_LOG_TAIL_BYTES = 2000
_FS_MODES: collections.Counter = collections.Counter()  # jobs per ``isolation["fs"]`` since the last take
_FS_MODES_LOCK = allocate_lock()


# ----------------------------------------------------------------------------------------------------------------
# Configuration and results
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
    isolation: dict[str, Any] = field(default_factory=dict)  # netns, jail, fs, uid, errors (the harness's _isolate)
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
# Running a job
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


def harness_for_tests(module: str) -> types.ModuleType:
    """For tests only: the harness's module ``module`` (``selfevo.verifiers.sandbox_child.<module>``) imported into
    this process, so that its pure parts (in ``oracles`` the output oracles ``outputs_match``, ``_json_equal``,
    ``_evalplus_equal``, ``_foreign_type``; in ``isolation`` path helpers such as ``_in_lib_of``) can be checked
    without starting a job. Jobs never use it: they run the harness as its own program (:data:`HARNESS_PATH`), which
    loads its modules itself."""
    return importlib.import_module(f"selfevo.verifiers.sandbox_child.{module}")
