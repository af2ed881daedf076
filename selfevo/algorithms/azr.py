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
from the buffer; (3) rewards Eq. 4-6 (:func:`propose_rewards`, :func:`solve_rewards`); (4) one Task-Relative REINFORCE++ update of the one
adapter, advantages normalised per label (kind and part): six baselines. The buffers start from the identity triplet
and are saved with the checkpoint (``RUN_DIR/buffers.json``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from selfevo.algorithms.pool import ItemBuffers
from selfevo.config import opt
from selfevo.interaction import Episode, ask
from selfevo.loop import Loop, Phase, RunCfg, TrainerCfg, Update, checkpoint
from selfevo.optimizers import UpdateSpec
from selfevo.rewards import RewardResult, RewardSource
from selfevo.rewards.formulas import azr_propose_reward, azr_reward, azr_solve_rate
from selfevo.roles.azr import KINDS, AZRProposer, AZRSolver
from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.azr import BANNED, IDENTITY, IDENTITY_INDUCTION, solve_task, validate_proposal

AGENT = "azr"
# turn labels: ``<kind>.propose`` and ``<kind>.solve`` (six, each its own advantage group), and the solver rollouts
# that measure a proposed task's r̄_solve
PROPOSE, SOLVE, ESTIMATE = "propose", "solve", "estimate"


def label(kind: str, part: str) -> str:
    """The label of a ``kind``'s proposer (``part`` :data:`PROPOSE`) or solver (:data:`SOLVE`) turn."""
    return f"{kind}.{part}"


def part_of(turn_label: str) -> str:
    """:data:`PROPOSE` or :data:`SOLVE` of a label made by :func:`label` (:data:`ESTIMATE` stays itself)."""
    return turn_label.rpartition(".")[2]
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
    n_agents: int = opt(1, "must be 1: AZR's proposer and solver are one model (one adapter)", ge=1, le=1)
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
    """Proposer → validation in the sandbox → (a valid task) n solver rollouts, label :data:`ESTIMATE`. The episode's
    ``meta``: ``valid``, ``validity`` (``valid`` or why not) and, for a valid task, its ``triplet``."""

    def program(ep: Episode):
        meta = ep.task.meta["azr"]
        kind = meta["kind"]
        turn = yield ask(roles.propose[kind], AGENT, ep.task, label=label(kind, PROPOSE))
        triplet, reason = None, "format"
        if turn.parsed.ok:
            triplet, reason = validate_proposal(kind, turn.parsed.value, meta["references"][0], p.banned, p.runs)
        ep.meta.update(valid=triplet is not None, validity=reason or "valid")
        if triplet is not None:
            ep.meta["triplet"] = triplet
            task = solve_task(kind, triplet)
            yield [ask(roles.solve[kind], AGENT, task, label=ESTIMATE) for _ in range(p.rollouts)]

    return program


def solve_program(roles: Roles):
    def program(ep: Episode):
        kind = ep.task.meta["azr"]["kind"]
        yield ask(roles.solve[kind], AGENT, ep.task, label=label(kind, SOLVE))

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

    phases = [Phase("propose", propose_tasks(buffers, rng, p, b), propose_program(roles, p), rewards[0], key="p",
                    after=admit),
              Phase("solve", solve_tasks, solve_program(roles), rewards[1], key="s")]
    return loop.run_step(step, phases, [Update(spec=learning_rule(p))])


def learning_rule(p: AZRProtocolCfg) -> UpdateSpec:
    """How AZR learns (Sec. 3.3.5): Task-Relative REINFORCE++ (``trainer.optimizer``, :class:`AZRCfg`'s default) on
    the proposer and solver turns that train (``protocol.train_proposer``, ``train_solver``), advantages normalised
    per label: six baselines, one per (kind, propose | solve); the estimate rollouts never train."""
    trained = {PROPOSE: p.train_proposer, SOLVE: p.train_solver}
    return UpdateSpec(group_by=lambda t: t.label, include=lambda t: trained.get(part_of(t.label), False))


# ---- rewards (Sec. 3.1-3.3) --------------------------------------------------------------------------------------
def _ok(turn) -> bool:
    return turn.parsed is not None and turn.parsed.ok


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _by_kind(pairs: list[tuple[str, float]], name: str) -> dict:
    kinds = sorted({k for k, _ in pairs})
    return {f"{name}.{k}": _mean([v for kk, v in pairs if kk == k]) for k in kinds}


def propose_rewards(released_penalties: bool = False) -> RewardSource:
    """Reward source of propose episodes (one proposer turn and, for a valid task, its :data:`ESTIMATE` rollouts;
    ``valid`` and ``triplet`` in ``episode.meta`` from :func:`propose_program`). Proposer: Eq. 6 around Eq. 4 —
    ``1 - r̄_solve`` (0 for r̄_solve 0 or 1) for a valid task, -0.5 for a well-formatted invalid one, -1 for a format
    error; ``released_penalties``: the released code's reading instead — a valid task whose reward is 0 gets -0.5 and
    an invalid one -1 (its validation failures zero the format score). The rollouts are measured, not trained (reward
    None). Metrics per kind: ``valid.<kind>`` (share of proposals that became triplets), ``solve_rate.<kind>`` (mean
    r̄_solve of the valid ones, also the episode's ``solve_rate``)."""

    def source(episodes: list[Episode]) -> RewardResult:
        out, valid, rates = [], [], []
        for ep in episodes:
            kind, rewards = ep.task.meta["azr"]["kind"], {}
            i = next(j for j, t in enumerate(ep.turns) if t.label == label(kind, PROPOSE))
            is_valid, r_propose = bool(ep.meta.get("valid")), 0.0
            if is_valid:
                task = solve_task(kind, ep.meta["triplet"])
                rate = azr_solve_rate([verify(task, t.answer).score >= 1.0 for t in ep.turns if t.label == ESTIMATE])
                r_propose = azr_propose_reward(rate)
                ep.meta["solve_rate"] = rate
                rates.append((kind, rate))
            formatted, passable = (is_valid, is_valid and r_propose > 0) if released_penalties else \
                (_ok(ep.turns[i]), is_valid)
            rewards[i] = azr_reward(r_propose, formatted, passable)
            rewards.update({j: None for j, t in enumerate(ep.turns) if t.label == ESTIMATE})
            valid.append((kind, float(is_valid)))
            out.append(rewards)
        return RewardResult(out, {**_by_kind(valid, "valid"), **_by_kind(rates, "solve_rate")})

    return source


def solve_rewards() -> RewardSource:
    """Reward source of solve episodes (one solver turn on a triplet's solve task): Eq. 6 around Eq. 5 — 1 if the
    ``azr`` verifier finds it right, -0.5 if wrong but formatted, -1 if its answer block is missing. Metrics:
    ``accuracy.<kind>`` (solve episodes right)."""

    def source(episodes: list[Episode]) -> RewardResult:
        out, correct = [], []
        for ep in episodes:
            kind = ep.task.meta["azr"]["kind"]
            i = next(j for j, t in enumerate(ep.turns) if t.label == label(kind, SOLVE))
            right = verify(ep.task, ep.turns[i].answer).score >= 1.0
            correct.append((kind, float(right)))
            out.append({i: azr_reward(1.0, _ok(ep.turns[i]), right)})
        return RewardResult(out, _by_kind(correct, "accuracy"))

    return source


def main(cfg, command_line: list[str] | None = None) -> None:
    roles = Roles.build(cfg.protocol)
    rewards = (propose_rewards(cfg.protocol.released_penalties), solve_rewards())
    with Loop(cfg, agents=[AGENT], command_line=command_line) as loop:
        buffers = start_buffers(loop)
        for step in loop.steps():
            episodes, metrics = step_of(loop, step, buffers, roles, rewards)
            loop.end_step(step, episodes, metrics, files={"buffers.json": buffers.to_json()})
