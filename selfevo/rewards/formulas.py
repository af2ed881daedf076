"""Reward formulas of CoMAS, SAGE, MAE and MAESTRO as pure functions over python numbers and strings.

* CoMAS (arXiv 2510.08529, ``/work/shared/papers/001_*``) Sec. 3.2: Eq. 7 (solver/evaluator zero-sum rewards on
  the score that Eq. 6 extracts, :func:`selfevo.roles.parsers.parse_score`), Eq. 8 (scorer format penalty);
  Sec. 4.3.1: the w/o-scoring ablation's support ratio and verdict agreement.
* SAGE (arXiv 2603.15255, ``/work/shared/papers/003_*``) Sec. 4 and Algorithm 1: Eq. 2 (Norm), Eq. 4-6
  (Challenger), Eq. 7-8 (Planner), Eq. 9-11 (Solver), Eq. 13 (Critic).
* AZR (Absolute Zero, arXiv 2505.03335) Sec. 3.1-3.3: Eq. 4 (learnability of a proposed task), Eq. 5 (solve
  reward), Eq. 6 (format-aware penalty).
* MAE (arXiv 2510.23595) Sec. 3: the Proposer's difficulty (1 - the mean Judge score of the Solver's samples) and its
  reward (quality, difficulty and format, the difficulty dropped below the quality threshold). The Solver's reward
  (Judge score and format) and the Judge's (format) are sums of registered sources (``critic_score``, ``format``).

Discrepancies found in the SAGE paper and how they are resolved here:

1. Challenger fallback condition. The text (before Eq. 6) says the difficulty term is dropped "for s_q < alpha";
   Algorithm 1 (lines 10-13) uses Eq. 5 only if ``s_q >= alpha and v valid`` and Eq. 6 otherwise. Algorithm 1 is
   followed (it is the stricter, more specific statement, and DESIGN.md Sec. 4 agrees): a good question with an
   invalid verifier gets Eq. 6.
2. Norm (Eq. 2) maps ``s = 1`` by its first branch to 1.0, although on the 1-10 scale 1 is the *worst* score
   (``(1 - 1)/9 = 0``). The faithful mapping is the default; ``sage_norm(..., one_is_min=True)`` gives 0.
3. Solver: a plan gated out (s_p < beta) contributes ``s~_p = 0`` with the same weights (0.2, 0.6, 0.2), so such a
   Solver sample can reach at most 0.8, whereas with the planner disabled the paper falls back to
   ``0.5 s_gt + 0.5 r_f``. Both are implemented as written.
4. Sec. 4.6 says the Solver is optimised "using the verifier-based reward in Eq. 10"; the formula is Eq. 11
   (Eq. 10 defines s~_p).
5. The Critic reward Eq. 13 is called "optional" in Sec. 4.5 but is always computed in Algorithm 1 (line 26).
6. The format reward r_f is described only qualitatively (Sec. 4.1: soft score in [0, 1], missing tags low,
   redundant tags partial credit, empty output 0.5); :func:`soft_format_reward` is this toolkit's concrete choice.
"""
from __future__ import annotations

import math
import re
from typing import Iterable, Mapping, Sequence


__all__ = [
    "comas_rewards", "support_ratio", "verdict_agreement", "controlled_judge_score",
    "sage_norm", "soft_format_reward", "sage_difficulty", "sage_challenger_reward", "sage_plan_gate",
    "sage_planner_reward", "sage_solver_reward", "sage_critic_reward",
    "mae_difficulty", "mae_proposer_reward", "rationale_attributes", "maestro_reward",
    "azr_solve_rate", "azr_propose_reward", "azr_reward",
]

# --------------------------------------------------------------------------------------------------------------
# CoMAS
# --------------------------------------------------------------------------------------------------------------

