"""The sandbox's child: the harness that runs one job's untrusted program and its tests, in its own process.

:mod:`selfevo.verifiers.sandbox` (the parent) starts this file as a program, ``python -I -B sandbox_harness.py``,
in a fresh work directory, and sends the job's configuration (pickled) on stdin. It must stay one file using only
the standard library: ``-I`` leaves the project off ``sys.path``, so nothing of ``selfevo`` can be imported here,
and under the jail the project folder is not even visible. What each layer guarantees is described in the parent's
module docstring and in ``docs/sandbox.md``.

Sections, in the order the child uses them:

* entry point and result channel: read the configuration, then write nonce-tagged records to the result pipe;
* isolation: namespaces, the minimal root (else the read-only host), the uid drop, rlimits;
* guard: in-process refusals of process creation, signals, sockets, ctypes and writes outside the work dir;
* what decides a test: test code instrumented so that the judge (:class:`_Judge`) compares, truth-tests and vets
  values on plain data;
* what the program may not change: a snapshot of modules, classes and process hooks taken before the program runs,
  restored after every step (:func:`_take_snapshot`, :func:`_check_integrity`), and the audit hook;
* running steps: loading the program, exec/pytest/call/io steps under time and output limits;
* oracles of call and io steps: EvalPlus's and LiveCodeBench's comparisons, stdout matching.
"""
from __future__ import annotations

import _thread
import ast
import builtins
import collections
import gc
import io
import json
import json.encoder
import operator
import os
import pickle
import resource
import signal
import sys
import time
import types
from decimal import Decimal as _Decimal
from math import isinf as _isinf
from math import pow as _pow

HARNESS_PATH = os.path.abspath(__file__)  # code compiled from this file is the harness's (see the audit hook)
_BLOCKED_MODULES = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})
_HEAPTYPE = 1 << 9
# Standard modules imported first although the harness does not use them: their shared libraries (zlib, bz2, lzma,
# OpenSSL) are then mapped, so the minimal root binds their directories and code can import them under the jail; and
# they, with what they import (``threading``, ``typing``, ``random``, ``inspect``...), are in the snapshot that is
# restored after every step.
_PRELOADED_MODULES = ("dataclasses", "secrets", "selectors", "shutil", "subprocess", "tempfile", "typing")


# ---- entry point and the result channel -------------------------------------------------------------------------


def _child_main() -> None:
    """Entry point of the sandboxed process."""
    for name in _PRELOADED_MODULES:
        __import__(name)
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

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS = {"rdonly": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "remount": 32, "bind": 4096, "rec": 16384,
       "private": 1 << 18}
