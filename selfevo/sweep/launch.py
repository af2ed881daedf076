"""Running a sweep's jobs: here, N at a time as subprocesses (``--jobs N``), or as SLURM jobs through submitit.

Each job is one row × seed: what is left of its training (``python -m selfevo run ...``, ``resume=true`` where a
checkpoint is there), then its evaluation (``python -m selfevo eval ...``), one after the other, their output
appended to ``OUT/<row>/seed<k>.log``. Nothing else is kept: a killed sweep run again finds in the folders what is
done.
"""
from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from selfevo.config import ConfigError

from .spec import Job, shown

SLURM_EXTRA = "submitit is not installed: pip install 'selfevo[slurm]' (the slurm extra) for --launcher slurm"


def cores() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def budget() -> int:
    """The threads a sweep may use in all: ``OMP_NUM_THREADS`` where the user set it, else the cores."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() and int(given) > 0 else cores()


def thread_env(jobs: int, total: int | None = None) -> dict[str, str]:
    """The environment of each of ``jobs`` runs at once: ``OMP_NUM_THREADS`` (and MKL's) = ``total`` // jobs
    (``total``: :func:`budget`), so that together they use the cores without oversubscribing them."""
    total = budget() if total is None else total
    if jobs > total:
        raise ConfigError(f"--jobs {jobs} is more than the {total} threads here (OMP_NUM_THREADS, else the cores): "
                          f"each run needs one")
    n = str(total // jobs)
    return {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


def log_path(job: Job) -> Path:
    return job.dir.parent / f"{job.dir.name}.log"


def run_commands(commands: Sequence[Sequence[str]], log: str, env: dict[str, str] | None = None) -> str | None:
    """Run ``commands`` in turn, output appended to ``log``; None when all succeed, else the failure in words.
    (Module-level: submitit pickles it into a SLURM job.)"""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    for cmd in commands:
        with open(log, "a") as handle:
            handle.write("+ " + " ".join(cmd) + "\n")
            handle.flush()
            rc = subprocess.run(list(cmd), stdout=handle, stderr=subprocess.STDOUT, env=env).returncode
        if rc != 0:
            return f"`{shown(cmd)}` exited with {rc}"
    return None


def run_local(todo: list[Job], jobs: int) -> dict[Job, str]:
    """Run ``todo`` here, ``jobs`` at a time; the failed jobs with their failure."""
    env = thread_env(jobs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {job: pool.submit(_run_job, job, env) for job in todo}
    return {job: f.result() for job, f in futures.items() if f.result() is not None}


def _run_job(job: Job, env: dict[str, str]) -> str | None:
    print(f"start {job.row} seed {job.seed} (log: {log_path(job)})", flush=True)
    failure = run_commands(job.commands(), str(log_path(job)), env)
    print(f"{'done' if failure is None else 'FAILED'} {job.row} seed {job.seed}", flush=True)
    return failure


def run_submitit(todo: list[Job], folder: Path, parameters: dict[str, Any],
                 cluster: str | None = None) -> dict[Job, str]:
    """Submit each of ``todo`` as a job of submitit's executor (SLURM; ``cluster="local"``: its local executor, for
    tests), wait for all, and return the failed ones with their failure."""
    try:
        import submitit
    except ImportError:
        raise ConfigError(SLURM_EXTRA) from None
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    executor.update_parameters(**parameters)
    submitted = [(job, executor.submit(run_commands, job.commands(), str(log_path(job)))) for job in todo]
    for job, sub in submitted:
        print(f"submitted {job.row} seed {job.seed}: job {sub.job_id} (log: {log_path(job)})", flush=True)
    failed = {}
    for job, sub in submitted:
        try:
            failure = sub.result()
        except Exception as exc:  # the job itself died (time limit, node failure): submitit's own message
            failure = f"job {sub.job_id}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}"
        if failure is not None:
            failed[job] = failure
    return failed
