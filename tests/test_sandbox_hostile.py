"""Hostile candidates: each must be contained, leave the test process alive, and score 0 with a reason.

Every case runs with the in-process guard on (the default). Where the OS jail is available (root with mount and
network namespaces), the cases that the guard would otherwise stop are run again with the guard off, to show the
jail holds by itself.
"""
from __future__ import annotations

import os
import socket
import time

import pytest

from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.sandbox import Limits, _pids_of_uid, exec_step, run_program

LIMITS = Limits(wall_s=6.0, cpu_s=4.0, unit_s=1.0, load_s=2.0, memory_mb=512, output_bytes=1 << 16,
                file_bytes=1 << 20)
OK_F = "def f(x):\n    return x + 1\n"
STEPS = [exec_step("assert f(1) == 2"), exec_step("assert f(2) == 3")]
OUTSIDE = "/tmp/selfevo_hostile_marker"


def run(program: str, guard: bool = True):
    return run_program(program, STEPS, LIMITS, guard=guard)


def assert_contained(result, fragment: str = ""):
    """Score 0, a reason, and (implicitly) we are still alive to check it."""
    assert result.score == 0.0
    reason = " ".join([result.detail, result.load_error] + [s.error for s in result.steps])
    assert reason.strip()
    assert fragment.lower() in reason.lower(), reason


def jail_available() -> bool:
    return bool(run_program("x = 1", [exec_step("assert x == 1")], LIMITS).isolation.get("jail"))


JAIL = jail_available()
needs_jail = pytest.mark.skipif(not JAIL, reason="the OS jail needs root with mount/network namespaces")


@pytest.fixture(autouse=True)
def no_marker():
    if os.path.exists(OUTSIDE):
        os.remove(OUTSIDE)
    yield
    assert not os.path.exists(OUTSIDE), "the candidate wrote outside its sandbox directory"


# ---- time ----------------------------------------------------------------------------------------------------


def test_infinite_loop_in_function():
    assert_contained(run("def f(x):\n    while True:\n        pass\n"), "timed out")


def test_infinite_loop_at_import():
    assert_contained(run("while True:\n    pass\n" + OK_F), "timed out")


def test_uninterruptible_c_loop_hits_cpu_limit():
    start = time.monotonic()
    assert_contained(run("def f(x):\n    return sum(range(10 ** 14))\n"), "limit")
    assert time.monotonic() - start < LIMITS.wall_s + 3


# ---- processes -----------------------------------------------------------------------------------------------


def test_fork_bomb():
    assert_contained(run("import os\nwhile True:\n    os.fork()\n" + OK_F), "fork")


def test_subprocess_and_system():
    assert_contained(run(f"import subprocess\nsubprocess.run(['sh', '-c', 'touch {OUTSIDE}'])\n" + OK_F),
                     "subprocess")
    assert_contained(run(f"import os\nos.system('touch {OUTSIDE}')\n" + OK_F), "system")


@pytest.mark.parametrize("guard", [True, pytest.param(False, marks=needs_jail)])
def test_kill_parent(guard):
    assert_contained(run("import os\nos.kill(os.getppid(), 9)\n" + OK_F, guard=guard), "not")
    assert os.getpid() > 0  # still here


def test_leftover_thread_is_not_left_behind():
    program = (f"import threading, time\ndef later():\n    time.sleep(3)\n    open({OUTSIDE!r}, 'w').write('x')\n"
               "threading.Thread(target=later).start()\n" + OK_F)
    assert_contained(run(program))  # "timed out" joining it, or "can't start new thread" without a jail
    time.sleep(3.5)  # the marker fixture checks the thread never got to write


@needs_jail
@pytest.mark.parametrize("guard", [True, False])
def test_double_forked_survivor_is_killed(guard):
    program = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               "        time.sleep(60)\n    os._exit(0)\n" + OK_F.replace("+ 1", "+ 2"))
    result = run(program, guard=guard)
    assert_contained(result)
    assert _pids_of_uid(result.isolation["uid"]) == []


@needs_jail
def test_fork_bomb_without_guard_hits_process_limit():
    assert_contained(run("import os\nwhile True:\n    os.fork()\n" + OK_F, guard=False), "resource")


# ---- memory and output ---------------------------------------------------------------------------------------


def test_memory_bomb():
    assert_contained(run("x = 'a' * (10 ** 11)\n" + OK_F), "memory")
    grow = "def f(x):\n    keep = []\n    while True:\n        keep.append(bytearray(10 ** 8))\n"
    slow_pages = Limits(**{**LIMITS.__dict__, "unit_s": 5.0})  # touching 512 MB of pages can take a second
    assert_contained(run_program(grow, STEPS, slow_pages), "memory")


def test_huge_output():
    assert_contained(run("import sys\nwhile True:\n    sys.stdout.write('x' * 100000)\n" + OK_F), "output limit")
    assert_contained(run("import os\nwhile True:\n    os.write(1, b'x' * 100000)\n" + OK_F), "too large")


# ---- files and network -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("guard", [True, pytest.param(False, marks=needs_jail)])
def test_write_outside_sandbox(guard):
    assert_contained(run(f"open({OUTSIDE!r}, 'w').write('x')\n" + OK_F, guard=guard))
    assert_contained(run("import pathlib\npathlib.Path('../escape.txt').write_text('x')\n" + OK_F, guard=guard))


def test_work_directory_is_removed_afterwards():
    result = run("import os\nassert False, os.getcwd()\n")
    workdir = result.load_error.rsplit("AssertionError: ", 1)[-1]
    assert workdir.startswith("/") and "selfevo-sbx-" in workdir
    assert not os.path.exists(workdir)


def test_write_inside_sandbox_is_fine():
    program = "open('scratch.txt', 'w').write('ok')\nimport os\nos.mkdir('d')\n" + OK_F
    assert run(program).score == 1.0


@pytest.mark.parametrize("guard", [True, pytest.param(False, marks=needs_jail)])
def test_network_connect(guard):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    program = f"import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\n" + OK_F
    try:
        assert_contained(run(program, guard=guard))
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


# ---- early exits and forged results ------------------------------------------------------------------------------


@pytest.mark.parametrize("program", [
    "import sys\nsys.exit(0)\n",
    "raise SystemExit\n",
    "import os\nos._exit(0)\n",
    "import sys\ndef f(x):\n    sys.exit(0)\n",
    "import os\ndef f(x):\n    os._exit(0)\n",
    "def f(x):\n    raise BaseException('stop')\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "import sys, os\nsys.stdout.close()\nos.close(1)\nos.close(2)\nraise SystemExit(0)\n",
])
def test_early_exit_never_passes(program):
    assert_contained(run(program))


def test_forged_records_are_ignored():
    program = ("import os, json\nrec = json.dumps({'t': 'done', 'n': 2}).encode() + b'\\n'\n"
               "for fd in range(1, 30):\n    try:\n        os.write(fd, rec)\n    except OSError:\n        pass\n"
               "print(json.dumps({'t': 'step', 'i': 0, 'ok': True}))\nos._exit(0)\n")
    assert_contained(run(program), "before the harness completed")


def test_closing_every_descriptor():
    program = "import os\nfor fd in range(0, 64):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
    assert_contained(run(program + OK_F))


def test_hostile_code_through_the_verifier():
    task = Task("t", "code", "q", tests="assert f(1) == 2", meta={"limits": {"wall_s": 5.0, "unit_s": 1.0}})
    verdict = verify(task, "```python\nimport os\nos._exit(0)\n```")
    assert verdict.score == 0.0 and "harness" in verdict.reason
