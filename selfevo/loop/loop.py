"""The training loop every recipe runs in: a recipe is only its protocol, its reward wiring and its train options.

    loop = Loop(cfg)                                   # store + agents, resume or fresh run dir, engine, optimizer
    tasks = loop.tasks(default=my_training_set)        # data.tasks= overrides the recipe's own set
    for step in loop.steps():                          # progress bar; starts after the checkpoint on resume
        phase = Phase("rollout", loop.batch(tasks, step), program, reward)   # episode program, reward source
        loop.end_step(step, *loop.run_step(step, [phase]))   # rollout, rewards, update; logs, eval, checkpoint
    loop.close()

:meth:`Loop.run_step` is the one step skeleton (:func:`~selfevo.loop.step.rollout` of each :class:`Phase` and its
optional ``after`` → :func:`~selfevo.loop.step.assign_rewards` → each :class:`Update` → metrics with the timing
keys); CoMAS, SAGE, MAESTRO and the examples all use it, and differ only in their phases, reward sources, updates and
extra metrics. :meth:`Loop.end_step` logs the step, runs the held-out evaluation when due
(:func:`~selfevo.loop.heldout.heldout_accuracy`: ``selfevo eval``'s code) and has the run directory
(:class:`~selfevo.loop.rundir.RunDir`: config, logs, checkpoints, adapters, provenance) write it; a run stopped by
an engine failure or a failed write says how to go on with ``resume=true``.

Data-parallel under ``torchrun`` (:mod:`selfevo.distributed`): every rank builds the same store, engine and data
order and runs the same recipe code; the runner splits the rollouts, the store splits the updates, and rank 0 alone
writes the run directory (the others wait at a barrier after each step's checkpoint). A checkpoint holds full
adapters and AdamW states, so a run resumes with any number of processes.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Hashable, Iterator, Sequence

from tqdm import tqdm

from selfevo import distributed
from selfevo.engines import EngineError, build_engine
from selfevo.interaction import Episode, Runner, Turn
from selfevo.loop import build, summary
from selfevo.loop.data import load_entries, task_batch
from selfevo.loop.heldout import heldout_accuracy
from selfevo.loop.metrics import turn_metrics
from selfevo.loop.rundir import RunDir, resume_hint
from selfevo.loop.step import (Phase, Update, agree_on_rewards, assign_rewards, deep_merge, rollout, rollout_timing,
                               timed, update_timing)
from selfevo.optimizers import UpdateSpec, train_agents
from selfevo.optimizers.schedule import lr_at
from selfevo.policy import PolicyStore
from selfevo.types import Task
from selfevo.verifiers.sandbox import take_fs_modes


class Loop:
    """One recipe run: the policy store and its agents, the run directory, the engine, the optimizer, the step
    skeleton. ``command_line`` is recorded in run.json (default ``sys.argv``; ``selfevo run`` passes its own).
    ``first_step``: the step it starts at (after the checkpoint's on resume); ``state``: the recipe state saved
    with that checkpoint (``{}`` for a fresh run)."""

    def __init__(self, cfg, agents: list[str] | None = None, command_line: Sequence[str] | None = None):
        self.cfg = cfg
        distributed.init()  # launched by torchrun: join the process group (a no-op in a single process)
        self.main = distributed.is_main()
        build.seed_everything(cfg.seed)
        self.agents = agents or [f"agent{i}" for i in range(cfg.n_agents)]
        self.store = self._agents_store()
        self.run_dir = RunDir(cfg, self.main)
        self.first_step, self.state = self.run_dir.resume(self.store)
        distributed.barrier()  # every rank has read the checkpoint before rank 0 writes anything
        self.run_dir.open(self.first_step, self.store.dtype, command_line)
        self.engine = build_engine(cfg.engine, self.store, self.store.dtype, workdir=str(self.run_dir.engine_dir()))
        self.optimizer = build.optimizer(cfg)
        self.sampling = build.sampling(cfg.sampling)
        self.bar: tqdm | None = None
        self.eval_start: dict | None = None  # held-out results before the first step: logged with its metrics
        self.step, self._step_start = self.first_step, time.perf_counter()
        self._launch_start = self._step_start
        take_fs_modes()  # sandbox jobs counted before this run (another run in this process) are not this run's

    def _agents_store(self) -> PolicyStore:
        """The policy store with every agent's adapter: fresh, or ``model.init_adapters`` (not on resume: the
        checkpoint's come next); with ``trainer.kl_reference=initial`` a frozen copy of each as its reference."""
        cfg = self.cfg
        store = build.policy_store(cfg.model, cfg.trainer)
        build.add_agents(store, self.agents, list(cfg.model.backbones))
        if cfg.model.init_adapters and not cfg.resume:
            build.init_adapters(store, self.agents, cfg.model.init_adapters)
        if cfg.trainer.kl_reference == "initial":  # frozen copies of the starting adapters (on resume: the checkpoint's)
            for agent in self.agents:
                store.add_reference(agent)
        return store

    @property
    def dir(self):
        """The run directory's path (``output_dir``)."""
        return self.run_dir.path

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
        """The steps left (from the checkpoint's next on resume), under a progress bar; with ``eval.at_start`` a
        fresh run is evaluated first (:attr:`eval_start`, logged with step 0)."""
        self.bar = tqdm(range(self.first_step, self.cfg.trainer.max_steps), desc=self.cfg.recipe, unit="step",
                        disable=not self.main)
        if self.cfg.eval.at_start and self.first_step == 0:
            self.eval_start = self.evaluate()
        for step in self.bar:
            self.step, self._step_start = step, time.perf_counter()
            yield step
        if self.first_step == self.cfg.trainer.max_steps and self.main:
            # resumed with nothing left to do (e.g. a stopped run, max_steps lowered)
            self.run_dir.export_missing_final(self.store, self.agents)

    def runner(self, step: int) -> Runner:
        """A runner whose request seeds are keyed by (run seed, step): every step's draws are its own."""
        return Runner(self.engine, self.sampling, seed=f"{self.cfg.seed}/{step}", progress=self._status)

    def _status(self, status) -> None:
        """Inside a step: the phases in flight, requests done, tok/s (see :class:`~selfevo.interaction.RunStatus`)."""
        if self.bar is not None:
            self.bar.set_postfix_str(str(status), refresh=True)

    def run_step(self, step: int, phases: Sequence[Phase], updates: Sequence[Update] | None = None,
                 metrics: Callable[[list[Episode]], dict] | None = None) -> tuple[list[Episode], dict]:
        """The one step skeleton every recipe runs: roll out each phase in order on one runner and call its
        ``after`` (:func:`~selfevo.loop.step.rollout`); score each phase's episodes with its reward source and
        assign the rewards; run ``updates`` (default: one :meth:`train` of every agent); return the step's episodes
        (phase order) and metrics: the phases' ``after`` metrics, :func:`turn_metrics`, the reward sources',
        ``metrics(episodes)`` (deep-merged: a recipe may add keys inside a source's section), ``train`` (the
        updates' per-agent stats), ``rollout_s``/``rollout_tokens``/``concurrency``/``prefill_tokens``/
        ``rollout_shapes`` and ``update_s``/``update_tokens``/``update_shapes``."""
        runner = self.runner(step)
        by_phase, out, rollout_s = rollout(runner, phases)
        rewarded = assign_rewards(phases, by_phase)
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

    def train(self, episodes: list[Episode], spec: UpdateSpec = UpdateSpec(), agents: list[str] | None = None,
              optimizer=None) -> dict:
        """One optimizer call per agent (``agents``, default all) over its rewarded turns, made rows as ``spec``
        says (:func:`~selfevo.optimizers.train_agents`), at the schedule's learning rate for the current step, with
        the run's optimizer unless ``optimizer`` is given; completions cut by the token limit are left out when
        ``trainer.mask_truncated`` (except turns whose limit is part of their format, ``meta["limit_by_design"]``)."""
        t = self.cfg.trainer
        self.store.set_lr(lr_at(self.step, t.lr, t.lr_schedule, t.warmup_steps, t.max_steps, t.min_lr_ratio))
        keep = (lambda turn: spec.trains(turn) and not (t.mask_truncated and turn.finish_reason == "length" and
                                                        not turn.meta.get("limit_by_design")))
        agree_on_rewards(episodes)
        return train_agents(self.store, optimizer or self.optimizer, episodes, agents or self.agents,
                            dataclasses.replace(spec, include=keep), progress=self._status)

    def end_step(self, step: int, episodes: list[Episode], metrics: dict, state: dict | None = None,
                 files: dict[str, str] | None = None) -> None:
        """Log the step, evaluate if due, checkpoint (with the recipe's ``state`` and ``files``, which also get an
        atomically written copy in the run directory), export adapters if due. ``step_s`` is logged: the step's
        wall time up to here (rollout, reward, update; no eval, no checkpoint). ``sandbox_fs`` is logged when
        code was verified since the last step: jobs per sandbox filesystem mode (``minimal-root``,
        ``read-only-host``, ``none``; :func:`selfevo.verifiers.sandbox.take_fs_modes`)."""
        metrics = {"step": step, **metrics, "step_s": round(time.perf_counter() - self._step_start, 2)}
        metrics.update(self._evaluations(step))
        sandbox_fs = take_fs_modes()  # this process's code-verifier jobs per sandbox filesystem mode
        if sandbox_fs:
            metrics["sandbox_fs"] = sandbox_fs
        if self.main:
            self.run_dir.write_step(step, episodes, metrics, self.store, self.agents, state, files)
        distributed.barrier()  # the step's checkpoint is complete before any rank goes on
        if self.bar is not None:
            self.bar.set_postfix({k: metrics[k] for k in ("reward", "parse_failure_rate") if k in metrics})

    def _evaluations(self, step: int) -> dict:
        """The held-out results logged with ``step``: ``eval_start`` (once, with the first step after it) and
        ``eval`` every ``eval.every`` steps and at the last."""
        out = {}
        if self.eval_start is not None:
            out["eval_start"], self.eval_start = self.eval_start, None
        every = self.cfg.eval.every
        if every and ((step + 1) % every == 0 or step == self.cfg.trainer.max_steps - 1):
            out["eval"] = self.evaluate()  # every rank: the runner splits the held-out tasks
        return out

    def evaluate(self) -> dict:
        """Every agent answers the held-out tasks once (``eval.*``; :func:`~selfevo.loop.heldout.heldout_accuracy`,
        ``selfevo eval``'s vanilla setup): ``{"n", "accuracy": {agent: accuracy}}``."""
        return heldout_accuracy(self.cfg, self.engine, self.store, self.agents, progress=self._status)

    # ---- the end ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        self.engine.close()
        self.run_dir.close()
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
            raise EngineError(f"{exc}; {resume_hint(self.step)}") from None

    def print_summary(self) -> None:
        """The closing lines (:mod:`selfevo.loop.summary`): steps, wall time, held-out accuracy first -> last, the
        recipe's tracked metrics, and the ``selfevo report`` command."""
        if self.bar is not None:
            self.bar.close()
        lines = summary.summary_lines(self.cfg.recipe, self.dir, summary.read_metrics(self.dir),
                                      time.perf_counter() - self._launch_start, list(self.cfg.eval.tasks))
        print("\n".join(lines), flush=True)
