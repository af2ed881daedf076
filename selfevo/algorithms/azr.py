"""AZR (Absolute Zero): one model proposes and solves code-reasoning tasks on (program, input, output) triplets —
deduction, abduction, induction — validated and checked by running the code; Task-Relative REINFORCE++.

    selfevo run azr                                         # preset cpu: embedded model (rarely a valid program)
    selfevo run azr trainer.max_steps=2 output_dir=runs/a1  # then: ... resume=true trainer.max_steps=3
    selfevo run azr --preset paper                          # arXiv 2505.03335 Table 3: B=64, K=6, n=8, lr 1e-6

Paper: arXiv 2505.03335, Sec. 3, Algorithm 1. One step, per kind in ``protocol.kinds`` (B = ``trainer.tasks_per_step``):
(1) propose phase — B propose tasks, each showing up to K triplets from the kind's buffer (induction: one program
from the deduction and abduction buffers); the proposer writes a program and an input (induction: exactly
``protocol.induction_inputs`` inputs, any other number being a format error, and a message); the task is validated
in the sandbox (:func:`~selfevo.verifiers.azr.validate_proposal`: runs, twice alike in each of ``protocol.runs``
processes, no banned word, literal inputs); a valid one gets n solver rollouts (its r̄_solve, Eq. 4) and enters the
kind's buffer; (2) solve phase — B solve tasks per kind: this step's new valid triplets first, then triplets drawn
from the buffer; (3) rewards Eq. 4-6 (``rewards/azr.py``); (4) one Task-Relative REINFORCE++ update of the one
adapter, advantages normalised per (kind, role): six baselines. The buffers start from the identity triplet and are
saved with the checkpoint (``RUN_DIR/buffers.json``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from selfevo.config import opt
from selfevo.interaction import Episode, ask
from selfevo.loop import Loop, Phase, RunCfg, TrainerCfg, Update, checkpoint
from selfevo.algorithms.pool import ItemBuffers
from selfevo.rewards import REWARD_SOURCES
from selfevo.roles.azr import KINDS, AZRProposer, AZRSolver
from selfevo.types import Task
from selfevo.verifiers.azr import BANNED, IDENTITY, IDENTITY_INDUCTION, solve_task, validate_proposal

AGENT = "azr"
REFERENCE_KINDS = {"deduction": ("deduction",), "abduction": ("abduction",), "induction": ("deduction", "abduction")}


@dataclass
class AZRProtocolCfg:
    kinds: list[str] = opt(list(KINDS), "task kinds proposed and solved each step", item_choices=KINDS,
                           nonempty=True)
    references: int = opt(6, "K: reference triplets shown to a deduction / abduction proposer (up to K)", ge=1)
    rollouts: int = opt(8, "n: solver rollouts that measure a valid proposed task's solve rate (Eq. 4)", ge=1)
    induction_inputs: int = opt(10, "inputs an induction proposer writes; half are shown, half are hidden tests",
                                ge=2)
    runs: int = opt(2, "separate sandbox runs (each calls f twice) that must all agree: the determinism check",
                    ge=1)
    banned: list[str] = opt(list(BANNED), "words a proposed program may not contain (the released code's list)")
    released_penalties: bool = opt(False, "Eq. 6 as the released code reads it for the proposer: a valid task with "
                                          "reward 0 gets -0.5, an invalid one -1 (default: the paper, -0.5 for "
                                          "any well-formatted invalid task)")
    open_blocks: bool = opt(False, "small models: each answer starts with its first block's fence (```python, "
                                   "```input, ```output)")
    train_proposer: bool = opt(True, "train on proposer turns")
    train_solver: bool = opt(True, "train on solver turns")


@dataclass
class AZRCfg(RunCfg):
    recipe: str = opt("azr", "the recipe", choices=("azr",))
    output_dir: str = opt("runs/azr", "run directory", nonempty=True)
    agents: int = opt(1, "must be 1: AZR's proposer and solver are one model (one adapter)", ge=1, le=1)
    trainer: TrainerCfg = opt(TrainerCfg(optimizer="task_relative", tasks_per_step=4),
                              "schedule and updates (tasks_per_step: B per kind and role)")
    protocol: AZRProtocolCfg = opt(AZRProtocolCfg, "AZR's task kinds, K, n, validation and penalties")


@dataclass
class Roles:
    """A proposer and a solver per kind (one adapter plays all of them)."""

    propose: dict
    solve: dict

    @classmethod
    def build(cls, p: AZRProtocolCfg) -> "Roles":
        return cls({k: AZRProposer(task_kind=k, open_block=p.open_blocks, banned=tuple(p.banned),
                                   n_inputs=p.induction_inputs) for k in KINDS},
                   {k: AZRSolver(task_kind=k, open_block=p.open_blocks) for k in KINDS})


def propose_program(roles: Roles, p: AZRProtocolCfg):
    """Proposer → validation in the sandbox → (a valid task) n solver rollouts, role ``estimate``. The episode's
    ``meta``: ``valid``, ``validity`` (``valid`` or why not) and, for a valid task, its ``triplet``."""

    def program(ep: Episode):
        meta = ep.task.meta["azr"]
        kind = meta["kind"]
        turn = yield ask(roles.propose[kind], AGENT, ep.task, label=f"{kind}.propose")
        triplet, reason = None, "format"
        if turn.parsed.ok:
            triplet, reason = validate_proposal(kind, turn.parsed.value, meta["references"][0], p.banned, p.runs)
        ep.meta.update(valid=triplet is not None, validity=reason or "valid")
        if triplet is not None:
            ep.meta["triplet"] = triplet
            task = solve_task(kind, triplet)
            yield [ask(roles.solve[kind], AGENT, task, label="estimate") for _ in range(p.rollouts)]

    return program


def solve_program(roles: Roles):
    def program(ep: Episode):
        kind = ep.task.meta["azr"]["kind"]
        yield ask(roles.solve[kind], AGENT, ep.task, label=f"{kind}.solve")

    return program


def propose_tasks(buffers: ItemBuffers, rng: random.Random, p: AZRProtocolCfg, b: int) -> list[Task]:
    """B propose tasks per kind, each with up to K references drawn from the kind's buffer (induction: one program
    from the deduction and abduction buffers)."""
    tasks = []
    for kind in p.kinds:
        kinds = REFERENCE_KINDS[kind]
        k = 1 if kind == "induction" else min(p.references, sum(buffers.sizes().get(x, 0) for x in kinds))
        for i in range(b):
            refs = buffers.sample(rng, kinds, k)
            tasks.append(Task(f"{kind}-propose-{i}", "code", "", meta={"azr": {"kind": kind, "references": refs}}))
    return tasks


def start_buffers(loop: Loop) -> ItemBuffers:
    """The buffers as checkpointed (resume) or the identity triplet in each (the paper's zero triplet)."""
    saved = checkpoint.read_file(loop.dir, "buffers.json") if loop.first_step else None
    if saved is not None:
        return ItemBuffers.from_json(saved)
    return ItemBuffers({"deduction": [dict(IDENTITY)], "abduction": [dict(IDENTITY)],
                        "induction": [dict(IDENTITY_INDUCTION)]})


def step_of(loop: Loop, step: int, buffers: ItemBuffers, roles: Roles, rewards: tuple) -> tuple[list, dict]:
    """Algorithm 1, batched: propose (validation inside each episode), admission of the valid triplets to the
    buffers, solve on this step's new triplets topped up from the buffers; rewards; one update, six baselines."""
    p, b = loop.cfg.protocol, loop.cfg.trainer.tasks_per_step
    rng = random.Random(f"{loop.cfg.seed}/{step}/buffers")
    new: dict[str, list[dict]] = {k: [] for k in KINDS}

    def admit(episodes: list[Episode]) -> dict:
        reasons: dict[str, int] = {}
        for ep in episodes:
            reasons[ep.meta["validity"].split(":")[0]] = reasons.get(ep.meta["validity"].split(":")[0], 0) + 1
            if ep.meta["valid"]:
                kind = ep.task.meta["azr"]["kind"]
                new[kind].append(ep.meta["triplet"])
                ep.meta["admitted"] = buffers.add(kind, ep.meta["triplet"])
        return {"buffer_size": buffers.sizes(), "validity": reasons}

    def solve_tasks() -> list[Task]:
        return [solve_task(k, t) for k in p.kinds for t in (new[k] + buffers.sample(rng, k, b - len(new[k])))[:b]]

    trained = {"propose": p.train_proposer, "solve": p.train_solver}
    phases = [Phase("propose", propose_tasks(buffers, rng, p, b), propose_program(roles, p), rewards[0], key="p",
                    after=admit),
              Phase("solve", solve_tasks, solve_program(roles), rewards[1], key="s")]
    return loop.run_step(step, phases, [Update(group_by=lambda t: t.role,
                                               include=lambda t: trained.get(t.role.rpartition(".")[2], False))])


def main(cfg) -> None:
    roles = Roles.build(cfg.protocol)
    rewards = (REWARD_SOURCES.get("azr_propose")(cfg.protocol.released_penalties), REWARD_SOURCES.get("azr_solve")())
    with Loop(cfg, agents=[AGENT]) as loop:
        buffers = start_buffers(loop)
        for step in loop.steps():
            episodes, metrics = step_of(loop, step, buffers, roles, rewards)
            loop.end_step(step, episodes, metrics, files={"buffers.json": buffers.to_json()})
