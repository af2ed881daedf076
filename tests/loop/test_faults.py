"""Faults of the parts a run starts: each step is logged exactly once, nothing is left running, the run goes on.

* a vLLM server (``engine.name=vllm_server``, the fake server of ``helpers/fake_vllm_server.py`` started by the engine
  as its launcher) really ``SIGKILL``\\ s itself in the middle of step 1: the engine starts it again and sends the
  lost requests again (the run ends as one without the kill); with ``engine.vllm_server.restarts=0`` the run stops
  with one line naming the server and ``resume=true``, and the resumed run ends the same; a server killed from
  outside between two calls is started again by the next one, until ``engine.vllm_server.restarts`` are used up;
* one rank of ``torchrun --nproc_per_node 2`` is ``SIGKILL``\\ ed from outside after step 0 was logged; torchrun
  stops the other; ``resume=true`` goes on with 2 processes and with 1;
* a checkpoint write that fails part-way (``ENOSPC`` raised by the writer after some files were written) leaves
  the previous checkpoint loadable, is one line, and the resumed run logs every step once.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.paths import HELPERS, ROOT
from selfevo import cli
from selfevo.loop import checkpoint
from selfevo.policy import PolicyStore, StoreSettings

FAKE_SCRIPT = HELPERS / "fake_vllm_server.py"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def one_thread():
    """In-process runs with one thread, as under ``OMP_NUM_THREADS=1``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def steps(path: Path) -> list[int]:
    return [json.loads(x)["step"] for x in path.read_text().splitlines()]


def episodes(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]


def errors(text: str) -> list[str]:
    """The ``selfevo: ...`` lines of a stderr (they may start where the progress bar's last update ends)."""
    return re.findall(r"selfevo: [^\r\n]*", text)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> list[int]:
    """Live processes of a process group."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(proc.name))
    return out


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended (code {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.05)


# ---- a vLLM server killed mid-step ----------------------------------------------------------------------------------
COMAS = ["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=2",
         "trainer.tasks_per_step=2", "sampling.max_new_tokens=6", "data.n_math=8", "data.n_code=2", "data.n_science=2",
         "log.tensorboard=false", "data.tasks=[]", "eval.at_start=false", "eval.every=0"]  # the CoMAS mix, no evaluation
PER_STEP = 12  # completions a step of COMAS asks for (2 tasks × 2 agents × (solution, evaluation, score))


def served_run(out: Path, kill_marker: Path | None, *extra: str) -> int:
    """COMAS for 3 steps through fake servers the engine starts (each with a worker process in its group); with
    ``kill_marker`` the server SIGKILLs itself at the 6th completion of step 1 (once: the marker holds its pid)."""
    args = "--spawn-child" + (f" --sigkill-at {PER_STEP + 6} --sigkill-once {kill_marker}" if kill_marker else "")
    launcher = shlex.join([sys.executable, str(FAKE_SCRIPT)])
    return cli.main([*COMAS, "engine.name=vllm_server", f"engine.vllm_server.launcher={launcher}",
                     f"engine.vllm_server.server_args={args}", "engine.vllm_server.startup_timeout=60",
                     "trainer.max_steps=3", f"output_dir={out}", *extra])


def server_pids(run: Path) -> list[int]:
    """Every server process the run's engine started (current and replaced) and their workers."""
    pids = []
    for row in json.loads((run / "engine" / "servers.json").read_text()):
        pids += [row["pid"], *row["previous_pids"]]
        pids += [int(p) for p in re.findall(r"worker pid (\d+)", Path(row["log"]).read_text())]
    return pids


def no_orphans(run: Path) -> None:
    pids = server_pids(run)
    wait_for(lambda: not any(alive(p) or group_alive(p) for p in pids), 20, "end of every server process")


