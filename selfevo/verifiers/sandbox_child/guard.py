"""The guard: in-process refusals of process creation, signals to other processes, sockets, ctypes and writes outside
the work dir, each raising ``PermissionError`` (or ``ImportError``) with a clear message. It gives readable failures;
the isolation holds even if code gets around it.
"""
from __future__ import annotations

import builtins
import io
import os
import sys

from .bounded import _HarnessState, _stdin_stream

# modules that would bypass the guard: refused by its import blocker and by the audit hook
_BLOCKED_MODULES = frozenset({"ctypes", "_ctypes", "cffi", "_cffi_backend"})


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
