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
(``rewards/sage.py``); (4) one Task-Relative REINFORCE++ update of the shared adapter over every role's turns,
advantages normalised per role (Eq. 1). The pool is saved with the checkpoint (``RUN_DIR/pool.jsonl``).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from selfevo.config import ConfigError, SamplingCfg, opt
from selfevo.interaction import Episode, ask
from selfevo.loop import DataCfg, Loop, Phase, RunCfg, TrainerCfg, Update
from selfevo.algorithms.pool import QuestionPool, admit_each, start_pool
from selfevo.rewards import REWARD_SOURCES
from selfevo.rewards.formulas import sage_difficulty, sage_norm, sage_plan_gate
from selfevo.roles import get_role
from selfevo.roles.sage import format_tags
from selfevo.tasks import sage_seed_set
from selfevo.types import Task
from selfevo.verifiers import verify
from selfevo.verifiers.validate import check_generated, static_check, validate_item

ROLES = ("challenger", "planner", "solver", "critic")


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
    agents: int = opt(1, "must be 1: SAGE's agents are roles of one backbone (protocol.per_role_adapters)", ge=1,
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
class Agents:
    """Which adapter plays each role (one shared, or one per role) and the roles with their format options."""

    names: dict[str, str]
    roles: dict

    @classmethod
    def build(cls, p: SageProtocolCfg) -> "Agents":
        names = {r: (r if p.per_role_adapters else "sage") for r in ROLES}
        roles = {r: get_role(f"sage.{r}", prefix=getattr(p, f"{r}_prefix")) for r in ROLES}
        roles["critic"].temperature = p.critic_temperature
        return cls(names, roles)

    def ask(self, role: str, task: Task, label: str | None = None, **kw):
        return ask(self.roles[role], self.names[role], task, label=label or role, **kw)


CHAIN = {"math": ("question", "answer"), "code": ("question", "tests", "solution")}


def challenge_program(a: Agents, n_samples: int, tag_chain: bool = False):
    """Challenger (one turn, or one per tag with ``tag_chain``) → (Critic on the question ‖ N_s Solver samples).
    An item whose verifier fails a check that runs no code (:func:`prescreen`) is still scored by the Critic (it
    gets Eq. 6 with that score) but not tried by the Solver: its r_d would not be used."""

    def program(ep: Episode):
        ch = yield from chained_challenger(a, ep) if tag_chain else single_challenger(a, ep)
        if not ch.parsed.ok:
            return
        new = ch.parsed.value
        ep.meta["new_task"] = {"id": new.id, "question": new.question, "reference": new.reference,
                               "tests": new.tests, "entry_point": new.entry_point}
        solvers = [] if prescreen(new)[0] else [a.ask("solver", new, label="difficulty") for _ in range(n_samples)]
        yield [a.ask("critic", new, refs={"target": ch}, subject="question"), *solvers]

    return program


def prescreen(task: Task) -> tuple[str | None, str]:
    """The admission checks that run no code: the verifier's format (:func:`static_check`) and what a generated item
    must pass (:func:`check_generated`)."""
    reason, detail = static_check(task)
    return (reason, detail) if reason else check_generated(task)


def single_challenger(a: Agents, ep: Episode):
    return (yield a.ask("challenger", ep.task, reference=ep.task))


def chained_challenger(a: Agents, ep: Episode):
    """One stage per tag: stage i starts with the tags written so far and the next opening tag, and stops at its
    closing tag; the last stage's turn is parsed from the whole chained answer (every stage is a challenger turn)."""
    written = a.roles["challenger"].prefix
    for tag in CHAIN[ep.task.domain]:
        stage = a.ask("challenger", ep.task, reference=ep.task)
        stage.prefix, stage.stop = written + ("" if written.endswith(f"<{tag}>") else f"<{tag}>"), (f"</{tag}>",)
        turn = yield stage
        written = turn.answer + f"</{tag}>\n"
    turn.parsed = a.roles["challenger"].parse(written, reference=ep.task)
    turn.meta["full_answer"] = written
    return turn


def plan_solve_program(a: Agents, p: SageProtocolCfg):
    """Planner → Critic on the plan → Solver (with the plan iff Norm(s_p) ≥ β and the plan is not empty); the
    episode's ``meta["plan_shown"]`` says whether the Solver saw it (only then is it paid s̃_p, Eq. 10)."""

    def program(ep: Episode):
        plan = None
        if p.plan:
            planner = yield a.ask("planner", ep.task)
            text = (planner.parsed.value if planner.parsed.ok else re.sub(r"</?plan>", "", planner.text)).strip()
            critic = yield a.ask("critic", ep.task, refs={"target": planner}, subject="plan", plan=text)
            s_p = sage_norm(critic.parsed.value if critic.parsed.ok else None, one_is_min=not p.norm_one_is_max)
            plan = text if sage_plan_gate(s_p, p.beta) and text else None
            ep.meta["plan_shown"] = plan is not None
        yield a.ask("solver", ep.task, **({"plan": plan} if plan else {}))

    return program


# ---- admission to the pool --------------------------------------------------------------------------------------
def admit(ep: Episode, pool: QuestionPool, p: SageProtocolCfg, step: int) -> str | None:
    """Algorithm 1 lines 7-13 for one challenge episode: fills ``ep.meta`` (s_q, valid, r_d, duplicate,
    difficulty_filtered) and adds the new item to the pool; returns the rejection reason (None = admitted). The
    verifier is valid when :func:`validate_item` (math: the answer parses; code: format, the reference passes twice)
    and :func:`check_generated` (no words in a math answer, no answer in the question, a reference that verifies
    against itself) accept it."""
    ch = [t for t in ep.turns if t.role == "challenger"][-1]
    if not ch.parsed.ok:
        return "format"
    new = ch.parsed.value
    critic = next(t for t in ep.turns if t.role == "critic")
    ep.meta["s_q"] = s_q = sage_norm(critic.parsed.value if critic.parsed.ok else None,
                                     one_is_min=not p.norm_one_is_max)
    if s_q < p.alpha:
        return "low quality"
    reason = prescreen(new)[0] or validate_item(new)
    ep.meta["valid"] = reason is None
    if reason is not None:
        return reason
    verdicts = [verify(new, t.text).score for t in ep.turns if t.role == "difficulty"]
    ep.meta["r_d"] = r_d = sage_difficulty(verdicts)
    if pool.contains(new.question):
        ep.meta["duplicate"] = True
        return "duplicate"
    if p.difficulty_filter and not p.min_difficulty <= r_d <= p.max_difficulty:
        ep.meta["difficulty_filtered"] = True
        return "too easy" if r_d < p.min_difficulty else "too hard"
    pool.add(new, f"step {step}", r_d)
    return None


# ---- the loop ---------------------------------------------------------------------------------------------------
def seed_pool(loop: Loop) -> QuestionPool:
    """The pool as checkpointed (resume) or the seed set (data.tasks, else Table 5's mix)."""
    d = loop.cfg.data
    return start_pool(loop, lambda: sage_seed_set(loop.cfg.seed, d.data_root, d.source))


def step_of(loop: Loop, step: int, pool: QuestionPool, agents: Agents, rewards: dict) -> tuple[list, dict]:
    """Algorithm 1, batched: the challenge phase on reference items drawn from the pool, admission (lines 7-13)
    right after it, then the plan-solve phase on items drawn from the pool as admission left it (line 16; drawn
    before the challenge phase with ``protocol.sample_after_admission=false``); rewards; one Task-Relative
    REINFORCE++ update of every trained role's turns, advantages normalised per role."""
    p = loop.cfg.protocol
    rng = random.Random(f"{loop.cfg.seed}/{step}/pool")
    refs = pool.sample(rng, p.challenges) if p.challenges else []
    draw = lambda: pool.sample(rng, loop.cfg.trainer.tasks_per_step)  # noqa: E731
    items = draw if p.sample_after_admission else draw()

    def admit_all(episodes: list[Episode]) -> dict:
        return admit_each(episodes, pool, lambda ep: admit(ep, pool, p, step))

    trained = {r for r in ROLES if getattr(p, f"train_{r}")}
    phases = [Phase("challenge", refs, challenge_program(agents, p.solver_samples, p.tag_chain), rewards["challenge"],
                    key="c", after=admit_all),
              Phase("plan-solve", items, plan_solve_program(agents, p), rewards["plan_solve"], key="s")]
    return loop.run_step(step, phases, [Update(group_by=lambda t: t.role, include=lambda t: t.role in trained)])


def main(cfg) -> None:
    p, agents = cfg.protocol, Agents.build(cfg.protocol)
    with Loop(cfg, agents=list(dict.fromkeys(agents.names.values()))) as loop:
        pool = seed_pool(loop)
        rewards = {"challenge": REWARD_SOURCES.get("sage_challenge")(format_tags, p.alpha, p.pay_duplicates),
                   "plan_solve": REWARD_SOURCES.get("sage_plan_solve")(format_tags, p.beta, p.lambda_plan,
                                                                       p.lambda_f, (p.w_plan, p.w_correct, p.w_format),
                                                                       one_is_min=not p.norm_one_is_max)}
        for step in loop.steps():
            episodes, metrics = step_of(loop, step, pool, agents, rewards)
            loop.end_step(step, episodes, metrics, files={"pool.jsonl": pool.to_jsonl()})
