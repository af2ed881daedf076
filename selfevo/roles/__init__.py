"""Roles: pure prompt builders and parsers (no model inside), in the ``ROLES`` registry (name -> Role class).

Every role has a kind (solver, evaluator, scorer, challenger, planner, critic, selector), reads a declared part of
a typed :class:`Context`, and may parse using it. ``ROLES.get("comas.scorer")()`` or :func:`get_role` builds one;
:func:`~selfevo.roles.comas.comas_roles` builds a CoMAS variant's roles. Registered: ``comas.solver``,
``comas.evaluator``, ``comas.scorer``, ``comas.judge`` (ablation w/o evaluation), ``comas.verdict_evaluator``
(ablation w/o scoring), and the minimal ``generic.solver``, ``generic.challenger``, ``generic.planner``,
``generic.critic``, ``generic.selector``, AZR's ``azr.proposer``, ``azr.solver`` (:mod:`selfevo.roles.azr`), SAGE's
``sage.challenger``, ``sage.planner``, ``sage.solver``,
``sage.critic`` (:mod:`selfevo.roles.sage`), MAE's ``mae.proposer``, ``mae.solver``, ``mae.judge``
(:mod:`selfevo.roles.mae`), and MAESTRO's ``maestro.executor``, ``maestro.central``,
``maestro.central_gen`` (:mod:`selfevo.roles.maestro`).
"""
from __future__ import annotations

from typing import Any

from selfevo.roles import generic  # noqa: F401  (registers the generic roles)
from selfevo.roles import azr, mae, maestro, sage  # noqa: F401  (registers the AZR, MAE, MAESTRO and SAGE roles)
from selfevo.roles.base import (
    EMPTY_DISCUSSION, ROLE_KINDS, ROLES, Context, HistoryItem, Parsed, Role, RoleError, group_rounds, last_rounds,
    load_template, register_role, render_discussion, strip_special_tokens,
)
from selfevo.roles.comas import (  # importing registers the CoMAS roles
    CoMASEvaluator, CoMASJudge, CoMASScorer, CoMASSolver, CoMASVerdictEvaluator, comas_roles, parse_score_result,
    parse_verdict, parse_verdict_result,
)
from selfevo.roles.generic import Challenger, Critic, Planner, Selector, Solver


def get_role(name: str, **options: Any) -> Role:
    """An instance of the role registered as ``name``, built with ``options``."""
    return ROLES.get(name)(**options)


__all__ = [
    "ROLES", "ROLE_KINDS", "Role", "RoleError", "Context", "register_role", "Parsed", "HistoryItem", "EMPTY_DISCUSSION",
    "get_role",
    "group_rounds", "last_rounds", "render_discussion", "load_template", "strip_special_tokens",
    "Solver", "Challenger", "Planner", "Critic", "Selector",
    "CoMASSolver", "CoMASEvaluator", "CoMASScorer", "CoMASJudge", "CoMASVerdictEvaluator", "comas_roles",
    "parse_score_result", "parse_verdict", "parse_verdict_result",
]