def comas_rewards(score: int | None, on_parse_failure: str = "mask") -> dict[str, float | None]:
    """Rewards of one (solution, evaluation, scoring) triple: CoMAS Eq. 7-8.

    ``solver = (tau - 1)/2``, ``evaluator = 1 - solver = (3 - tau)/2``, ``scorer = 0`` if tau was extracted,
    else ``-1``. On a parse failure (``score`` None) the solver/evaluator rewards are None (``"mask"``: drop those
    samples from training, the cleaner default) or 0.0 (``"zero"``: the released code's behaviour).
    """
    if on_parse_failure not in ("mask", "zero"):
        raise ValueError(f"on_parse_failure must be 'mask' or 'zero', got {on_parse_failure!r}")
    if score is None:
        other = None if on_parse_failure == "mask" else 0.0
        return {"solver": other, "evaluator": other, "scorer": -1.0}
    if score not in (1, 2, 3):
        raise ValueError(f"CoMAS scores are 1, 2 or 3, got {score!r}")
    solver = (score - 1) / 2
    return {"solver": solver, "evaluator": 1.0 - solver, "scorer": 0.0}


def controlled_judge_score(correct: bool, accuracy: float, u: float) -> int:
    """The 1-3 score of a judge of controlled quality (no paper: a stand-in for CoMAS's scorer): the verifier's
    verdict ``correct`` kept when ``u < accuracy`` and flipped otherwise (``u`` uniform in [0, 1)), then written as
    CoMAS's extreme scores: 3 for "correct", 1 for "incorrect". ``accuracy`` 1: the verifier itself; 0.5: a coin."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"a judge's accuracy is a probability, got {accuracy!r}")
    if not 0.0 <= u < 1.0:
        raise ValueError(f"u must lie in [0, 1), got {u!r}")
    return 3 if bool(correct) == (u < accuracy) else 1


def support_ratio(verdicts: Sequence[bool | None]) -> float | None:
    """W/o-scoring solution reward (Sec. 4.3.1, "a supporting ratio as the reward signal"): the fraction of the
    solution's parsed verdicts that are ``correct``. Unparsed verdicts (None) are left out; None if none parsed."""
    parsed = [v for v in verdicts if v is not None]
    return sum(parsed) / len(parsed) if parsed else None


def verdict_agreement(verdicts: Sequence[bool | None], j: int) -> float | None:
    """W/o-scoring reward of evaluation ``j`` ("based on mutual consistency"): the fraction of the OTHER parsed
    verdicts on the same solution that equal verdict ``j``. None if ``j`` is unparsed or no other verdict parsed
    (with n = 1 evaluation per solution there is nothing to agree with: the ablation needs n >= 2)."""
    if verdicts[j] is None:
        return None
    others = [v for i, v in enumerate(verdicts) if i != j and v is not None]
    return sum(v == verdicts[j] for v in others) / len(others) if others else None


# --------------------------------------------------------------------------------------------------------------
# SAGE
# --------------------------------------------------------------------------------------------------------------

def sage_norm(s: float | int | None, one_is_min: bool = False, clip: bool = False) -> float:
    """SAGE Eq. 2: ``s`` if 0 <= s <= 1; ``(s - 1)/9`` if 1 < s <= 10; 0.5 otherwise (incl. None, NaN, inf).

    ``one_is_min=True`` treats exactly 1 as the bottom of the 1-10 scale (0.0) instead of Eq. 2's 1.0.
    ``clip=True`` maps a number above 10 to 1.0 and one below 0 to 0.0 instead of Eq. 2's 0.5 (MAE's released code
    clips its normalised score to [0, 1]); None and NaN stay 0.5.
    """
    if s is None or isinstance(s, bool):
        return 0.5
    s = float(s)
    if math.isnan(s):
        return 0.5
    if clip and not 0.0 <= s <= 10.0:
        return 1.0 if s > 10.0 else 0.0
    if one_is_min and s == 1.0:
        return 0.0
    if 0.0 <= s <= 1.0:
        return s
    if 1.0 < s <= 10.0:
        return (s - 1.0) / 9.0
    return 0.5


