"""SAGE's rewards (arXiv 2603.15255, Sec. 4, Algorithm 1) as two reward sources over the recipe's episodes.

* ``sage_challenge`` — a challenge episode: the Challenger's turns (``role="challenger"``: one, or one per tag when
  it writes them in stages; the last holds the whole answer); if its question parsed, a Critic turn scores it and
  N_s Solver samples (``role="difficulty"``) try it.
  The recipe has already decided admission and put ``s_q``, ``r_d`` (None when not computed) and ``valid`` in
  ``episode.meta``. Challenger: Eq. 5 if ``s_q ≥ α`` and the verifier is valid and the item is neither a rejected
  duplicate (``meta["duplicate"]``; paid as admitted with ``pay_duplicates``) nor rejected by the optional difficulty
  filter (``meta["difficulty_filtered"]``), else Eq. 6 (an item that does not enter the pool); a Challenger whose
  output does not parse gets Eq. 6 with ``s_q = 0`` (no question to score). Critic: Eq. 13. The difficulty samples
  only measure r_d (Eq. 4): they carry no reward and are not trained.
* ``sage_plan_solve`` — a plan-solve episode: Planner (``planner``), Critic on the plan (``critic``,
  ``refs["target"]`` = the planner turn), Solver (``solver``; saw the plan iff ``s_p ≥ β`` and the plan is not
  empty: ``meta["plan_shown"]``). Planner: Eq. 8; Solver: Eq. 10-11 with ``s_gt`` from the task's verifier and
  s̃_p = 0 for a plan it did not see (the ½/½ fallback when the planner is off); Critic: Eq. 13. Without a planner
  the episode is just the Solver. ``one_is_min``: a Critic score of 1 normalises to 0 (Eq. 2 literally: 1.0).

Format rewards r_f are :func:`~selfevo.rewards.formulas.soft_format_reward` of the whole answer (prefix included)
with the role's tags (``format_tags(kind, domain)``).
"""
from __future__ import annotations

from typing import Callable

from selfevo.interaction import Episode, Turn
from selfevo.rewards.formulas import (sage_challenger_reward, sage_critic_reward, sage_norm, sage_planner_reward,
                                      sage_solver_reward, soft_format_reward)
from selfevo.rewards.sources import REWARD_SOURCES, RewardResult, RewardSource
from selfevo.verifiers import verify

FormatTags = Callable[[str, str], dict]


def _score(turn: Turn | None, one_is_min: bool) -> float | None:
    """Norm of a Critic turn's parsed 1-10 score (Eq. 2; an unparsed score is Norm's 'otherwise', 0.5)."""
    if turn is None:
        return None
    return sage_norm(turn.parsed.value if turn.parsed is not None and turn.parsed.ok else None, one_is_min)


def _rf(turn: Turn, domain: str, tags: FormatTags) -> float:
    """r_f of a turn's whole answer (a staged Challenger's chained answer is in ``meta["full_answer"]``)."""
    answer = turn.meta.get("full_answer", turn.answer)
    return soft_format_reward(answer, tags(turn.role if turn.role != "difficulty" else "solver", domain))


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


@REWARD_SOURCES.register("sage_challenge")
def sage_challenge(format_tags: FormatTags, alpha: float = 0.7, pay_duplicates: bool = False) -> RewardSource:
    def source(episodes: list[Episode]) -> RewardResult:
        out, formats = [], {"challenger": [], "critic": []}
        for ep in episodes:
            domain = ep.task.domain
            rewards: dict[int, float | None] = {}
            stages = [i for i, t in enumerate(ep.turns) if t.role == "challenger"]
            r_f = _rf(ep.turns[stages[-1]], domain, format_tags)
            formats["challenger"].append(r_f)
            s_q, r_d = ep.meta.get("s_q"), ep.meta.get("r_d")
            credited = bool(ep.meta.get("valid")) and not ep.meta.get("difficulty_filtered") and \
                (pay_duplicates or not ep.meta.get("duplicate"))
            r_c = sage_challenger_reward(s_q or 0.0, r_d if r_d is not None else 0.0, r_f, credited, alpha)
            rewards.update({i: r_c for i in stages})
            for i, t in enumerate(ep.turns):
                if t.role == "challenger":
                    continue
                if t.role == "critic":
                    rewards[i] = sage_critic_reward(_rf(t, domain, format_tags))
                    formats["critic"].append(rewards[i])
                else:
                    rewards[i] = None  # difficulty samples: measured, not trained
            out.append(rewards)
        return RewardResult(out, {f"format.{k}": _mean(v) for k, v in formats.items()})

    return source


@REWARD_SOURCES.register("sage_plan_solve")
def sage_plan_solve(format_tags: FormatTags, beta: float = 0.3, lambda_plan: float = 0.5, lambda_f: float = 0.5,
                    weights: tuple[float, float, float] = (0.2, 0.6, 0.2), one_is_min: bool = True) -> RewardSource:
    def source(episodes: list[Episode]) -> RewardResult:
        out, correct = [], []
        formats: dict[str, list[float]] = {"planner": [], "solver": [], "critic": []}
        for ep in episodes:
            domain = ep.task.domain
            by_role = {t.role: i for i, t in enumerate(ep.turns)}
            rewards: dict[int, float | None] = {}
            s_p = _score(ep.turns[by_role["critic"]], one_is_min) if "critic" in by_role else None
            if "planner" in by_role:
                i = by_role["planner"]
                r_f = _rf(ep.turns[i], domain, format_tags)
                formats["planner"].append(r_f)
                rewards[i] = sage_planner_reward(s_p, r_f, lambda_plan, lambda_f)
            if "critic" in by_role:
                i = by_role["critic"]
                rewards[i] = sage_critic_reward(_rf(ep.turns[i], domain, format_tags))
                formats["critic"].append(rewards[i])
            i = by_role["solver"]
            s_gt = float(verify(ep.task, ep.turns[i].text).score)
            r_f = _rf(ep.turns[i], domain, format_tags)
            formats["solver"].append(r_f)
            correct.append(s_gt >= 1.0)
            shown = s_p if ep.meta.get("plan_shown", True) else 0.0  # s̃_p is paid only for a plan the Solver saw
            rewards[i] = sage_solver_reward(s_gt, r_f, shown, beta, weights)
            out.append(rewards)
        metrics = {"solver_accuracy": _mean([float(c) for c in correct]),
                   **{f"format.{k}": _mean(v) for k, v in formats.items()}}
        return RewardResult(out, metrics)

    return source
