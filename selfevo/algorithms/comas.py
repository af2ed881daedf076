"""CoMAS: agents discuss (solve, evaluate, score); scores become zero-sum rewards; each agent trains with REINFORCE++.

    selfevo run comas                                         # preset cpu: embedded model, 4 agents
    selfevo run comas trainer.max_steps=2 output_dir=runs/c1  # then: ... resume=true trainer.max_steps=3
    selfevo run comas --preset paper                          # Table 2: Qwen2.5-3B-Instruct, m=8, n=1, κ=2
    selfevo run comas protocol.variant=without_scoring protocol.evaluations=2   # ablation (Sec. 4.3.1)
    selfevo run comas model.backbones=[smollm2-135m-instruct,gemma3-270m]       # heterogeneous agents

Paper: arXiv 2510.08529 (``papers/001``), Sec. 3 (Eq. 3-11), App. B-D, J. One step: every task's discussion is an
episode program on the interaction runner (all episodes' pending requests go to the engine as one call) → rewards
from the interaction-score source (Eq. 7-8) → one REINFORCE++ update per agent over all its turns (Eq. 9-11) →
the loop kit logs, checkpoints and exports. Where the paper is silent: with n > 1 evaluations a solution's reward
is the mean over its scored pairs; the n evaluations of one solution are generated in parallel.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from selfevo.config import ConfigError, SamplingCfg, opt
from selfevo.interaction import Episode, ask
from selfevo.loop import DataCfg, Loop, Phase, RunCfg, TrainerCfg, Update
from selfevo.loop.metrics import precision_recall
from selfevo.optimizers import UpdateSpec
from selfevo.rewards import build_sources
from selfevo.roles.base import HistoryItem, Role
from selfevo.roles.comas import (CoMASEvaluator, CoMASJudge, CoMASScorer, CoMASSolver, CoMASVerdictEvaluator,
                                 comas_roles)
from selfevo.tasks import comas_training_mix
from selfevo.types import Task

SOLVER, EVALUATOR, SCORER, JUDGE = "solver", "evaluator", "scorer", "judge"  # the roles, each a turn label too


# ---- config -----------------------------------------------------------------------------------------------------
@dataclass
class CoMASProtocolCfg:
    semantics: str = opt("paper", "paper: sequential, a random agent acts; released: every agent solves each round",
                         choices=("paper", "released"))
    variant: str = opt("full", "full method or a reward ablation (Sec. 4.3.1)", choices=lambda: tuple(VARIANTS))
    rounds: int = opt(2, "m: discussion rounds per task", ge=1)
    evaluations: int = opt(1, "n: evaluations per solution", ge=1)
    horizon: int = opt(2, "κ: rounds of history a solver (and evaluator) sees", ge=0)
    self_evaluation: bool = opt(True, "the solver of s_i may be drawn to evaluate/score it (paper: uniform draw)")
    evaluators_see_history: bool = opt(True, "evaluators see the discussion history (paper template)")
    references: int = opt(2, "released: discussions of the previous round shown to each solver", ge=0)
    template_set: str = opt("paper", "prompt templates: the paper's App. B or the released code's",
                            choices=("paper", "released"))
    score_prefix: str = opt("", "start scorer/judge answers with this (e.g. '<score>'); '' = paper")
    score_max_new_tokens: int = opt(0, "token limit of scorer/judge answers (0: sampling.max_new_tokens)", ge=0)
    verdict_prefix: str = opt("", "w/o scoring: start each evaluation with this (e.g. '<judgment>'); '' = paper")


@dataclass
class CoMASRewardCfg:
    on_parse_failure: str = opt("mask", "unparsable score: mask solver/evaluator samples, or 0 (released code)",
                                choices=("mask", "zero"))
    normalise: str = opt("agent", "advantage whitening per agent (Eq. 10) or per agent and turn label",
                         choices=("agent", "agent_role"))
    correct_threshold: float = opt(0.5, "solution reward ≥ this counts as 'predicted correct' (App. G)", ge=0, le=1)
    sources: list[str] = opt([], "extra reward sources added to the variant's (name or name:weight)")
    judge: str = opt("model", "what scores a solution: the agents' scorer turns (paper), or the noisy_judge source in "
                              "their place, the verifier's verdict kept with probability judge_accuracy",
                     choices=("model", "noisy_judge"))
    judge_accuracy: float = opt(1.0, "judge=noisy_judge: probability that a verdict is the verifier's (else flipped)",
                                ge=0, le=1)


@dataclass
class CoMASDataCfg(DataCfg):
    n_math: int = opt(600, "MATH level 4-5 items in the training mix", ge=0)
    n_code: int = opt(600, "KodCode items in the training mix", ge=0)
    n_science: int = opt(800, "science items in the training mix", ge=0)


@dataclass
class CoMASCfg(RunCfg):
    recipe: str = opt("comas", "the recipe", choices=("comas",))
    output_dir: str = opt("runs/comas", "run directory", nonempty=True)
    sampling: SamplingCfg = opt(SamplingCfg(max_new_tokens=256, temperature=1.0), "sampling of every generation")
    trainer: TrainerCfg = opt(TrainerCfg(optimizer="reinforce_pp"), "schedule and updates: REINFORCE++ (Eq. 9-11)")
    protocol: CoMASProtocolCfg = opt(CoMASProtocolCfg, "the discussion")
    reward: CoMASRewardCfg = opt(CoMASRewardCfg, "reward settings")
    data: CoMASDataCfg = opt(CoMASDataCfg, "training tasks (default: the CoMAS mix)")

    @staticmethod
    def check(cfg) -> None:
        """A noisy judge replaces scores: a variant without scores (w/o scoring) has none to replace."""
        RunCfg.check(cfg)
        if cfg.reward.judge != "model" and VARIANTS[cfg.protocol.variant].scored_by is None:
            with_scores = ", ".join(k for k, v in VARIANTS.items() if v.scored_by)
            raise ConfigError(f"reward.judge={cfg.reward.judge} replaces the scorer's scores; protocol.variant="
                              f"{cfg.protocol.variant} has no scores (use {with_scores})")


# ---- roles ------------------------------------------------------------------------------------------------------
def make_roles(p: CoMASProtocolCfg) -> dict[str, Role]:
    """The variant's roles with the protocol's format options (score/verdict prefixes, scorer token limit;
    ``evaluators_see_history=false`` reaches the roles that show a history to judge by)."""
    v = VARIANTS[p.variant]
    options = {"template_set": p.template_set, "kappa": p.horizon}
    if not p.evaluators_see_history and v.judges_see_history:
        options["see_history"] = False
    roles = comas_roles(v.roles, **options)
    if v.scored_by:
        roles[v.scored_by].prefix, roles[v.scored_by].max_new_tokens = p.score_prefix, p.score_max_new_tokens
    if v.verdict_by:
        roles[v.verdict_by].prefix = p.verdict_prefix
    return roles


# ---- the discussion: episode programs ---------------------------------------------------------------------------
@dataclass
class Discussion:
    """The paper's semantics (``protocol.semantics=paper``): roles, agents, protocol settings and each episode's own
    RNG (agent draws never depend on batching); its episode program is :meth:`program`."""

    roles: dict[str, Role]
    agents: list[str]
    cfg: CoMASProtocolCfg
    seed: str
    rngs: dict = field(default_factory=dict)

    def program(self):
        """The paper's episode program (Sec. 3.1): m rounds, each a solution by a random agent (seeing the last κ
        rounds) and the variant's judging phase."""

        def program(ep: Episode):
            hist: list[HistoryItem] = []
            for rnd in range(self.cfg.rounds):
                seen = list(hist)
                sol = yield self.ask(SOLVER, self.pick(ep), ep, rnd, history=seen)
                hist.append(HistoryItem(sol.agent, "solution", sol.text))
                yield from self.judging(ep, [sol], [seen], [hist], rnd)

        return program

    def judging(self, ep: Episode, sols: list, seen: list, hists: list[list[HistoryItem]], rnd: int):
        """The variant's judging phase of one round's solutions (:data:`VARIANTS`)."""
        n = self.cfg.evaluations
        who = [(k // n, a) for k, a in enumerate(self.draw(ep, sols))]
        yield from VARIANTS[self.cfg.variant].judging(self, ep, sols, who, seen, hists, rnd)

    def rng(self, ep: Episode) -> random.Random:
        return self.rngs.setdefault(ep.key, random.Random(f"{self.seed}|{ep.key}"))

    def pick(self, ep: Episode, exclude: str | None = None) -> str:
        pool = [a for a in self.agents if a != exclude] or self.agents
        return self.rng(ep).choice(pool)

    def draw(self, ep: Episode, sols: list) -> list[str]:
        """Paper (Sec. 3.1): each evaluation/score of each solution by an agent drawn uniformly at random (not its
        solver unless ``self_evaluation``), in (solution, evaluation) order."""
        return [self.pick(ep, None if self.cfg.self_evaluation else s.agent) for s in sols
                for _ in range(self.cfg.evaluations)]

    def ask(self, role: str, agent: str, ep: Episode, rnd: int, refs: dict | None = None, **context):
        return ask(self.roles[role], agent, ep.task, label=role, round=rnd, refs=refs, **context)


class Shuffled(Discussion):
    """Released-code draws (research/comas_marti.md Sec. 2): per evaluation slot a random permutation of the agents
    over the round's solutions — every agent judges equally often, evaluators and scorers are shuffled
    independently, self-judging happens (≈ 1/l) unless ``self_evaluation=false`` (then a derangement)."""

    def program(self):
        """Released-code semantics: every agent solves every task each round, seeing ``references`` discussions
        sampled from the previous round; judges drawn by :meth:`draw`."""

        def program(ep: Episode):
            previous: list[list[HistoryItem]] = []
            for rnd in range(self.cfg.rounds):
                chosen = self.rng(ep).sample(previous, min(self.cfg.references, len(previous)))
                refs = [item for disc in chosen for item in disc]
                sols = yield [self.ask(SOLVER, a, ep, rnd, history=refs) for a in self.agents]
                hists = [[HistoryItem(s.agent, "solution", s.text)] for s in sols]
                yield from self.judging(ep, sols, [refs] * len(sols), hists, rnd)
                previous = hists

        return program

    def draw(self, ep: Episode, sols: list) -> list[str]:
        perms = [self._permutation(self.rng(ep), sols) for _ in range(self.cfg.evaluations)]
        return [perm[j] for j in range(len(sols)) for perm in perms]

    def _permutation(self, rng: random.Random, sols: list) -> list[str]:
        pool = [self.agents[j % len(self.agents)] for j in range(len(sols))]
        while True:
            perm = rng.sample(pool, len(pool))
            if self.cfg.self_evaluation or len(set(pool)) < 2 or all(a != s.agent for a, s in zip(perm, sols)):
                return perm


# ---- the variants: judging phases, roles and rewards (Sec. 4.3.1) ----------------------------------------------
def judge_only(d: Discussion, ep: Episode, sols: list, who: list, seen: list, hists: list, rnd: int):
    """w/o evaluation: each drawn judge scores the solution directly; nothing joins the history."""
    yield [d.ask(JUDGE, a, ep, rnd, {"solution": sols[i]}, solution=sols[i].text) for i, a in who]


def evaluate(d: Discussion, ep: Episode, sols: list, who: list, seen: list, hists: list, rnd: int,
             score: bool = False):
    """Evaluators see the history as it was before their solution (``seen``) and the solution once, as the one to
    judge (Eq. 4); with ``score`` each evaluation is then scored by a separately drawn scorer; the evaluations join
    the history (``hists``)."""
    evals = yield [d.ask(EVALUATOR, a, ep, rnd, {"solution": sols[i]}, solution=sols[i].text, history=seen[i])
                   for i, a in who]
    if score:
        scorers = d.draw(ep, sols)
        yield [d.ask(SCORER, a, ep, rnd, {"solution": sols[i], "evaluation": e}, solution=sols[i].text,
                     evaluation=e.text) for (i, _), a, e in zip(who, scorers, evals)]
    for (i, _), e in zip(who, evals):
        hists[i].append(HistoryItem(e.agent, "evaluation", e.text))


def evaluate_and_score(d: Discussion, ep: Episode, sols: list, who: list, seen: list, hists: list, rnd: int):
    """The full method: evaluation, then a score of each evaluation (Eq. 5-6)."""
    yield from evaluate(d, ep, sols, who, seen, hists, rnd, score=True)


@dataclass(frozen=True)
class Variant:
    """One CoMAS variant as data: its roles (label → role class), its judging phase after each round's solutions,
    the label whose answers are scores (the score prefix and token limit; None: no scores), the label whose answers
    are verdicts (the verdict prefix), whether its judges are shown a history (``evaluators_see_history``), and its
    own reward source (None: the interaction scores of the judge ``reward.judge`` names, :data:`JUDGES`)."""

    roles: dict[str, type]
    judging: Callable
    scored_by: str | None = None
    verdict_by: str | None = None
    judges_see_history: bool = True
    reward: str | None = None


VARIANTS = {
    "full": Variant({SOLVER: CoMASSolver, EVALUATOR: CoMASEvaluator, SCORER: CoMASScorer}, evaluate_and_score,
                    scored_by=SCORER),
    "without_evaluation": Variant({SOLVER: CoMASSolver, JUDGE: CoMASJudge}, judge_only, scored_by=JUDGE,
                                  judges_see_history=False),
    "without_scoring": Variant({SOLVER: CoMASSolver, EVALUATOR: CoMASVerdictEvaluator}, evaluate,
                               verdict_by=EVALUATOR, reward="verdict_agreement"),
}
SEMANTICS = {"paper": Discussion, "released": Shuffled}  # whose draws and episode program (Discussion.program)


def reward_source(cfg):
    """The variant's reward (Eq. 7-8 interaction scores — from the agents' scores, or a noisy judge's — or the
    variant's own, w/o scoring's verdict agreement) plus any ``reward.sources``."""
    r, v = cfg.reward, VARIANTS[cfg.protocol.variant]
    own = {"name": v.reward} if v.reward else JUDGES[r.judge](cfg)
    return build_sources([own, *r.sources], on_parse_failure=r.on_parse_failure)


JUDGES = {"model": lambda cfg: {"name": "interaction_scores"},
          "noisy_judge": lambda cfg: {"name": "noisy_judge", "accuracy": cfg.reward.judge_accuracy, "seed": cfg.seed}}


# ---- the loop ---------------------------------------------------------------------------------------------------
def learning_rule(r: CoMASRewardCfg) -> UpdateSpec:
    """How CoMAS learns: REINFORCE++ (``trainer.optimizer``, :class:`CoMASCfg`'s default) on each agent's turns,
    every label's, advantages whitened over all of the agent's tokens (Eq. 10), or per label with
    ``reward.normalise=agent_role``."""
    return UpdateSpec(group_by=(lambda t: t.label) if r.normalise == "agent_role" else None)


def step_of(loop: Loop, step: int, tasks: list[Task], roles: dict, reward) -> tuple[list[Episode], dict]:
    """One discussion per task of the step's batch, the variant's reward, one REINFORCE++ update per agent
    (:func:`learning_rule`); App. G's precision/recall of the solution rewards."""
    p, r = loop.cfg.protocol, loop.cfg.reward
    program = SEMANTICS[p.semantics](roles, loop.agents, p, f"{loop.cfg.seed}/{step}").program()
    return loop.run_step(step, [Phase("rollout", loop.batch(tasks, step), program, reward)],
                         [Update(spec=learning_rule(r))],
                         metrics=lambda eps: precision_recall(eps, r.correct_threshold))


def main(cfg, command_line: list[str] | None = None) -> None:
    with Loop(cfg, command_line=command_line) as loop:
        d = cfg.data
        tasks = loop.tasks(lambda: comas_training_mix(d.n_math, d.n_code, d.n_science, seed=cfg.seed,
                                                      data_root=d.data_root, source=d.source))
        roles, reward = make_roles(cfg.protocol), reward_source(cfg)
        for step in loop.steps():
            loop.end_step(step, *step_of(loop, step, tasks, roles, reward))
