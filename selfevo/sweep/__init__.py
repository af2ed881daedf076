"""``selfevo sweep FILE.yaml``: recipes × presets × overrides × seeds, each trained and evaluated the same way, and a
table that pairs every row with a baseline row on the same held-out items.

    selfevo sweep benchmarks/sweeps/smoke.yaml                 # run what is missing, then the table
    selfevo sweep FILE.yaml --jobs 2 --only grpo --seeds 0 1 2  # two runs at a time, one row, three seeds
    selfevo sweep FILE.yaml --dry-run                          # check every config, print what is left to run
    selfevo sweep FILE.yaml --table                            # rebuild the table from the folders, run nothing
    selfevo sweep FILE.yaml --launcher slurm --slurm slurm_partition=gpu timeout_min=600 gpus_per_node=1

Every key of the file is checked (did-you-mean for typos), then every row × seed's ``selfevo run`` config and
``selfevo eval`` keys, before anything runs; every problem is one line with exit code 2. Each row × seed is an
ordinary run directory ``OUT/<row>/seed<k>/`` (the recipe's own, resumable with ``resume=true``) with ``selfevo
eval``'s output in ``OUT/<row>/seed<k>/eval/``; a finished run (its final adapter and its checkpoint at the last
step) or evaluation (its summary.json) is skipped, an unfinished run resumes. Nothing else keeps state: the table
(:mod:`selfevo.sweep.table`) is rebuilt from the folders. docs/sweeps.md describes the file and the table.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from selfevo.errors import OneLineParser, UsageError

from . import launch, spec, table


def _parser() -> OneLineParser:
    parser = OneLineParser(prog="selfevo sweep", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("file", help="the sweep file (YAML)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once here, each with T/N threads (T: OMP_NUM_THREADS, else the cores)")
    parser.add_argument("--only", nargs="+", metavar="ROW", help="run only these rows (the table keeps all)")
    parser.add_argument("--seeds", nargs="+", type=int, metavar="K", help="these seeds instead of the file's")
    parser.add_argument("--dry-run", action="store_true", help="check everything, print what is left; run nothing")
    parser.add_argument("--table", action="store_true", help="rebuild table.{md,json} and curves.png; run nothing")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="local: subprocesses here; slurm: one SLURM job per row × seed (extra [slurm])")
    parser.add_argument("--slurm", nargs="+", default=[], metavar="KEY=VALUE",
                        help="submitit executor parameters (slurm_partition=gpu timeout_min=600 gpus_per_node=1)")
    return parser


def slurm_parameters(pairs: list[str]) -> dict:
    """``key=value`` pairs as submitit parameters (values read as YAML: numbers are numbers)."""
    if bad := [p for p in pairs if "=" not in p or p.startswith("=")]:
        raise UsageError(f"--slurm takes KEY=VALUE, not '{bad[0]}'")
    return {key: yaml.safe_load(value) for key, value in (p.split("=", 1) for p in pairs)}


def status(job: spec.Job) -> str:
    if job.evaluated() and job.trained():
        return "done"
    carried = " (its carried-over evaluation is replaced)" if table.carried_over(job.eval_dir) else ""
    return ("to evaluate" if job.trained() else "to resume" if (job.dir / "config.yaml").exists() else
            "to run") + carried


def main(argv: list[str]) -> int:
    args = _parser().parse_intermixed_args(argv)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    cfg, rows = spec.load_sweep(args.file)
    if args.table:
        print(table.write(cfg, rows), end="")
        return 0
    names = spec.pick_rows(rows, args.only)
    jobs = spec.plan(cfg, rows, names, args.seeds)
    env = launch.thread_env(args.jobs) if args.launcher == "local" else None
    parameters = slurm_parameters(args.slurm)
    todo = [job for job in jobs if job.commands()]
    print(f"{len(jobs)} runs, {len(todo)} with work left, in {cfg.output_dir}" +
          (f"; {args.jobs} at a time, OMP_NUM_THREADS={env['OMP_NUM_THREADS']}" if env else ""))
    if args.dry_run:
        for job in jobs:
            print(f"{job.row} seed {job.seed}: {status(job)}")
            for cmd in job.commands():
                print("  " + spec.shown(cmd))
        return 0
    if args.launcher == "slurm":
        failed = launch.run_submitit(todo, Path(cfg.output_dir) / "_submitit", parameters)
    else:
        failed = launch.run_local(todo, args.jobs)
    print(table.write(cfg, rows), end="")
    for job, failure in failed.items():
        print(f"selfevo sweep: {job.row} seed {job.seed} failed: {failure} (log: {launch.log_path(job)})",
              file=sys.stderr)
    return 1 if failed else 0
