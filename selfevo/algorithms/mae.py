"""MAE (Multi-Agent Evolve): Proposer, Solver and Judge on one backbone and one shared adapter; no ground truth
anywhere (the Judge's scores are the only signal); a growing question pool; Task-Relative REINFORCE++.

    selfevo run mae                                           # preset cpu: embedded model, one shared adapter
    selfevo run mae trainer.max_steps=2 output_dir=runs/m1    # then: ... resume=true trainer.max_steps=3
    selfevo run mae --preset paper                            # the paper's / released script's settings
    selfevo run mae protocol.reference_prob=0                 # MAE "no reference" (1: "with reference")

Paper: Chen et al. 2025, arXiv 2510.23595, Sec. 3; released code github.com/ulab-uiuc/Multi-agent-Evolve
(``GeneralIORewardManager``, ``scripts/selfplay/mae.sh``). One step, batched:
(1) propose phase — ``protocol.proposals`` reference items drawn from the pool; the Proposer writes a new question,
shown the reference with probability ``reference_prob`` (the released "half reference": 0.5), else from scratch;
if it parsed, the Judge scores the question (R_quality) while N_sample Solver answers try it, then the Judge scores
each answer (V_J); R_difficulty = 1 − mean V_J; the question enters the pool iff R_quality ≥ the quality threshold
and it is new (``pool.jsonl``, saved with the checkpoint); (2) solve phase — ``trainer.tasks_per_step`` items drawn
from the pool (after admission); the Solver answers, the Judge scores the answer; (3) rewards: Proposer
``mae_proposer_reward`` (:mod:`selfevo.rewards.formulas`), Solver ``w V_J + (1 − w) r_f`` (``critic_score`` and
``format`` sources), Judge its own format r_f; (4) one Task-Relative REINFORCE++ update of the shared adapter over
every role's turns, advantages normalised per turn label.

Where the paper is silent, and what this recipe does (the released code's choice where it has one):
* weights of the Proposer's three terms — 1/3 each; below the threshold the difficulty term is dropped, not
  renormalised; a Proposer without a ``<question>`` gets 0 (released code);
* the Solver's reward mixes the Judge's score with its format ½ / ½ (released code); the Judge is asked
  ``protocol.judge_samples`` times per question and per answer (released code: 5, the paper preset; default 1), and
  R_quality, V_J and R_difficulty average the scores that parse (normalised by SAGE's Eq. 2, 1 → 0, clipped to
  [0, 1] as the released code); where none parsed, the neutral 0.5 counts (released code; the Judge turn itself
  gets r_f);
* the Solver answers that measure R_difficulty are not trained (released code: a reward-side rollout);
* the quality threshold 0.7 and N_sample = 5 come from the released code and script; the seed set, the Judge's
  prompts and its temperature are this toolkit's (:mod:`selfevo.roles.mae`); the paper trains all weights, this
  recipe one LoRA adapter; duplicates of pool questions are not admitted (not in the paper).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from selfevo.config import SamplingCfg, opt
from selfevo.interaction import Episode, ask
from selfevo.loop import DataCfg, Loop, Phase, RunCfg, TrainerCfg, Update, load_entries
from selfevo.optimizers import UpdateSpec
from selfevo.algorithms.pool import QuestionPool, admit_each, note_new_task, start_pool
from selfevo.rewards import REWARD_SOURCES, RewardResult, labelled, weighted_sum
from selfevo.rewards.formulas import mae_difficulty, mae_proposer_reward, sage_norm, soft_format_reward
from selfevo.roles import get_role
from selfevo.roles.mae import FORMAT_TAGS

ROLES = PROPOSER, SOLVER, JUDGE = ("proposer", "solver", "judge")  # the roles, each a turn label too
# the Solver answers that measure a new question's R_difficulty: they answer the episode's generated task
# (NEW_TASK_LABELS: what selfevo report verifies against it)
DIFFICULTY = "difficulty"
NEW_TASK_LABELS = (DIFFICULTY,)
AGENT = "mae"


@dataclass
class MAEProtocolCfg:
    proposals: int = opt(4, "Proposer episodes per step (each from a reference item drawn from the pool)", ge=0)
    solver_samples: int = opt(5, "N_sample: Solver answers per new question for its difficulty (mae.sh: 5)", ge=1)
    quality_threshold: float = opt(0.7, "a new question enters the pool, and is paid its difficulty, only if its "
                                        "normalised Judge score is at least this (released code: 0.7)", ge=0, le=1)
    reference_prob: float = opt(0.5, "probability that the Proposer is shown its reference item (released "
                                     "'half reference': 0.5; 0: MAE without reference)", ge=0, le=1)
    w_quality: float = opt(1 / 3, "the Proposer's weight of R_quality (released code: 1/3)", ge=0)
    w_difficulty: float = opt(1 / 3, "the Proposer's weight of R_difficulty (released code: 1/3)", ge=0)
    w_format: float = opt(1 / 3, "the Proposer's weight of R_format (released code: 1/3)", ge=0)
    solver_judge_weight: float = opt(0.5, "w: the Solver's reward is w V_J + (1 - w) r_f (released code: 0.5)",
                                     ge=0, le=1)
    judge_samples: int = opt(1, "Judge calls per question (R_quality) and per answer (each V_J); the mean of their "
                                "parsed scores counts (released code: n_samples = 5)", ge=1)
    unparsed_score: float = opt(0.5, "the normalised score of a question or answer none of whose Judge scores parse "
                                     "(released code: the neutral 0.5); unparsed ones among parsed ones are left out",
                                ge=0, le=1)
    train_proposer: bool = opt(True, "train on Proposer turns")
    train_solver: bool = opt(True, "train on Solver turns")
    train_judge: bool = opt(True, "train on Judge turns")
    proposer_prefix: str = opt("", "start Proposer answers with this (small models: '<question>')")
    solver_prefix: str = opt("", "start Solver answers with this")
    judge_prefix: str = opt("", "start Judge answers with this (small models: '<score>')")


@dataclass
class MAECfg(RunCfg):
    recipe: str = opt("mae", "the recipe", choices=("mae",))
    output_dir: str = opt("runs/mae", "run directory", nonempty=True)
    n_agents: int = opt(1, "must be 1: MAE's agents are roles of one backbone and one shared adapter", ge=1, le=1)
    sampling: SamplingCfg = opt(SamplingCfg(max_new_tokens=256, temperature=1.0), "sampling (mae.sh: 1.0)")
    trainer: TrainerCfg = opt(TrainerCfg(optimizer="task_relative", tasks_per_step=8), "schedule and updates")
    protocol: MAEProtocolCfg = opt(MAEProtocolCfg, "MAE's phases, reward weights and switches")
    data: DataCfg = opt(DataCfg(tasks=["gsm8k:train"], limit=500), "the seed questions of the pool (their "
                                                                     "reference answers are never used)")


# ---- episode programs -------------------------------------------------------------------------------------------
def propose_program(roles: dict, n_samples: int, n_judge: int = 1):
    """Proposer (shown its reference iff ``task.meta["with_reference"]``) → (``n_judge`` Judges on the question ‖
    N_sample Solver answers, ``difficulty``) → ``n_judge`` Judges on each answer."""

    def program(ep: Episode):
        shown = bool(ep.task.meta.get("with_reference"))
        ep.meta["with_reference"] = shown
        prop = yield ask(roles[PROPOSER], AGENT, ep.task, label=PROPOSER, reference=ep.task if shown else None)
        if not prop.parsed.ok:
            return
        new = prop.parsed.value
        note_new_task(ep, new, ("id", "question"))
        first = yield [*[ask(roles[JUDGE], AGENT, new, label=JUDGE, refs={"target": prop}) for _ in range(n_judge)],
                       *[ask(roles[SOLVER], AGENT, new, label=DIFFICULTY) for _ in range(n_samples)]]
        yield [ask(roles[JUDGE], AGENT, new, label=JUDGE, refs={"target": a}, subject="answer", solution=a.text)
               for a in first[n_judge:] for _ in range(n_judge)]

    return program


def solve_program(roles: dict, n_judge: int = 1):
    """Solver → ``n_judge`` Judges on its answer."""

    def program(ep: Episode):
        answer = yield ask(roles[SOLVER], AGENT, ep.task, label=SOLVER)
        yield [ask(roles[JUDGE], AGENT, ep.task, label=JUDGE, refs={"target": answer}, subject="answer",
                   solution=answer.text) for _ in range(n_judge)]

    return program


# ---- admission and rewards ----------------------------------------------------------------------------------------
def judged(ep: Episode, label: str) -> list[float | None]:
    """The normalised Judge scores of the episode's turns labelled ``label`` (SAGE Eq. 2 with 1 → 0, clipped to
    [0, 1] as the released code; None: the score did not parse), every Judge call of every such turn."""
    return [sage_norm(t.parsed.value, one_is_min=True, clip=True) if t.parsed.ok else None
            for t in ep.turns if t.label == JUDGE and ep.turns[t.refs["target"]].label == label]


def mean_parsed(scores: list[float | None], unparsed: float) -> float:
    """The mean of the parsed scores, ``unparsed`` when none parsed (the released code's R_quality and V_J)."""
    parsed = [s for s in scores if s is not None]
    return sum(parsed) / len(parsed) if parsed else unparsed


def admit(ep: Episode, pool: QuestionPool, p: MAEProtocolCfg, step: int) -> str | None:
    """One propose episode: fills ``ep.meta`` (quality, difficulty) and adds the new question to the pool iff its
    quality reaches the threshold and it is new; returns the rejection reason (None = admitted)."""
    prop = ep.turns[0]
    if not prop.parsed.ok:
        return "format"
    ep.meta["quality"] = quality = mean_parsed(judged(ep, PROPOSER), p.unparsed_score)
    ep.meta["difficulty"] = difficulty = mae_difficulty(judged(ep, DIFFICULTY), p.unparsed_score)
    if quality < p.quality_threshold:
        return "low quality"
    if pool.contains(prop.parsed.value.question):
        return "duplicate"
    pool.add(prop.parsed.value, f"step {step}", difficulty)
    return None


def proposer_rewards(p: MAEProtocolCfg):
    """Reward source of propose episodes (after :func:`admit`): the Proposer's reward; difficulty answers masked."""
    weights = (p.w_quality, p.w_difficulty, p.w_format)

    def source(episodes: list[Episode]) -> RewardResult:
        out, paid = [], []
        for ep in episodes:
            prop = ep.turns[0]
            r_f = soft_format_reward(prop.answer, FORMAT_TAGS[PROPOSER])
            r = mae_proposer_reward(ep.meta.get("quality", 0.0), ep.meta.get("difficulty", 0.0), r_f,
                                    prop.parsed.ok, p.quality_threshold, weights)
            paid.append(r)
            out.append({0: r, **{i: None for i, t in enumerate(ep.turns) if t.label == DIFFICULTY}})
        return RewardResult(out, {"proposer_reward": round(sum(paid) / len(paid), 4) if paid else None})

    return source


def reward_sources(p: MAEProtocolCfg) -> dict:
    """The propose and solve phases' reward sources; every Judge turn is paid its format r_f."""
    def fmt(label: str, phase: str):
        return labelled(REWARD_SOURCES.get("format")(FORMAT_TAGS[label], [label]), f"{phase}.{label}_")

    judge_score = REWARD_SOURCES.get("critic_score")(JUDGE, "target", True, p.unparsed_score, clip=True)
    w = p.solver_judge_weight
    return {"propose": weighted_sum([(1.0, proposer_rewards(p)), (1.0, fmt(JUDGE, "propose"))]),
            "solve": weighted_sum([(w, judge_score), (1 - w, fmt(SOLVER, "solve")), (1.0, fmt(JUDGE, "solve"))])}


# ---- the loop ---------------------------------------------------------------------------------------------------
def step_of(loop: Loop, step: int, pool: QuestionPool, roles: dict, rewards: dict) -> tuple[list, dict]:
    """The propose phase on reference items drawn from the pool, admission right after it, the solve phase on items
    drawn from the pool as admission left it; rewards; one update of every trained role's turns, a baseline per
    turn label."""
    p = loop.cfg.protocol
    rng = random.Random(f"{loop.cfg.seed}/{step}/pool")
    refs = pool.sample(rng, p.proposals) if p.proposals else []
    for task in refs:
        task.meta["with_reference"] = rng.random() < p.reference_prob

    def admit_all(episodes: list[Episode]) -> dict:
        return admit_each(episodes, pool, lambda ep: admit(ep, pool, p, step))

    phases = [Phase("propose", refs, propose_program(roles, p.solver_samples, p.judge_samples), rewards["propose"],
                    key="p", after=admit_all),
              Phase("solve", lambda: pool.sample(rng, loop.cfg.trainer.tasks_per_step),
                    solve_program(roles, p.judge_samples), rewards["solve"], key="s")]
    return loop.run_step(step, phases, [Update(spec=learning_rule(p))])


def learning_rule(p: MAEProtocolCfg) -> UpdateSpec:
    """How MAE learns: Task-Relative REINFORCE++ (``trainer.optimizer``, :class:`MAECfg`'s default) on the turns of
    every trained role (``protocol.train_<role>``), advantages normalised per label (the difficulty answers carry
    no reward and never train)."""
    trained = {r for r in ROLES if getattr(p, f"train_{r}")}
    return UpdateSpec(group_by=lambda t: t.label, include=lambda t: t.label in trained)


def main(cfg, command_line: list[str] | None = None) -> None:
    p = cfg.protocol
    roles = {r: get_role(f"mae.{r}", prefix=getattr(p, f"{r}_prefix")) for r in ROLES}
    with Loop(cfg, agents=[AGENT], command_line=command_line) as loop:
        pool = start_pool(loop, lambda: load_entries(["gsm8k:train"], limit=500))
        rewards = reward_sources(p)
        for step in loop.steps():
            episodes, metrics = step_of(loop, step, pool, roles, rewards)
            loop.end_step(step, episodes, metrics, files={"pool.jsonl": pool.to_jsonl()})
