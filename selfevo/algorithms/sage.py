"""SAGE: Challenger, Planner, Solver and Critic on one backbone; verifier rewards; a growing, verified question pool;
Task-Relative REINFORCE++.

    selfevo run sage                                           # preset cpu: embedded model, one shared adapter
    selfevo run sage trainer.max_steps=2 output_dir=runs/s1    # then: ... resume=true trainer.max_steps=3
    selfevo run sage --preset paper                            # Table 4: LoRA r=128, lr 3e-6, batch 128, 200 steps
    selfevo run sage protocol.train_challenger=false           # ablation (Table 3)

Paper: arXiv 2603.15255 (``papers/003``), Sec. 4, Algorithm 1, Tables 3-5. One step (Algorithm 1, batched):
(1) challenge phase — ``protocol.challenges`` reference items drawn from the pool; the Challenger writes a new
question with its verifier; the Critic scores the question (s_q) while N_s Solver samples try it (r_d = 1 − mean
verified success, Eq. 4); an item enters the pool iff it parses, s_q ≥ α, its verifier is valid (math: the answer
parses; code: the reference solution passes its own tests twice in the sandbox and the tests call the named
function) and it is new; (2) plan-solve phase — ``trainer.tasks_per_step`` items drawn from the pool; the Planner
plans, the Critic scores the plan (s_p), the Solver answers with the plan iff s_p ≥ β; (3) rewards Eq. 5-13
(:func:`challenge_rewards` from each challenge episode's :class:`Admission`, :func:`plan_solve_rewards`); (4) one Task-Relative REINFORCE++ update of the shared adapter over every role's turns,
advantages normalised per turn label (Eq. 1). The pool is saved with the checkpoint (``RUN_DIR/pool.jsonl``).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Mapping

from selfevo.algorithms.pool import QuestionPool, admit_each, note_new_task, start_pool
from selfevo.config import ConfigError, SamplingCfg, opt
from selfevo.interaction import Episode, Turn, ask
from selfevo.loop import DataCfg, Loop, Phase, RunCfg, TrainerCfg, Update
from selfevo.optimizers import UpdateSpec
from selfevo.rewards import RewardResult, RewardSource
from selfevo.rewards.formulas import (sage_challenger_reward, sage_critic_reward, sage_difficulty, sage_norm,
                                      sage_plan_gate, sage_planner_reward, sage_solver_reward, soft_format_reward)
from selfevo.roles import get_role
from selfevo.roles.sage import format_tags
from selfevo.tasks import sage_seed_set
from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.validate import check_generated, static_check, validate_item

# the roles, each a turn label too; DIFFICULTY labels the Solver samples that measure a new question's r_d (Eq. 4):
# they answer the episode's generated task (NEW_TASK_LABELS: what selfevo report verifies against it)
ROLES = CHALLENGER, PLANNER, SOLVER, CRITIC = ("challenger", "planner", "solver", "critic")
DIFFICULTY = "difficulty"
NEW_TASK_LABELS = (DIFFICULTY,)


@dataclass
class SageProtocolCfg:
    challenges: int = opt(4, "reference items the Challenger writes a new question from per step", ge=0)
    solver_samples: int = opt(4, "N_s: Solver samples per new question for its difficulty (not given in the paper)",
                              ge=1)
    alpha: float = opt(0.7, "α: a new question enters the pool only if Norm(critic score) ≥ α", ge=0, le=1)
    beta: float = opt(0.3, "β: the Solver sees the plan only if Norm(critic score of the plan) ≥ β", ge=0, le=1)
    plan: bool = opt(True, "run the Planner (off: the Solver answers alone, reward ½ s_gt + ½ r_f)")
    norm_one_is_max: bool = opt(False, "Eq. 2 taken literally: a Critic score of 1 ('very bad') normalises to 1.0 "
                                       "(default: 1 is the bottom of the 1-10 scale the Critic is asked for, 0.0)")
    pay_duplicates: bool = opt(False, "a question rejected as a duplicate still gets Eq. 5 (Alg. 1 literally: "
                                      "D ∪ {q} is a no-op); default: Eq. 6, as for any item that is not admitted")
    sample_after_admission: bool = opt(True, "Alg. 1 order: plan-solve items are drawn after this step's new items "
                                             "entered the pool (false: drawn before the challenge phase)")
    difficulty_filter: bool = opt(False, "also reject new items whose r_d is outside [min, max] (not in Alg. 1; "
                                         "a rejected item is paid Eq. 6)")
    min_difficulty: float = opt(0.0, "difficulty filter: lowest admitted r_d", ge=0, le=1)
    max_difficulty: float = opt(1.0, "difficulty filter: highest admitted r_d", ge=0, le=1)
    train_challenger: bool = opt(True, "train on Challenger turns (Table 3 ablation: false)")
    train_planner: bool = opt(True, "train on Planner turns")
    train_solver: bool = opt(True, "train on Solver turns (Table 3 ablation: false)")
    train_critic: bool = opt(True, "train on Critic turns (Table 3 ablation: false)")
    per_role_adapters: bool = opt(False, "one adapter per role instead of one shared adapter")
    critic_temperature: float = opt(0.1, "the Critic's sampling temperature (Table 4: 0.1)", ge=0)
    challenger_prefix: str = opt("", "start Challenger answers with this (small models: '<question>')")
    planner_prefix: str = opt("", "start Planner answers with this (small models: '<plan>')")
    solver_prefix: str = opt("", "start Solver answers with this (small models: '<answer>')")
    critic_prefix: str = opt("", "start Critic answers with this (small models: '<score>')")
    tag_chain: bool = opt(False, "small models: the Challenger writes its tags one at a time (each stage starts "
                                 "with the next opening tag and stops at its closing tag)")
    lambda_plan: float = opt(0.5, "Eq. 8 weight of the plan score", ge=0, le=1)
    lambda_f: float = opt(0.5, "Eq. 8 weight of the planner's format", ge=0, le=1)
    w_plan: float = opt(0.2, "Eq. 11 w_p", ge=0, le=1)
    w_correct: float = opt(0.6, "Eq. 11 w_c", ge=0, le=1)
    w_format: float = opt(0.2, "Eq. 11 w_f", ge=0, le=1)


@dataclass
class SageDataCfg(DataCfg):
    tasks: list[str] = opt([], "seed items (benchmarks or JSONL with verifiers); empty: Table 5's 500-item mix")


@dataclass
class SageCfg(RunCfg):
    recipe: str = opt("sage", "the recipe", choices=("sage",))
    output_dir: str = opt("runs/sage", "run directory", nonempty=True)
    n_agents: int = opt(1, "must be 1: SAGE's agents are roles of one backbone (protocol.per_role_adapters)", ge=1,
                      le=1)
    sampling: SamplingCfg = opt(SamplingCfg(max_new_tokens=256, temperature=0.6), "sampling (Table 4: 0.6)")
    trainer: TrainerCfg = opt(TrainerCfg(optimizer="task_relative", tasks_per_step=8), "schedule and updates")
    protocol: SageProtocolCfg = opt(SageProtocolCfg, "SAGE's phases, thresholds and ablation switches")
    data: SageDataCfg = opt(SageDataCfg, "the seed set of the question pool")

    @staticmethod
    def check(cfg) -> None:
        RunCfg.check(cfg)
        p = cfg.protocol
        if abs(p.w_plan + p.w_correct + p.w_format - 1) > 1e-9:
            raise ConfigError("protocol.w_plan + w_correct + w_format must be 1 (Eq. 11)")
        if p.min_difficulty > p.max_difficulty:
            raise ConfigError("protocol.min_difficulty must be <= protocol.max_difficulty")


# ---- roles and episode programs ---------------------------------------------------------------------------------
@dataclass
class Cast:
    """Who plays each role — the adapter (agent) of each: one shared, or one per role — and the roles with their
    format options."""

    players: dict[str, str]
    roles: dict

    @classmethod
    def build(cls, p: SageProtocolCfg) -> "Cast":
        players = {r: (r if p.per_role_adapters else "sage") for r in ROLES}
        roles = {r: get_role(f"sage.{r}", prefix=getattr(p, f"{r}_prefix")) for r in ROLES}
        roles[CRITIC].temperature = p.critic_temperature
        return cls(players, roles)

    def agents(self) -> list[str]:
        """The adapters that play the roles, each once."""
        return list(dict.fromkeys(self.players.values()))

    def ask(self, role: str, task: Task, label: str | None = None, **kw):
        return ask(self.roles[role], self.players[role], task, label=label or role, **kw)


CHAIN = {"math": ("question", "answer"), "code": ("question", "tests", "solution")}


def challenge_program(a: Cast, n_samples: int, tag_chain: bool = False):
    """Challenger (one turn, or one per tag with ``tag_chain``) → (Critic on the question ‖ N_s Solver samples).
    An item whose verifier fails a check that runs no code (:func:`prescreen`) is still scored by the Critic (it
    gets Eq. 6 with that score) but not tried by the Solver: its r_d would not be used."""

    def program(ep: Episode):
        ch = yield from chained_challenger(a, ep) if tag_chain else single_challenger(a, ep)
        if not ch.parsed.ok:
            return
        new = ch.parsed.value
        note_new_task(ep, new, ("id", "question", "reference", "tests", "entry_point"))
        solvers = [] if prescreen(new)[0] else [a.ask(SOLVER, new, label=DIFFICULTY) for _ in range(n_samples)]
        yield [a.ask(CRITIC, new, refs={"target": ch}, subject="question"), *solvers]

    return program


def prescreen(task: Task) -> tuple[str | None, str]:
    """The admission checks that run no code: the verifier's format (:func:`static_check`) and what a generated item
    must pass (:func:`check_generated`)."""
    reason, detail = static_check(task)
    return (reason, detail) if reason else check_generated(task)


def single_challenger(a: Cast, ep: Episode):
    return (yield a.ask(CHALLENGER, ep.task, reference=ep.task))


def chained_challenger(a: Cast, ep: Episode):
    """One stage per tag: stage i starts with the tags written so far and the next opening tag, and stops at its
    closing tag; the last stage's turn is parsed from the whole chained answer (every stage is a challenger turn)."""
    written = a.roles[CHALLENGER].prefix
    for tag in CHAIN[ep.task.domain]:
        stage = a.ask(CHALLENGER, ep.task, reference=ep.task)
        stage.prefix, stage.stop = written + ("" if written.endswith(f"<{tag}>") else f"<{tag}>"), (f"</{tag}>",)
        turn = yield stage
        written = turn.answer + f"</{tag}>\n"
    turn.parsed = a.roles[CHALLENGER].parse(written, reference=ep.task)
    turn.meta["full_answer"] = written
    return turn


