"""Recipes: one readable file per algorithm. Each module has a config dataclass named after it (``CoMASCfg``, a
:class:`~selfevo.loop.config.RunCfg`) and ``main(cfg, command_line=None)`` (``selfevo run`` passes its command
line, which the run records in run.json); the ``RECIPES`` registry maps a name to its module (imported lazily) and
config class, and presets are YAML files in ``selfevo/configs``."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from selfevo.registry import Registry


@dataclass(frozen=True)
class Recipe:
    name: str
    module: str
    config: str
    about: str
    kind: str = "method"  # "method": a paper the toolkit implements; "baseline": a method compared against; "demo"
    default_preset: str = "cpu"

    def load(self):
        return importlib.import_module(self.module)

    def config_class(self) -> type:
        """The recipe's config dataclass (``selfevo run NAME``'s keys and presets)."""
        return getattr(self.load(), self.config)


RECIPES: Registry[Recipe] = Registry("recipe")


def new_task_labels(recipe: str | None) -> frozenset[str]:
    """The turn labels of ``recipe`` whose text answers the task its episodes generated (their log's ``new_task``,
    :func:`~selfevo.algorithms.pool.note_new_task`): the recipe module's ``NEW_TASK_LABELS`` (SAGE's and MAE's
    difficulty samples); none for a recipe that generates no tasks or is not registered."""
    if recipe not in RECIPES.names():
        return frozenset()
    return frozenset(getattr(RECIPES.get(recipe).load(), "NEW_TASK_LABELS", ()))
for _r in (
    Recipe("demo", "selfevo.algorithms.demo", "DemoCfg",
           "several agents (LoRA adapters) answer questions in one batch", kind="demo"),
    Recipe("comas", "selfevo.algorithms.comas", "CoMASCfg",
           "CoMAS: discussion → zero-sum interaction rewards → REINFORCE++"),
    Recipe("sage", "selfevo.algorithms.sage", "SageCfg",
           "SAGE: challenger, planner, solver, critic; verified question pool; Task-Relative REINFORCE++"),
    Recipe("mae", "selfevo.algorithms.mae", "MAECfg",
           "MAE: proposer, solver, judge on one adapter; judge rewards, no ground truth; question pool; "
           "Task-Relative REINFORCE++", kind="baseline"),
    Recipe("maestro", "selfevo.algorithms.maestro", "MaestroCfg",
           "MAESTRO: N×K candidates, a trained central selector, broadcast; CLPO (or GRPO / SFT / prompt only)"),
    Recipe("azr", "selfevo.algorithms.azr", "AZRCfg",
           "AZR: one model proposes and solves deduction / abduction / induction code tasks, validated by "
           "execution; Task-Relative REINFORCE++", kind="baseline"),
    Recipe("grpo", "selfevo.algorithms.grpo", "GRPOCfg",
           "GRPO: one agent, the evaluation's prompt, verifier reward (the plain RL baseline)", kind="baseline"),
):
    RECIPES.register(_r.name)(_r)
