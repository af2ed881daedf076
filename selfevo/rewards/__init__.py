"""Rewards: the papers' formulas as pure functions (:mod:`~selfevo.rewards.formulas`) and reward sources —
callables from episodes to per-turn rewards, registered and composable (:mod:`~selfevo.rewards.sources`). A
recipe's own sources, which read its episodes' structure, live in its recipe (SAGE's, MAE's, AZR's)."""
from selfevo.rewards.formulas import *  # noqa: F401,F403
from selfevo.rewards.formulas import __all__ as _formulas
from selfevo.rewards.sources import (REWARD_SOURCES, RewardResult, RewardSource, assign, build_sources, gated,
                                     labelled, weighted_sum)

__all__ = list(_formulas) + ["REWARD_SOURCES", "RewardResult", "RewardSource", "assign", "build_sources", "gated",
                             "labelled", "weighted_sum"]