def plan_solve_program(a: Cast, p: SageProtocolCfg):
    """Planner → Critic on the plan → Solver (with the plan iff Norm(s_p) ≥ β and the plan is not empty); the
    episode's ``meta["plan_shown"]`` says whether the Solver saw it (only then is it paid s̃_p, Eq. 10)."""

    def program(ep: Episode):
        plan = None
        if p.plan:
            planner = yield a.ask(PLANNER, ep.task)
            text = (planner.parsed.value if planner.parsed.ok else re.sub(r"</?plan>", "", planner.text)).strip()
            critic = yield a.ask(CRITIC, ep.task, refs={"target": planner}, subject="plan", plan=text)
            s_p = sage_norm(critic.parsed.value if critic.parsed.ok else None, one_is_min=not p.norm_one_is_max)
            plan = text if sage_plan_gate(s_p, p.beta) and text else None
            ep.meta["plan_shown"] = plan is not None
        yield a.ask(SOLVER, ep.task, **({"plan": plan} if plan else {}))

    return program


# ---- admission to the pool --------------------------------------------------------------------------------------
@dataclass
class Admission:
    """What Algorithm 1 lines 7-13 found for one challenge episode (:func:`admit`): ``reason`` None = admitted, else
    why not; ``s_q`` Norm of the Critic's question score (None: no question parsed); ``valid`` whether the item's
    verifier passed its checks (None: not checked, s_q < α); ``r_d`` 1 − the difficulty samples' verified success
    (Eq. 4; None: not measured); ``duplicate`` (the question is already in the pool) and ``difficulty_filtered``
    (rejected by the optional difficulty filter)."""

    reason: str | None = None
    s_q: float | None = None
    valid: bool | None = None
    r_d: float | None = None
    duplicate: bool = False
    difficulty_filtered: bool = False

    def credited(self, pay_duplicates: bool) -> bool:
        """Whether the Challenger is paid Eq. 5 (else Eq. 6): a valid verifier, not filtered, and not a rejected
        duplicate (unless ``pay_duplicates``)."""
        return bool(self.valid) and not self.difficulty_filtered and (pay_duplicates or not self.duplicate)

    def record(self) -> dict:
        """The fields that were found, as the episode's log records them (``episodes.jsonl``)."""
        found = {"s_q": self.s_q, "valid": self.valid, "r_d": self.r_d}
        flags = {"duplicate": self.duplicate, "difficulty_filtered": self.difficulty_filtered}
        return {**{k: v for k, v in found.items() if v is not None}, **{k: True for k, v in flags.items() if v}}


