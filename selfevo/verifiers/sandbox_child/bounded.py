"""Running code within a step's time and output limits, and the per-job state the guard and the step runners share.

:func:`_guarded` runs an action with stdout/stderr captured up to a cap and a SIGALRM time limit (loading the program,
the tests' imports and the task prefix use it too); :func:`_describe` turns an exception into the one line a step
reports.
"""
from __future__ import annotations

import io
import signal
import sys

class _HarnessState:
    """Mutable per-job state the guard and the step runners share."""

    def __init__(self, config: dict):
        self.limits = config["limits"]
        self.workdir = config["workdir"]
        self.stdin_text: str | None = None  # the current io step's input, for ``open(0)``


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
