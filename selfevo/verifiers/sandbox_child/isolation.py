"""Isolation: new namespaces, the minimal root (else the host's tree read-only), the uid drop and the rlimits, applied
before anything of the job runs; :func:`_isolate` returns what was achieved (``SandboxResult.isolation``).
"""
from __future__ import annotations

import os
import resource
import sys

from .guard import _BLOCKED_MODULES

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
