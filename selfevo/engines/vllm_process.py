"""The vLLM servers selfevo talks to (:mod:`selfevo.engines.vllm_server`): one HTTP exchange with a server
(:class:`Server`, errors as one line), and the processes selfevo starts — their process group stopped at
``close()``, at interpreter exit (:func:`stop_all`) and, through the parent-death signal, when the training process
is killed (:func:`die_with_parent`)."""
from __future__ import annotations

import atexit
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from selfevo.engines.base import EngineError

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # talk to servers directly, never via a proxy
LIVE: dict[int, "Server"] = {}  # servers this process started and has not stopped yet (stopped at exit)


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HTTPStatus(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(f"HTTP {code}: {message}")
        self.code, self.message = code, message


@dataclass(eq=False)
class Server:
    url: str
    backbone: str
    base_name: str = ""  # the model name of the bare backbone on this server
    proc: subprocess.Popen | None = None  # set when selfevo started it
    log: Path | None = None
    loaded: set[str] = field(default_factory=set)
    previous_pids: list[int] = field(default_factory=list)  # processes it had before restarts (all stopped)

    def describe(self) -> str:
        return f"vLLM server {self.url}" + (f" ({self.backbone})" if self.backbone else "")

    def exited(self, when: str = "") -> str | None:
        """Why a server selfevo started is gone (exit code, last log line), or None while it runs."""
        if self.proc is None or self.proc.poll() is None:
            return None
        last = ""
        if self.log is not None and self.log.exists():
            lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
            last = f": {one_line(lines[-1], 200)}" if lines else ""
        code = self.proc.returncode
        how = f"was killed{when} by {_signal_name(-code)}" if code < 0 else f"exited{when} with code {code}"
        return f"{self.describe()} {how}{last} (log: {self.log})"

    def call(self, method: str, path: str, body: dict | None, timeout: float) -> bytes:
        """One HTTP exchange; a non-2xx answer is :class:`HTTPStatus`, anything else that fails is EngineError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with OPENER.open(req, timeout=timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raise HTTPStatus(exc.code, error_message(exc)) from None
        except (TimeoutError, socket.timeout):
            raise EngineError(f"{self.describe()} did not answer {path} within {timeout:g} s "
                              f"(engine.vllm_server.request_timeout)") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise EngineError(f"{self.describe()} did not answer {path} within {timeout:g} s "
                                  f"(engine.vllm_server.request_timeout)") from None
            raise EngineError(self.unreachable(exc.reason)) from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise EngineError(self.unreachable(exc)) from None

    def unreachable(self, reason) -> str:
        return self.exited() or f"{self.describe()} is not reachable ({one_line(reason, 120)}); is it running?"

    def stop(self, grace: float = 30.0) -> None:
        """Terminate the server's whole process group (it spawns engine workers); SIGKILL after ``grace`` s."""
        LIVE.pop(id(self), None)
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:  # leader gone: make sure no worker of its group outlives it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            break
        _wait_group_gone(proc.pid)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _wait_group_gone(pgid: int, timeout: float = 5.0) -> None:
    """Wait (briefly) until the kernel has torn down every process of the group a SIGKILL was sent to; a busy
    machine can take a moment. Zombies that nobody reaps are left (they hold no resources)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        members = [d for d in os.listdir("/proc") if d.isdigit() and _in_group(int(d), pgid)] \
            if os.path.isdir("/proc") else []
        if not members:
            return
        time.sleep(0.05)


def _in_group(pid: int, pgid: int) -> bool:
    """Whether a live (not zombie) process ``pid`` belongs to process group ``pgid``."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] not in ("Z", "X") and int(fields[2]) == pgid


def error_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode(errors="replace")
    except Exception:  # noqa: BLE001 - the status alone still says enough
        raw = ""
    try:
        body = json.loads(raw)
        err = body.get("error") if isinstance(body, dict) else None
        message = (err.get("message") if isinstance(err, dict) else err) or body.get("message") or body.get("detail")
    except (ValueError, AttributeError):
        message = raw
    return one_line(message or exc.reason or "", 200)


@atexit.register
def stop_all() -> None:
    for server in list(LIVE.values()):
        server.stop(grace=10.0)


def die_with_parent():
    """A ``preexec_fn``: SIGTERM the server when the process that started it dies (Linux), even by SIGKILL."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None  # the signal fires when the starting *thread* ends: only safe from the main thread
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def run() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return run