def admit(ep: Episode, pool: QuestionPool, p: SageProtocolCfg, step: int) -> Admission:
    """Algorithm 1 lines 7-13 for one challenge episode: its :class:`Admission`; an admitted item is added to the
    pool. The verifier is valid when :func:`validate_item` (math: the answer parses; code: format, the reference
    passes twice) and :func:`check_generated` (no words in a math answer, no answer in the question, a reference
    that verifies against itself) accept it."""
    ch = [t for t in ep.turns if t.label == CHALLENGER][-1]
    if not ch.parsed.ok:
        return Admission("format")
    new = ch.parsed.value
    critic = next(t for t in ep.turns if t.label == CRITIC)
    s_q = sage_norm(critic.parsed.value if critic.parsed.ok else None, one_is_min=not p.norm_one_is_max)
    if s_q < p.alpha:
        return Admission("low quality", s_q)
    reason = prescreen(new)[0] or validate_item(new)
    if reason is not None:
        return Admission(reason, s_q, valid=False)
    r_d = sage_difficulty([verify(new, t.text).score for t in ep.turns if t.label == DIFFICULTY])
    if pool.contains(new.question):
        return Admission("duplicate", s_q, True, r_d, duplicate=True)
    if p.difficulty_filter and not p.min_difficulty <= r_d <= p.max_difficulty:
        return Admission("too easy" if r_d < p.min_difficulty else "too hard", s_q, True, r_d,
                         difficulty_filtered=True)
    pool.add(new, f"step {step}", r_d)
    return Admission(None, s_q, True, r_d)


