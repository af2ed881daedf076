"""Hostile candidates: each must be contained, leave the test process alive, and score 0 with a reason.

Every case runs with the in-process guard on (the default). Where the OS jail is available (root with mount and
network namespaces), the cases that the guard would otherwise stop are run again with the guard off, to show the
jail holds by itself. Under the jail the child sees a minimal root (the interpreter, its libraries, four device
nodes, its work dir): a program searching the host for its tests' expected values finds nothing.
"""
from __future__ import annotations

import ast
import os
import secrets
import socket
import sys
import tempfile
import time

import pytest

from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.sandbox import HARNESS_PATH, Limits, exec_step, harness_for_tests, run_program, take_fs_modes

LIMITS = Limits(wall_s=6.0, cpu_s=4.0, unit_s=1.0, load_s=2.0, memory_mb=512, output_bytes=1 << 16,
                file_bytes=1 << 20)
OK_F = "def f(x):\n    return x + 1\n"
STEPS = [exec_step("assert f(1) == 2"), exec_step("assert f(2) == 3")]
OUTSIDE = "/tmp/selfevo_hostile_marker"


def run(program: str, guard: bool = True):
    return run_program(program, STEPS, LIMITS, guard=guard)


def live_pids_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real or effective uid is ``uid``, read from /proc here (not through the
    sandbox's own cleanup code)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if fields.get("State", "Z").split()[0] not in ("Z", "X") and str(uid) in fields.get("Uid", "").split()[:2]:
            found.append(int(pid))
    return found


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


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_infinite_loop_in_function():
    assert_contained(run("def f(x):\n    while True:\n        pass\n"), "timed out")


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_infinite_loop_at_import():
    assert_contained(run("while True:\n    pass\n" + OK_F), "timed out")


@pytest.mark.slow  # runs until the CPU limit (a quick check keeps the time-outs of the infinite loops)
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


@pytest.mark.slow  # waits for the thread's 3 s (a quick check keeps the time-outs of the infinite loops)
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
    assert live_pids_of(result.isolation["uid"]) == []


@needs_jail
def test_fork_bomb_without_guard_hits_process_limit():
    assert_contained(run("import os\nwhile True:\n    os.fork()\n" + OK_F, guard=False), "resource")


# ---- memory and output ---------------------------------------------------------------------------------------


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
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


# ---- what the program can see of the host --------------------------------------------------------------------

SEARCH_LIMITS = Limits(wall_s=90.0, cpu_s=60.0, unit_s=40.0, load_s=5.0, memory_mb=1024)
KEY_PLACES = ("cwd", "parent", "tmp", "home")
SEARCH_PROGRAM = '''
import os, time
MARK = "SELFEVO-ANSWER-KEY "
PLACES = [{cwd!r}, {parent!r}, "/tmp", os.environ.get("HOME", ""), os.path.expanduser("~"), {home!r}, "/root",
          "/home", "..", ".", "/"]
SKIP = {{"proc", "sys", "dev", "site-packages", "dist-packages", "__pycache__", ".git", "node_modules"}}
FOUND = None


def search():
    found, deadline = {{}}, time.monotonic() + 20
    for place in PLACES:
        for directory, dirs, files in os.walk(place):
            dirs[:] = [d for d in dirs if d not in SKIP]
            for name in files:
                path = os.path.join(directory, name)
                try:
                    if os.path.isfile(path) and os.path.getsize(path) < 200:
                        with open(path) as fh:
                            text = fh.read(200)
                        if text.startswith(MARK):
                            where, _, value = text[len(MARK):].partition("=")
                            found[where] = value
                except (OSError, UnicodeDecodeError):
                    pass
            if len(found) == {n} or time.monotonic() > deadline:
                return found
    return found


def answer(where):
    global FOUND
    if FOUND is None:
        FOUND = search()
    return FOUND.get(where)
'''


def needs_minimal_root():
    """Skip where the minimal root cannot be built at all; where the jail runs, it must be the minimal root."""
    if os.geteuid() != 0:
        pytest.skip("the minimal root needs root (mount namespace, bind mounts, pivot_root); without root the "
                    "child sees every host file the user can read (docs/sandbox.md, 'Without root')")
    if not JAIL:
        pytest.skip("the kernel refused the mount namespace the minimal root is built in")


@pytest.fixture
def answer_keys(tmp_path, monkeypatch):
    """A file holding a test's expected value in the caller's cwd, its parent, /tmp and $HOME (world-readable);
    yields {place: token}, removes them afterwards."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    tokens = {place: secrets.token_hex(16) for place in KEY_PLACES}
    fd, in_tmp = tempfile.mkstemp(prefix="selfevo-answer-key-", dir="/tmp")
    os.close(fd)
    paths = {"cwd": str(cwd / "answer.txt"), "parent": str(tmp_path / "answer.txt"), "tmp": in_tmp,
             "home": os.path.join(os.path.expanduser("~"), f".selfevo-answer-key-{tokens['home']}")}
    try:
        for place, path in paths.items():
            with open(path, "w") as fh:
                fh.write(f"SELFEVO-ANSWER-KEY {place}={tokens[place]}")
            os.chmod(path, 0o644)
        yield tokens
    finally:
        for path in paths.values():
            if os.path.exists(path):
                os.remove(path)


def search_run(tokens: dict, jail: bool):
    cwd = os.getcwd()
    program = SEARCH_PROGRAM.format(cwd=cwd, parent=os.path.dirname(cwd), home=os.path.expanduser("~"),
                                    n=len(tokens))
    steps = [exec_step(f"assert answer({place!r}) == {token!r}") for place, token in tokens.items()]
    return run_program(program, steps, SEARCH_LIMITS, jail=jail)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_file_search_finds_the_answer_keys_without_the_jail(answer_keys):
    """The control: the search program does find every key where nothing hides the host's files."""
    result = search_run(answer_keys, jail=False)
    assert result.isolation["fs"] == "none"
    assert result.score == 1.0, [s.error for s in result.steps] + [result.detail, result.log_tail]


def test_file_search_for_the_answer_keys_scores_zero(answer_keys):
    """Keys in the caller's cwd, its parent, /tmp and $HOME; the program walks /, /tmp, .., $HOME, ., the caller's
    cwd and its parent by name: under the jail it finds none of them."""
    needs_minimal_root()
    result = search_run(answer_keys, jail=True)
    assert result.isolation["fs"] == "minimal-root", result.isolation
    assert result.completed, result.detail
    assert result.score == 0.0
    assert all("AssertionError" in s.error for s in result.steps), [s.error for s in result.steps]


def test_listing_tmp_shows_nothing_of_the_hosts(tmp_path):
    needs_minimal_root()
    # besides its work dir, /tmp may hold the first folder of the interpreter's own paths when the venv lives under
    # /tmp (a clone there): bound read-only as part of the interpreter, not a host entry
    interpreter = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable)}
    own = sorted({p.split("/")[2] for p in interpreter if p.startswith("/tmp/")})
    with tempfile.NamedTemporaryFile(prefix="selfevo-host-entry-", dir="/tmp") as host_entry:
        name = os.path.basename(host_entry.name)
        steps = [exec_step("import os\nlisting = sorted(os.listdir('/tmp'))\n"
                           f"assert {name!r} not in listing, listing\n"
                           f"assert set(listing) <= {{os.path.basename(os.getcwd()), *{own!r}}}, listing")]
        result = run_program("x = 1", steps, LIMITS)
    assert result.isolation["fs"] == "minimal-root", result.isolation
    assert result.score == 1.0, [s.error for s in result.steps]