def soft_format_reward(text: str | None, tags: Mapping[str, int]) -> float:
    """Soft format reward r_f in [0, 1] (SAGE Sec. 4.1); the exact scoring is this toolkit's choice.

    ``tags`` maps a tag name to its required count of ``<tag>...</tag>`` pairs, e.g. ``{"plan": 1}``.
    Per tag: 1.0 if the opening and closing counts both equal the required count; 0.5 if they are balanced but
    more than required (redundant tags: partial credit); 0.0 otherwise (missing, unbalanced, too few).
    r_f is the mean over tags; an empty (or whitespace-only) output gets the neutral 0.5.
    """
    if text is None or not text.strip():
        return 0.5
    if not tags:
        return 1.0
    parts = []
    for tag, want in tags.items():
        n_open, n_close = text.count(f"<{tag}>"), text.count(f"</{tag}>")
        if n_open == n_close == want:
            parts.append(1.0)
        elif n_open == n_close > want:
            parts.append(0.5)
        else:
            parts.append(0.0)
    return sum(parts) / len(parts)


def sage_difficulty(verdicts: Iterable[float]) -> float:
    """SAGE Eq. 4: ``r_d = 1 - mean_j V_gt(q, a_j, v)`` over the N_s >= 1 verified Solver samples."""
    v = [float(x) for x in verdicts]
    if not v:
        raise ValueError("sage_difficulty needs at least one verified solver sample (N_s >= 1)")
    return 1.0 - sum(v) / len(v)


def sage_challenger_reward(s_q: float, r_d: float, r_f: float, verifier_valid: bool,
                           alpha: float = 0.7) -> float:
    """SAGE Eq. 5-6 with Algorithm 1 lines 10-13 (see the module note 1).

    ``s_q`` = Norm(Critic score of the question), ``r_d`` from :func:`sage_difficulty`, ``r_f`` the Challenger's
    format reward. If ``s_q >= alpha`` and the verifier is valid: ``(s_q + r_d + r_f)/3`` (the candidate also
    enters the pool); otherwise ``(s_q + r_f)/2`` (difficulty suppressed).
    """
    if s_q >= alpha and verifier_valid:
        return (s_q + r_d + r_f) / 3.0
    return (s_q + r_f) / 2.0


def sage_plan_gate(s_p: float, beta: float = 0.3) -> bool:
    """SAGE Eq. 9: the Solver sees the plan iff ``s_p >= beta`` (beta = 0.3 in the paper)."""
    return s_p >= beta


def sage_planner_reward(s_p: float, r_f: float, lambda_plan: float = 0.5, lambda_f: float = 0.5) -> float:
    """SAGE Eq. 8: ``r_p = lambda_plan * s_p + lambda_f * r_f`` (0.5 / 0.5 by default)."""
    return lambda_plan * s_p + lambda_f * r_f


def sage_solver_reward(s_gt: float, r_f: float, s_p: float | None = None, beta: float = 0.3,
                       weights: tuple[float, float, float] = (0.2, 0.6, 0.2),
                       no_plan_weights: tuple[float, float] = (0.5, 0.5)) -> float:
    """SAGE Eq. 10-11: ``r_s = w_p * s~_p + w_c * s_gt + w_f * r_f`` with ``s~_p = s_p if s_p >= beta else 0``.

    ``weights = (w_p, w_c, w_f)`` = (0.2, 0.6, 0.2). ``s_p=None`` means no plan score (planner disabled): the
    paper's fallback ``0.5 * s_gt + 0.5 * r_f`` (``no_plan_weights``). ``s_gt`` always comes from the verifier.
    """
    if s_p is None:
        w_c, w_f = no_plan_weights
        return w_c * s_gt + w_f * r_f
    w_p, w_c, w_f = weights
    s_tilde = s_p if sage_plan_gate(s_p, beta) else 0.0
    return w_p * s_tilde + w_c * s_gt + w_f * r_f


def sage_critic_reward(r_f: float) -> float:
    """SAGE Eq. 13: the Critic is rewarded for format only, ``r_cr = r_f(o_cr)``."""
    return float(r_f)


# --------------------------------------------------------------------------------------------------------------
# MAE
# --------------------------------------------------------------------------------------------------------------