@pytest.mark.slow
@linux_only
def test_a_server_killed_mid_step_is_started_again_or_stops_the_run_for_a_resume(tmp_path, capsys, one_thread):
    ref = tmp_path / "ref"
    assert served_run(ref, None) == 0
    want = episodes(ref)
    assert steps(ref / "metrics.jsonl") == [0, 1, 2] and [e["step"] for e in want] == [0, 0, 1, 1, 2, 2]
    no_orphans(ref)
    capsys.readouterr()

    # restarted: the lost requests go again to the new server, the step goes on
    run, marker = tmp_path / "restarted", tmp_path / "killed-restarted"
    assert served_run(run, marker) == 0
    (line,) = errors(capsys.readouterr().err)
    killed = int(marker.read_text())
    (row,) = json.loads((run / "engine" / "servers.json").read_text())
    assert row["previous_pids"] == [killed] and row["pid"] != killed
    assert line.startswith("selfevo: vLLM server http://127.0.0.1:") and "was killed by SIGKILL" in line
    assert "starting it again (restart 1 of engine.vllm_server.restarts=2)" in line
    assert steps(run / "metrics.jsonl") == [0, 1, 2]
    assert episodes(run) == want  # nothing lost, nothing twice: the run of no kill
    assert (run / "adapters" / "final" / "agent1" / "adapter_model.safetensors").exists()
    no_orphans(run)

    # engine.vllm_server.restarts=0: one line, then resume=true goes on
    run, marker = tmp_path / "stopped", tmp_path / "killed-stopped"
    assert served_run(run, marker, "engine.vllm_server.restarts=0") == 2
    (line,) = errors(capsys.readouterr().err)
    assert "\n" not in line and line.startswith("selfevo: vLLM server http://127.0.0.1:")
    assert "was killed by SIGKILL" in line and "not restarted (engine.vllm_server.restarts=0 used up)" in line
    assert line.endswith("the checkpoint of step 0 is intact: rerun with resume=true to redo step 1")
    assert steps(run / "metrics.jsonl") == [0] and checkpoint.exists(run)
    no_orphans(run)
    assert served_run(run, marker, "engine.vllm_server.restarts=0", "resume=true") == 0
    assert steps(run / "metrics.jsonl") == [0, 1, 2] and episodes(run) == want
    no_orphans(run)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@linux_only
def test_a_server_killed_between_calls_is_started_again_until_the_restarts_are_used_up(make_store, tmp_path, capsys):
    """Killed from outside while the trainer is busy elsewhere: the next call notices it (here when it unloads the
    retired version of a0), starts it again and loads what it needs; with no restart left, one line."""
    from selfevo.engines import EngineError, make_engine
    from selfevo.types import Request, SamplingParams

    store = make_store()
    reqs = [Request(a, [{"role": "user", "content": "2+2?"}], SamplingParams(8, 1.0), seed=i)
            for i, a in enumerate(("a0", "a1"))]
    with make_engine("vllm_server", store, workdir=str(tmp_path / "engine"), startup_timeout=60, restarts=1,
                     launcher=(sys.executable, str(FAKE_SCRIPT))) as engine:
        first = engine.generate(reqs)
        (server,) = engine._all()
        killed = server.proc.pid
        os.kill(killed, signal.SIGKILL)
        store.versions["a0"] += 1  # a parameter update: the next call retires a0-v0 and loads a0-v1
        again = engine.generate(reqs)
        assert again[1].token_ids == first[1].token_ids and again[0].token_ids  # a1-v0, same seed: same answer
        (line,) = errors(capsys.readouterr().err)
        assert "was killed by SIGKILL" in line and "restart 1 of engine.vllm_server.restarts=1" in line
        (row,) = json.loads((tmp_path / "engine" / "servers.json").read_text())
        assert row["previous_pids"] == [killed] and row["pid"] == server.proc.pid != killed
        os.kill(row["pid"], signal.SIGKILL)
        with pytest.raises(EngineError) as info:
            engine.generate(reqs)
        text = str(info.value)
        assert "\n" not in text and "not restarted (engine.vllm_server.restarts=1 used up)" in text
    wait_for(lambda: not any(alive(p) or group_alive(p) for p in (killed, row["pid"])), 20, "end of the servers")


# ---- a rank killed mid-step ------------------------------------------------------------------------------------------
TORCHRUN = Path(sys.executable).parent / "torchrun"
DP = ["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=2", "trainer.tasks_per_step=2",
      "sampling.max_new_tokens=16", "data.n_math=8", "data.n_code=2", "data.n_science=2", "log.tensorboard=false",
      "trainer.max_steps=3", "data.tasks=[]", "eval.at_start=false", "eval.every=0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env1() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1"}