def test_minimal_root_holds_only_the_interpreter_libraries_devices_and_work_dir(tmp_path, monkeypatch):
    needs_minimal_root()
    monkeypatch.chdir(tmp_path)
    tests_dir = os.path.dirname(os.path.abspath(__file__))  # the project's files, next to the venv
    checks = ["import os, sys",
              "assert sorted(os.listdir('/dev')) == ['null', 'random', 'urandom', 'zero'], os.listdir('/dev')",
              "assert os.listdir('/etc') == ['ld.so.cache'], os.listdir('/etc')",
              "assert not os.path.exists('/proc') and not os.path.exists('/sys')",
              f"assert not os.path.exists({tests_dir!r})",
              f"assert not os.path.exists({str(tmp_path)!r})",
              "assert os.path.exists(sys.executable)",
              "assert os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR']"]
    result = run_program("x = 1", [exec_step(line, label=line) for line in checks], LIMITS)
    assert result.isolation["fs"] == "minimal-root", result.isolation
    assert result.score == 1.0, [(s.label, s.error) for s in result.steps if not s.passed]


def test_the_minimal_root_is_read_only_but_the_work_dir():
    needs_minimal_root()
    program = ("import os\nfailures = []\nfor path in ('/x', '/tmp/x', '/usr/lib/x', '/etc/x'):\n"
               "    try:\n        open(path, 'w')\n        failures.append(path)\n    except OSError:\n        pass\n"
               "open('here.txt', 'w').write('ok')\nopen(os.devnull, 'w').write('x')\n"
               "def f(x):\n    return x + 1 + len(failures)\n")
    result = run_program(program, STEPS, LIMITS, guard=False)
    assert result.isolation["fs"] == "minimal-root", result.isolation
    assert result.score == 1.0, [result.load_error] + [s.error for s in result.steps]


