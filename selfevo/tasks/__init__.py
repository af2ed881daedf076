"""Benchmarks and training sets as a typed registry of :class:`TaskSpec` entries producing ``list[Task]``.

>>> from selfevo.tasks import load_tasks, task_names, format_prompt
>>> tasks = load_tasks("gsm8k", "test", limit=2)  # data_root=, or $SELFEVO_DATA, the cache, ../shared/data, hub
>>> tasks[0].reference
'18'
>>> format_prompt(tasks[0])                                # question + "... within \\boxed{}."

Each entry has a loader (local files, looked up in ``data_root=`` or ``$SELFEVO_DATA``, the cache that ``selfevo
prepare data`` fills (:mod:`selfevo.tasks.prepare`), ``../shared/data``; or ``source="hub"``:
``datasets.load_dataset`` on the real hub id, mapped the same way, also used where no local copy exists), a prompt
format (:mod:`selfevo.tasks.prompts`) and a verifier name (``task.meta["verifier"]``, which
:func:`selfevo.verifiers.verify` dispatches on). Errors are one-line
:class:`TaskDataError`\\ s. ``comas_training_mix`` builds the CoMAS training mixture, ``sage_seed_set`` SAGE's seed set.
"""
from __future__ import annotations

from selfevo.tasks.base import (DATA_ENV, TASKS, HubSource, HubUnavailableError, LoadContext, MissingDataError, Place,
                                SkipItem, TaskDataError, TaskSpec, data_cache, data_places, get_task_spec, load_tasks,
                                read_json_list, read_jsonl, register_task, task_names)
from selfevo.tasks.prompts import PROMPT_FORMATS, format_prompt

# Importing the modules registers their entries.
from selfevo.tasks import math_sets, code_sets, science_sets, maslab, generated  # noqa: E402,F401,I001
from selfevo.tasks.mix import comas_training_mix, mix_counts  # noqa: E402
from selfevo.tasks.sage_seed import sage_seed_set  # noqa: E402

__all__ = ["DATA_ENV", "HubSource", "HubUnavailableError", "LoadContext", "MissingDataError", "PROMPT_FORMATS", "Place",
           "SkipItem", "TASKS", "TaskDataError", "TaskSpec", "comas_training_mix", "data_cache", "data_places",
           "format_prompt", "get_task_spec", "load_tasks", "mix_counts", "read_json_list", "read_jsonl",
           "register_task", "sage_seed_set", "task_names"]
