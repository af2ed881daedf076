"""The training-loop kit every recipe runs on: the loop (:mod:`selfevo.loop.loop`), the run directory
(:mod:`selfevo.loop.rundir`: config, logs, checkpoints, adapters, provenance), a step's parts
(:mod:`selfevo.loop.step`), held-out evaluation (:mod:`selfevo.loop.heldout`), ``data.tasks``
(:mod:`selfevo.loop.data`)."""
from selfevo.loop.config import DataCfg, EvalCfg, LogCfg, RunCfg, TrainerCfg
from selfevo.loop.data import load_entries, load_entry, read_task_file, task_batch
from selfevo.loop.heldout import agent_accuracy
from selfevo.loop.loop import Loop
from selfevo.loop.rundir import RunDir, record_launch
from selfevo.loop.step import Phase, Update

__all__ = ["DataCfg", "EvalCfg", "LogCfg", "Loop", "Phase", "RunCfg", "RunDir", "TrainerCfg", "Update",
           "agent_accuracy", "load_entries", "load_entry", "read_task_file", "record_launch", "task_batch"]
