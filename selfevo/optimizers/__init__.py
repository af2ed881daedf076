"""Optimizers: one registry, one signature — ``OPTIMIZERS.get(name)(trainer)`` (the run's trainer section,
:class:`~selfevo.loop.TrainerCfg`) gives ``optimizer(store, agent, samples) -> stats``. Registered:
``reinforce_pp`` (CoMAS), ``task_relative`` (SAGE), ``grpo``, ``sft``, ``clpo`` (MAESTRO,
:mod:`~selfevo.optimizers.clpo`; also takes its ``clpo`` section) and ``none`` (no update: prompt-only baselines).
A factory's keyword parameters after the trainer section name the config sections it takes (``clpo(trainer,
clpo)``): a run passes its sections of those names (:func:`selfevo.loop.build.optimizer`).
The math is pure functions in :mod:`~selfevo.optimizers.objectives`."""
from selfevo.optimizers import clpo, policy_gradient, sft  # noqa: F401  (registers the optimizers)
from selfevo.optimizers.base import (OPTIMIZERS, Optimizer, Samples, UpdateSpec, policy_update, reference_logprobs,
                                    score, train_agents)
from selfevo.optimizers.clpo import ClpoCfg
from selfevo.optimizers.trainer import TrainerCfg

__all__ = ["OPTIMIZERS", "ClpoCfg", "Optimizer", "Samples", "TrainerCfg", "UpdateSpec", "policy_update",
           "reference_logprobs", "score", "train_agents"]