_MS_KEEP = {"nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21}
_MNT_DETACH = 2


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
# is loaded (``_Instrument``), so that what decides a test is computed by the judge (``_Judge``) on values the
# program does not control: comparisons ``a == b``, ``!=``, ``<``, ``in``... become ``_selfevo_cmp(op, a, b)``
# (chains: ``_selfevo_chain``), on both sides reduced to plain built-in data first (``_Reduction``); truth tests
# (``assert x``, ``if``, ``while``, ``not x``...) become ``_selfevo_truth(x)``; calls ``f(x)`` become
# ``_selfevo_call(f, x)``, whose result is vetted like a compared value; ``with cm:`` becomes
# ``with _selfevo_ctx(cm):``; a class the test defines gets ``@_selfevo_trust``. Test code is compiled with
# ``optimize=0``: ``assert`` always runs. ``docs/sandbox.md`` ("What decides a test") states the rules in full.

_H_CMP, _H_CHAIN, _H_TRUTH, _H_CALL, _H_CTX, _H_TRUST = ("_selfevo_cmp", "_selfevo_chain", "_selfevo_truth",
                                                        "_selfevo_call", "_selfevo_ctx", "_selfevo_trust")
_AUDIT, _VOUCH = sys.audit, "selfevo.vouch"  # how the judge tells the audit hook what it believes (see the hook)
_FRAME_BOUND_CALLS = frozenset({"super", "locals", "vars", "globals", "dir", "eval", "exec", "breakpoint"})
_AST_OPS = {ast.Eq: "Eq", ast.NotEq: "NotEq", ast.Lt: "Lt", ast.LtE: "LtE", ast.Gt: "Gt", ast.GtE: "GtE", ast.Is: "Is",
            ast.IsNot: "IsNot", ast.In: "In", ast.NotIn: "NotIn"}
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


# ---- what the program may not change: snapshot and restore -----------------------------------------------------
#
# The snapshot is taken before the program runs (``_take_snapshot``); after loading it and after every step,
# ``_check_integrity`` restores it and reports what changed. By then the program may have rebound any of the
# harness's globals or patched its classes (a harness function's ``__globals__`` leads there), so the functions from
# ``_restore_namespace`` to ``_watch`` look nothing up there: what they call is bound as positional defaults (the
# parameters after the documented ones, never passed), evaluated when this file is loaded. The audit hook refuses to
# replace a harness function's ``__defaults__`` (a tuple) or ``__code__``; keyword-only defaults would not do, as
# ``__kwdefaults__`` is a dict code could edit in place. The snapshot is a ``SimpleNamespace`` (a C type nothing can
# patch) held only in ``_run_all``'s locals and the audit hook's closure, which no code can reach (frames are
# refused). The harness's tables are plain dicts, restored like the rest: a ``MappingProxyType`` would not protect
# them, as comparing one hands the dict inside to the other operand's ``__eq__``.

_CORE_MODULES = frozenset({"builtins", "sys", "os", "posix", "io", "_io", "signal", "time", "math", "json",
                           "json.encoder", "_json", "decimal", "_decimal", "threading", "_thread", "operator",
                           "collections", "types", "ast", "gc"})
_QUIET_KEYS = {  # restored, but changing them is ordinary (not reported)
    "sys": frozenset({"stdout", "stderr", "stdin", "argv", "last_type", "last_value", "last_traceback", "ps1",
                      "ps2", "__warningregistry__", "__annotations__"}),
    "": frozenset({"__warningregistry__", "__annotations__"})}
_LAZY_CLASS_KEYS = frozenset({"__annotations__"})  # reading ``cls.__annotations__`` creates it (Python < 3.14)


def _take_snapshot(harness: dict, state: _HarnessState) -> types.SimpleNamespace:
    """Record, now (before the program runs), every module's namespace, every class they define, the harness's
    globals (``harness``), tables (its dicts, the job's limits and ``state``) and classes, ``sys.modules``, signal
    handlers, import hooks and the number of threads.

    ``library`` (id -> (class, fingerprint of its namespace)) is what the judge believes; ``functions`` holds the
    ids of the functions that exist now (the audit hook fixes their code and defaults); ``watched`` is filled by
    :func:`_watch`; ``compromised`` holds why every later step fails, once a thread outlived a step;
    ``classes_vouched``, ``objects_vouched`` and ``refusals`` are the audit hook's copies of what the judge believes
    (see :class:`_Judge`)."""
    modules, library = _snapshot_modules()
    harness_classes = _snapshot_harness_classes(harness, library)
    classes = [[cls, dict(_TYPE_DICT(cls)), _fingerprint(_TYPE_DICT(cls))] for cls, _ in library.values()]
    namespaces = [entry[3] for entry in modules] + [entry[1] for entry in classes] + [harness]
    return types.SimpleNamespace(
        modules=modules, classes=classes, library=library, harness_classes=harness_classes,
        functions=_existing_functions(namespaces), harness=[harness, dict(harness), _fingerprint(harness)],
        saved_modules={entry[0]: entry[1] for entry in modules}, handlers=_signal_handlers(),
        meta_path=sys.meta_path, saved_meta_path=list(sys.meta_path), path_hooks=sys.path_hooks,
        saved_path_hooks=list(sys.path_hooks), threads=_thread._count(), watched=[], compromised=[""],
        tables=_harness_tables(harness, state), classes_vouched={}, objects_vouched={}, refusals=[0])


def _harness_tables(harness: dict, state: _HarnessState) -> list:
    """``(name, table, saved copy)`` for every dict among the harness's globals (``_COMPARE_OPS``, ``_AS_BASE``,
    ``_STEP_RUNNERS``...), the job's limits and ``state``'s attributes: code reaching the harness (through any of
    its functions' ``__globals__`` or closures) could change them in place."""
    tables = [(name, value) for name, value in harness.items() if type(value) is dict and name != "__builtins__"]
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


def _snapshot_harness_classes(harness: dict, library: dict) -> set:
    """Add the harness's own classes to ``library``; return their ids."""
    ours = set()
    for value in list(harness.values()):
        if isinstance(value, type) and _TYPE_FLAGS(value) & _HEAPTYPE and \
                _TYPE_DICT(value).get("__module__") == "__main__":
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
    harness = snapshot.harness
    changed = restore(harness[0], harness[1], harness)
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


def _install_audit_hook(protected: set, snapshot, test_codes: frozenset) -> None:
    """From now on refuse what would let code reach the harness's own state: frames (the call stack leads to the
    harness's locals, the result channel among them), the garbage collector's object lists, tracing and profiling,
    more audit hooks, ctypes, opening files on /proc (process memory), and rebinding the code or defaults of a
    function that existed before the program ran (``protected``: ids of library and harness functions) or of test
    code; and keep what the judge vouches for in ``snapshot`` (:func:`_voucher`). The hook is a closure on purpose:
    no API hands an audit hook back, so what it holds is out of reach."""
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


# ---- running steps -----------------------------------------------------------------------------------------------


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
    snapshot = _take_snapshot(globals(), state)
    judge = _Judge(snapshot.library)
    check, watch, run_step, build_namespace, scopes = _check_integrity, _watch, _run_step, _test_namespace, \
        ["full" if step["kind"] in ("exec", "pytest") else "core" for step in steps]
    refusals, pairs, text_of, rounded = snapshot.refusals, list(enumerate(steps)), str, round
    _install_audit_hook(snapshot.functions, snapshot, _code_ids([step["compiled"] for step in steps
                                                                 if "compiled" in step]))
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


# ---- oracles of call and io steps -------------------------------------------------------------------------------


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


if __name__ == "__main__":
    _child_main()