def test_ordinary_programs_run_in_the_minimal_root():
    needs_minimal_root()
    try:
        import numpy  # noqa: F401
        uses_numpy = "import numpy\ntotal += int(numpy.arange(5).sum())\n"
    except ImportError:
        uses_numpy = ""
    program = ("import bisect, collections, datetime, decimal, fractions, functools, heapq, itertools, json, math\n"
               "import os, random, re, statistics, string\n"
               "def f(x):\n    total = x + math.isqrt(16) + len(re.findall(r'a', 'banana'))\n"
               "    total += sum(collections.Counter('ab').values()) + json.loads('[1]')[0]\n"
               "    total += len(list(itertools.permutations(range(3)))) + heapq.nsmallest(1, [5, 7])[0]\n"
               "    total += functools.reduce(int.__add__, [1, 2]) + len(os.urandom(4)) + int(random.random() < 1)\n"
               f"    {uses_numpy.replace(chr(10), chr(10) + '    ')}"
               "return total\n")
    expected = 1 + 4 + 3 + 2 + 1 + 6 + 5 + 3 + 4 + 1 + (10 if uses_numpy else 0)
    steps = [exec_step(f"assert f(1) == {expected}")]
    result = run_program(program, steps, LIMITS)
    assert result.isolation["fs"] == "minimal-root", result.isolation
    assert result.score == 1.0, [result.load_error] + [s.error for s in result.steps] + [result.log_tail]


# ---- reporting the mode ------------------------------------------------------------------------------------------


def test_fs_modes_are_counted_and_reach_the_step_metrics():
    """``take_fs_modes`` counts jobs per ``isolation["fs"]``; ``Loop.end_step`` logs them as ``sandbox_fs``."""
    from types import SimpleNamespace

    from selfevo.loop.loop import Loop

    take_fs_modes()
    first = run_program("x = 1", [exec_step("assert x == 1")], LIMITS)
    run_program("x = 1", [exec_step("assert x == 1")], LIMITS, jail=False)
    mode = first.isolation["fs"]
    assert mode in ("minimal-root", "read-only-host", "none")
    written = []
    run_dir = SimpleNamespace(write_step=lambda step, episodes, metrics, *rest: written.append(metrics))
    fake = SimpleNamespace(_step_start=time.perf_counter(), main=True, bar=None, _evaluations=lambda step: {},
                           run_dir=run_dir, store=None, agents=[])
    Loop.end_step(fake, 0, [], {"reward": 1.0})
    expected = {mode: 2} if mode == "none" else {mode: 1, "none": 1}
    assert written[0]["sandbox_fs"] == expected
    Loop.end_step(fake, 1, [], {})
    assert "sandbox_fs" not in written[1]


def test_minimal_root_binds_python_lib_dirs_of_a_prefix_not_a_project_beside_them():
    in_lib_of = harness_for_tests("isolation")._in_lib_of
    assert in_lib_of("/usr/lib/python3/dist-packages", "/usr")
    assert in_lib_of("/work/main/.venv/lib/python3.11/site-packages", "/work/main/.venv")
    assert not in_lib_of("/usr/src/app", "/usr")  # an editable install's project folder inside a prefix
    assert not in_lib_of("/work/main", "/work/main/.venv")
    assert not in_lib_of("/usr", "/usr")


# ---- the harness's own files -------------------------------------------------------------------------------------


def test_the_child_imports_only_the_standard_library_and_loads_its_modules_in_order():
    """The child runs where ``selfevo`` is not importable: each of its files imports only the standard library and,
    by relative imports, modules the entry loads before it; ``entry.MODULES`` names every module of the package but
    the entry and ``__init__`` (the entry loads exactly those, in that order)."""
    package = os.path.dirname(HARNESS_PATH)
    order = harness_for_tests("entry").MODULES
    files = sorted(name[:-3] for name in os.listdir(package) if name.endswith(".py"))
    assert sorted(order) == [name for name in files if name not in ("entry", "__init__")]
    for name in files:
        earlier = order[:order.index(name)] if name in order else ()
        with open(os.path.join(package, name + ".py")) as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(alias.name.split(".")[0] in sys.stdlib_module_names for alias in node.names), name
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] in sys.stdlib_module_names, (name, node.module)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 1 and node.module in earlier, (name, node.module)


def test_code_the_harness_makes_while_running_cannot_be_swapped():
    """A function the harness makes during a step (the step's SIGALRM handler, from ``bounded.py``) is in none of the
    namespaces it snapshots; the audit hook still refuses to swap its code, as it was compiled from a harness file."""
    check = ("import signal\nhandler = signal.getsignal(signal.SIGALRM)\ntry:\n"
             "    handler.__code__ = (lambda *a: None).__code__\n    swapped = True\nexcept AttributeError:\n"
             "    swapped = False\nassert handler.__code__.co_filename.endswith('bounded.py') and not swapped")
    result = run_program("x = 1", [exec_step(check)], LIMITS)
    assert result.score == 1.0, [s.error for s in result.steps] + [result.detail, result.log_tail]