# ---- rewards (Eq. 5-13) -----------------------------------------------------------------------------------------
def _score(turn: Turn | None, one_is_min: bool) -> float | None:
    """Norm of a Critic turn's parsed 1-10 score (Eq. 2; an unparsed score is Norm's 'otherwise', 0.5)."""
    if turn is None:
        return None
    return sage_norm(turn.parsed.value if turn.parsed is not None and turn.parsed.ok else None, one_is_min)


def _rf(turn: Turn, domain: str) -> float:
    """r_f: :func:`soft_format_reward` of a turn's whole answer (prefix included; a staged Challenger's chained
    answer is in ``meta["full_answer"]``) with its role's tags (a difficulty sample's: the Solver's)."""
    answer = turn.meta.get("full_answer", turn.answer)
    return soft_format_reward(answer, format_tags(turn.label if turn.label != DIFFICULTY else SOLVER, domain))


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def challenge_rewards(p: SageProtocolCfg, admissions: Mapping[str, Admission]) -> RewardSource:
    """Reward source of challenge episodes (the Challenger's turns: one, or one per tag when it writes them in
    stages, the last holding the whole answer; if its question parsed, a Critic turn and N_s difficulty samples),
    each paid from its :class:`Admission` (``admissions[episode.key]``). Challenger: Eq. 5 when credited
    (:meth:`Admission.credited`), else Eq. 6 (an item that does not enter the pool; ``s_q = 0`` when no question
    parsed). Critic: Eq. 13. The difficulty samples only measure r_d: no reward, not trained."""

    def source(episodes: list[Episode]) -> RewardResult:
        out, formats = [], {CHALLENGER: [], CRITIC: []}
        for ep in episodes:
            domain, seen = ep.task.domain, admissions[ep.key]
            stages = [i for i, t in enumerate(ep.turns) if t.label == CHALLENGER]
            r_f = _rf(ep.turns[stages[-1]], domain)
            formats[CHALLENGER].append(r_f)
            r_c = sage_challenger_reward(seen.s_q or 0.0, seen.r_d if seen.r_d is not None else 0.0, r_f,
                                         seen.credited(p.pay_duplicates), p.alpha)
            rewards: dict[int, float | None] = {i: r_c for i in stages}
            for i, t in enumerate(ep.turns):
                if t.label == CRITIC:
                    rewards[i] = sage_critic_reward(_rf(t, domain))
                    formats[CRITIC].append(rewards[i])
                elif t.label != CHALLENGER:
                    rewards[i] = None  # difficulty samples: measured, not trained
            out.append(rewards)
        return RewardResult(out, {f"format.{k}": _mean(v) for k, v in formats.items()})

    return source


