"""The main job as a user meets it: `selfevo run comas` (preset cpu), timed end to end; writes
benchmarks/results/main_job[_NAME].json with the command's wall time, the median, min and max step time, the time
to the end of step 0, held-out accuracy first -> last, the resolved dtype and the CPU.

    .venv/bin/python -m benchmarks.main_job                                  # runs it (about 27 min on 2 AVX2 cores)
    .venv/bin/python -m benchmarks.main_job --name before trainer.max_steps=3 data.tasks=[] ...   # other keys
    .venv/bin/python -m benchmarks.main_job --run-dir runs/comas --wall-s 1632   # a run made by hand: its record

Run it on a quiet machine: nothing else heavy beside it (the step times are the CPU's).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import save


def record(run: Path, wall_s: float | None, argv: list[str]) -> dict:
    """The figures of a finished run directory (metrics.jsonl, run.json) and the command's wall time."""
    from selfevo.loop.summary import held_out, mean_accuracy, read_metrics

    metrics = read_metrics(run)
    if not metrics:
        raise SystemExit(f"main_job: no metrics.jsonl in '{run}'")
    steps = [m["step_s"] for m in metrics]
    launch = json.loads((run / "run.json").read_text())[-1]
    ends = held_out(metrics)
    accuracy = [round(mean_accuracy(e), 4) for _, e in ends] if ends else None
    return {"argv": argv, "wall_s": None if wall_s is None else round(wall_s, 1), "steps": len(steps),
            "median_step_s": statistics.median(steps), "min_step_s": min(steps), "max_step_s": max(steps),
            "median_rollout_s": statistics.median(m["rollout_s"] for m in metrics),
            "median_update_s": statistics.median(m["update_s"] for m in metrics),
            "held_out_first_last": accuracy, "dtype": launch.get("dtype"), "cpu": launch["machine"].get("cpu"),
            "cpus": launch["machine"].get("cpus"), "torch": launch["packages"].get("torch")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="", help="results file suffix: main_job_NAME.json")
    ap.add_argument("--run-dir", default=None, help="record this finished run instead of running one")
    ap.add_argument("--wall-s", type=float, default=None, help="with --run-dir: the command's measured wall time")
    ap.add_argument("overrides", nargs="*", help="selfevo run comas key=value")
    args = ap.parse_args()
    if args.run_dir:
        result = record(Path(args.run_dir), args.wall_s, ["(recorded)", args.run_dir])
    else:
        out = Path(tempfile.mkdtemp(prefix="main_job_")) / "run"
        argv = [sys.executable, "-m", "selfevo", "run", "comas", *args.overrides, f"output_dir={out}"]
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        result = record(out, time.perf_counter() - t0, argv[2:-1])
    save("main_job" + (f"_{args.name}" if args.name else ""), result)


if __name__ == "__main__":
    main()