def mae_difficulty(solve_scores: Sequence[float | None], unparsed: float = 0.5) -> float:
    """MAE's difficulty reward ``1 - mean_i V_J(a_i, q)`` over the N_sample >= 1 Solver answers to the new question,
    each ``V_J`` the Judge's normalised score of one answer (with several Judge calls per answer, every call's score:
    the released code pools them per question). Scores that did not parse (None) are left out; when none parsed,
    the mean is ``unparsed`` (the released code's neutral 0.5), so the difficulty is ``1 - unparsed``."""
    if not solve_scores:
        raise ValueError("mae_difficulty needs at least one solver answer (N_sample >= 1)")
    parsed = [float(s) for s in solve_scores if s is not None]
    return 1.0 - (sum(parsed) / len(parsed) if parsed else unparsed)


def mae_proposer_reward(quality: float, difficulty: float, r_f: float, parsed: bool = True, threshold: float = 0.7,
                        weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)) -> float:
    """MAE's Proposer reward ``w_q R_quality + w_d R_difficulty + w_f R_format``; a question whose quality is below
    ``threshold`` (the quality filter) loses its difficulty term (``w_q R_quality + w_f R_format``, not renormalised,
    as the released code), and an output without a question gets 0."""
    if not parsed:
        return 0.0
    w_q, w_d, w_f = weights
    return w_q * quality + (w_d * difficulty if quality >= threshold else 0.0) + w_f * r_f


# --------------------------------------------------------------------------------------------------------------
# MAESTRO
# --------------------------------------------------------------------------------------------------------------

_CANDIDATE_REF = re.compile(r"\bcandidate\s*#?\s*(\d+)", re.IGNORECASE)


def rationale_attributes(reason: str, chosen: int, final: str | None) -> float:
    """Rationale quality in [0, 1] for MAESTRO Eq. 5's optional term ("rationale quality assessed via reasoning
    attributes"; the paper names no attribute, so these four are this toolkit's): the share of (1) the rationale
    names the chosen candidate (``Candidate <chosen>``, 1-based as displayed), (2) it names another candidate (it
    compares), (3) it states the chosen final answer (outside a candidate's number), (4) it has at least 8 words. An empty rationale scores 0."""
    words = reason.split()
    if not words:
        return 0.0
    named = {int(n) for n in _CANDIDATE_REF.findall(reason)}
    stated = bool(final) and final in _CANDIDATE_REF.sub(" ", reason)  # not the "2" of "Candidate 2"
    checks = [chosen in named, bool(named - {chosen}), stated, len(words) >= 8]
    return sum(checks) / len(checks)


def maestro_reward(correct: float, rationale: float, weight: float = 0.0) -> float:
    """MAESTRO Eq. 5's unified reward: ``(1 - weight) * correct + weight * rationale`` (``weight`` 0: correctness
    of the endorsed candidate alone, selfevo's default)."""
    return (1.0 - weight) * correct + weight * rationale


# --------------------------------------------------------------------------------------------------------------
# AZR
# --------------------------------------------------------------------------------------------------------------

def azr_solve_rate(solved: Iterable[bool | float]) -> float:
    """AZR's r̄_solve: the mean solve reward (Eq. 5, 1 or 0) of the n Monte-Carlo solver rollouts of a task."""
    v = [float(x) for x in solved]
    if not v:
        raise ValueError("azr_solve_rate needs at least one solver rollout (n >= 1)")
    return sum(v) / len(v)


def azr_propose_reward(solve_rate: float) -> float:
    """AZR Eq. 4, the learnability of a proposed task: ``1 - r̄_solve``, but 0 when the task is always solved or
    never (``r̄_solve`` 0 or 1: nothing to learn from it)."""
    if not 0.0 <= solve_rate <= 1.0:
        raise ValueError(f"a solve rate lies in [0, 1], got {solve_rate!r}")
    return 0.0 if solve_rate in (0.0, 1.0) else 1.0 - solve_rate


def azr_reward(r_role: float, formatted: bool, passable: bool) -> float:
    """AZR Eq. 6, the format-aware penalty: ``r_role`` (r_propose or r_solve) for a passable answer (a valid task; a
    correct solution), -0.5 for one that is well formatted but not passable, -1 for a formatting error."""
    if passable:
        return float(r_role)
    return -0.5 if formatted else -1.0