def plan_solve_rewards(p: SageProtocolCfg) -> RewardSource:
    """Reward source of plan-solve episodes: Planner Eq. 8; Critic on the plan Eq. 13; Solver Eq. 10-11 with
    ``s_gt`` from the task's verifier and s̃_p = 0 for a plan it did not see (``meta["plan_shown"]``; the ½/½
    fallback when the planner is off). A Critic score of 1 normalises to 0 unless ``protocol.norm_one_is_max``."""
    weights, one_is_min = (p.w_plan, p.w_correct, p.w_format), not p.norm_one_is_max

    def source(episodes: list[Episode]) -> RewardResult:
        out, correct = [], []
        formats: dict[str, list[float]] = {PLANNER: [], SOLVER: [], CRITIC: []}
        for ep in episodes:
            domain, by_label = ep.task.domain, {t.label: i for i, t in enumerate(ep.turns)}
            rewards: dict[int, float | None] = {}
            s_p = _score(ep.turns[by_label[CRITIC]], one_is_min) if CRITIC in by_label else None
            if PLANNER in by_label:
                i = by_label[PLANNER]
                formats[PLANNER].append(r_f := _rf(ep.turns[i], domain))
                rewards[i] = sage_planner_reward(s_p, r_f, p.lambda_plan, p.lambda_f)
            if CRITIC in by_label:
                i = by_label[CRITIC]
                rewards[i] = sage_critic_reward(_rf(ep.turns[i], domain))
                formats[CRITIC].append(rewards[i])
            i = by_label[SOLVER]
            s_gt = float(verify(ep.task, ep.turns[i].text).score)
            formats[SOLVER].append(r_f := _rf(ep.turns[i], domain))
            correct.append(s_gt >= 1.0)
            shown = s_p if ep.meta.get("plan_shown", True) else 0.0  # s̃_p is paid only for a plan the Solver saw
            rewards[i] = sage_solver_reward(s_gt, r_f, shown, p.beta, weights)
            out.append(rewards)
        metrics = {"solver_accuracy": _mean([float(c) for c in correct]),
                   **{f"format.{k}": _mean(v) for k, v in formats.items()}}
        return RewardResult(out, metrics)

    return source


# ---- the loop ---------------------------------------------------------------------------------------------------
def seed_pool(loop: Loop) -> QuestionPool:
    """The pool as checkpointed (resume) or the seed set (data.tasks, else Table 5's mix)."""
    d = loop.cfg.data
    return start_pool(loop, lambda: sage_seed_set(loop.cfg.seed, d.data_root, d.source))


def step_of(loop: Loop, step: int, pool: QuestionPool, cast: Cast) -> tuple[list, dict]:
    """Algorithm 1, batched: the challenge phase on reference items drawn from the pool, admission (lines 7-13)
    right after it (each episode's :class:`Admission` logged in its meta and paid by :func:`challenge_rewards`),
    then the plan-solve phase on items drawn from the pool as admission left it (line 16; drawn before the
    challenge phase with ``protocol.sample_after_admission=false``); rewards; one Task-Relative REINFORCE++ update
    of every trained role's turns, advantages normalised per turn label."""
    p = loop.cfg.protocol
    rng = random.Random(f"{loop.cfg.seed}/{step}/pool")
    refs = pool.sample(rng, p.challenges) if p.challenges else []
    draw = lambda: pool.sample(rng, loop.cfg.trainer.tasks_per_step)  # noqa: E731
    items = draw if p.sample_after_admission else draw()
    admissions: dict[str, Admission] = {}

    def admit_one(ep: Episode) -> str | None:
        admissions[ep.key] = seen = admit(ep, pool, p, step)
        ep.meta.update(seen.record())
        return seen.reason

    phases = [Phase("challenge", refs, challenge_program(cast, p.solver_samples, p.tag_chain),
                    challenge_rewards(p, admissions), key="c", after=lambda eps: admit_each(eps, pool, admit_one)),
              Phase("plan-solve", items, plan_solve_program(cast, p), plan_solve_rewards(p), key="s")]
    return loop.run_step(step, phases, [Update(spec=learning_rule(p))])


def learning_rule(p: SageProtocolCfg) -> UpdateSpec:
    """How SAGE learns (Eq. 1): Task-Relative REINFORCE++ (``trainer.optimizer``, :class:`SageCfg`'s default) on
    the turns of every trained role (``protocol.train_<role>``), advantages normalised per label: a baseline per
    role (the difficulty samples carry no reward and never train)."""
    trained = {r for r in ROLES if getattr(p, f"train_{r}")}
    return UpdateSpec(group_by=lambda t: t.label, include=lambda t: t.label in trained)


def main(cfg, command_line: list[str] | None = None) -> None:
    cast = Cast.build(cfg.protocol)
    with Loop(cfg, agents=cast.agents(), command_line=command_line) as loop:
        pool = seed_pool(loop)
        for step in loop.steps():
            episodes, metrics = step_of(loop, step, pool, cast)
            loop.end_step(step, episodes, metrics, files={"pool.jsonl": pool.to_jsonl()})