def torchrun(run: Path, *extra: str) -> subprocess.Popen:
    cmd = [str(TORCHRUN), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "selfevo", *DP, f"output_dir={run}", *extra]
    with (run.parent / f"{run.name}.log").open("a") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env1(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def ranks(launcher: int) -> dict[int, int]:
    """rank → pid of the worker processes torchrun ``launcher`` started (by their environment)."""
    out = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == launcher:
                env = dict(x.split("=", 1) for x in (proc / "environ").read_text().split("\0") if "=" in x)
                if "RANK" in env:
                    out[int(env["RANK"])] = int(proc.name)
        except (OSError, IndexError, ValueError):
            continue
    return out


STEP1_ROLLOUT = re.compile(r"1/3 \[[^\]\r\n]*rollout: ")  # rank 0's progress bar inside step 1's rollout


@pytest.fixture(scope="module")
def killed_rank(tmp_path_factory):
    """``torchrun --nproc_per_node 2`` with rank 1 SIGKILLed as soon as rank 0's progress bar shows step 1's rollout
    under way: (run dir, launcher log, the checkpointed step)."""
    run = tmp_path_factory.mktemp("rank") / "run"
    run.mkdir()
    proc = torchrun(run)
    try:
        wait_for(lambda: len(ranks(proc.pid)) == 2, 120, "two ranks", proc)
        pids = ranks(proc.pid)
        log = run.parent / "run.log"
        wait_for(lambda: STEP1_ROLLOUT.search(log.read_text(errors="replace")), 240, "step 1's rollout", proc)
        os.kill(pids[1], signal.SIGKILL)
        assert proc.wait(180) != 0  # torchrun reports the failed rank and stops the other
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    wait_for(lambda: not any(alive(p) for p in pids.values()), 30, "end of both ranks")
    log = (run.parent / "run.log").read_text()
    assert f"exitcode  : -9 (pid: {pids[1]})" in log and "Signal 9 (SIGKILL)" in log
    assert not (run / "adapters" / "final").exists()
    done = checkpoint.exists(run) and json.loads((run / "checkpoint" / "state.json").read_text())["step"]
    return run, log, done


def finished(run: Path, worlds: list[int]) -> None:
    assert steps(run / "metrics.jsonl") == [0, 1, 2]
    assert [e["step"] for e in episodes(run)] == [0, 0, 1, 1, 2, 2]
    assert all((run / "adapters" / "final" / a / "adapter_model.safetensors").exists() for a in ("agent0", "agent1"))
    assert [x["world_size"] for x in json.loads((run / "run.json").read_text())] == worlds


@pytest.mark.slow
@linux_only
def test_a_rank_killed_mid_step_resumes_with_two_processes(killed_rank, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(killed_rank[0], run)
    proc = torchrun(run, "resume=true")
    assert proc.wait(300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finished(run, [2, 2])


@pytest.mark.slow
@linux_only
def test_a_rank_killed_mid_step_resumes_with_one_process(killed_rank, tmp_path, one_thread):
    run = tmp_path / "run"
    shutil.copytree(killed_rank[0], run)
    assert cli.main([*DP, f"output_dir={run}", "resume=true"]) == 0
    finished(run, [2, 1])


# ---- a checkpoint write that fails part-way ------------------------------------------------------------------------
def _full_disk(path: Path) -> OSError:
    path.write_bytes(b"\0" * 64)  # part of the file made it to disk
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["trainer.pt", "second adapter"])
def test_a_checkpoint_write_that_fails_part_way_keeps_the_previous_one(tmp_path, capsys, monkeypatch, one_thread,
                                                                       where):
    run = tmp_path / "run"
    save_adapter, save = PolicyStore.save_adapter, torch.save
    writes = []  # checkpoint writes so far, by file

    def adapter(self, agent, path, *a, **k):
        if "checkpoint.tmp" in str(path):
            writes.append(agent)
            if where == "second adapter" and len(writes) == 4:  # step 1's second adapter
                Path(path).mkdir(parents=True)
                raise _full_disk(Path(path) / "adapter_model.safetensors")
        return save_adapter(self, agent, path, *a, **k)

    def trainer(obj, f, *a, **k):
        if where == "trainer.pt" and "checkpoint.tmp" in str(f) and len(writes) == 4:  # step 1's, adapters written
            raise _full_disk(Path(f))
        return save(obj, f, *a, **k)

    monkeypatch.setattr(PolicyStore, "save_adapter", adapter)
    monkeypatch.setattr(torch, "save", trainer)
    args = [*COMAS, "trainer.max_steps=3", "trainer.save_adapters_every=1", f"output_dir={run}"]
    assert cli.main(args) == 2
    (line,) = errors(capsys.readouterr().err)
    assert line == (f"selfevo: could not write step 1 in '{run}' (No space left on device); the checkpoint of step 0 "
                    f"is intact: rerun with resume=true to redo step 1")
    assert not (run / "checkpoint.tmp").exists()  # the partial checkpoint is gone, its space given back
    store = PolicyStore(StoreSettings(dtype="float32"))
    for agent in ("agent0", "agent1"):
        store.add_agent(agent, "tiny-random")
    assert checkpoint.load(run, store)["step"] == 0
    monkeypatch.undo()
    from safetensors.torch import load_file

    for agent in ("agent0", "agent1"):  # the checkpoint holds step 0's adapters
        got = load_file(str(run / "checkpoint" / "adapters" / agent / "adapter_model.safetensors"))
        want = load_file(str(run / "adapters" / "step_0" / agent / "adapter_model.safetensors"))
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert cli.main([*args, "resume=true"]) == 0
    assert steps(run / "metrics.jsonl") == [0, 1, 2]
    assert [e["step"] for e in episodes(run)] == [0, 0, 1, 1, 2, 2]
    assert checkpoint.load(run, store)["step"] == 2
