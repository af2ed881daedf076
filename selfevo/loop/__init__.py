"""The training-loop kit every recipe runs on: run directory, config, resume, logs, checkpoints, adapters,
progress, held-out evaluation, ``data.tasks`` (see :mod:`selfevo.loop.loop`)."""
from selfevo.loop.config import DataCfg, EvalCfg, LogCfg, RunCfg, TrainerCfg
from selfevo.loop.data import load_entries, load_entry, read_task_file, task_batch
from selfevo.loop.loop import Loop, Phase, Update, evaluate_agents, record_launch

__all__ = ["DataCfg", "EvalCfg", "LogCfg", "Loop", "Phase", "RunCfg", "TrainerCfg", "Update", "evaluate_agents",
           "load_entries", "load_entry", "read_task_file", "record_launch", "task_batch"]
