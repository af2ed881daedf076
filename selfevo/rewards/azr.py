"""AZR's rewards (Absolute Zero, arXiv 2505.03335, Sec. 3.1-3.3) as two reward sources over the recipe's episodes.

* ``azr_propose`` — a propose episode: one proposer turn (role ``<kind>.propose``) and, when its task was valid, n
  solver rollouts of the task (role ``estimate``) that measure r̄_solve. The recipe has put ``valid`` and, for a valid
  task, ``triplet`` in ``episode.meta``. Proposer: Eq. 6 around Eq. 4 — ``1 - r̄_solve`` (0 for r̄_solve 0 or 1) for
  a valid task, -0.5 for a well-formatted invalid one, -1 for a format error. ``released_penalties``: the released
  code's reading instead — a valid task whose reward is 0 gets -0.5 and an invalid one -1 (its validation failures
  zero the format score). The rollouts are measured, not trained (reward None).
* ``azr_solve`` — a solve episode: one solver turn (role ``<kind>.solve``) on a triplet's solve task: Eq. 6 around
  Eq. 5 — 1 if the ``azr`` verifier finds it right, -0.5 if wrong but formatted, -1 if its answer block is missing.

Metrics per kind: ``valid.<kind>`` (share of proposals that became triplets), ``solve_rate.<kind>`` (mean r̄_solve of
the valid ones), ``accuracy.<kind>`` (solve episodes right).
"""
from __future__ import annotations

from selfevo.interaction import Episode
from selfevo.rewards.formulas import azr_propose_reward, azr_reward, azr_solve_rate
from selfevo.rewards.sources import REWARD_SOURCES, RewardResult, RewardSource
from selfevo.verifiers import verify
from selfevo.verifiers.azr import solve_task


def _ok(turn) -> bool:
    return turn.parsed is not None and turn.parsed.ok


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _by_kind(pairs: list[tuple[str, float]], name: str) -> dict:
    kinds = sorted({k for k, _ in pairs})
    return {f"{name}.{k}": _mean([v for kk, v in pairs if kk == k]) for k in kinds}


@REWARD_SOURCES.register("azr_propose")
def azr_propose(released_penalties: bool = False) -> RewardSource:
    def source(episodes: list[Episode]) -> RewardResult:
        out, valid, rates = [], [], []
        for ep in episodes:
            kind, rewards = ep.task.meta["azr"]["kind"], {}
            i = next(j for j, t in enumerate(ep.turns) if t.role == f"{kind}.propose")
            is_valid, r_propose = bool(ep.meta.get("valid")), 0.0
            if is_valid:
                task = solve_task(kind, ep.meta["triplet"])
                rate = azr_solve_rate([verify(task, t.answer).score >= 1.0 for t in ep.turns if t.role == "estimate"])
                r_propose = azr_propose_reward(rate)
                ep.meta["solve_rate"] = rate
                rates.append((kind, rate))
            formatted, passable = (is_valid, is_valid and r_propose > 0) if released_penalties else \
                (_ok(ep.turns[i]), is_valid)
            rewards[i] = azr_reward(r_propose, formatted, passable)
            rewards.update({j: None for j, t in enumerate(ep.turns) if t.role == "estimate"})
            valid.append((kind, float(is_valid)))
            out.append(rewards)
        return RewardResult(out, {**_by_kind(valid, "valid"), **_by_kind(rates, "solve_rate")})

    return source


@REWARD_SOURCES.register("azr_solve")
def azr_solve() -> RewardSource:
    def source(episodes: list[Episode]) -> RewardResult:
        out, correct = [], []
        for ep in episodes:
            kind = ep.task.meta["azr"]["kind"]
            i = next(j for j, t in enumerate(ep.turns) if t.role == f"{kind}.solve")
            right = verify(ep.task, ep.turns[i].answer).score >= 1.0
            correct.append((kind, float(right)))
            out.append({i: azr_reward(1.0, _ok(ep.turns[i]), right)})
        return RewardResult(out, _by_kind(correct, "accuracy"))

    return source
