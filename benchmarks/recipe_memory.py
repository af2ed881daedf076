"""Peak resident memory of one cpu-preset step of each recipe, per phase of the step.

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.recipe_memory [--recipes comas sage maestro grpo azr mae]
                                                                   [--out NAME] [key=value ...]

Each recipe runs in a fresh process: ``selfevo run RECIPE trainer.max_steps=1 output_dir=<tmp> key=value ...``
(its default preset, ``cpu``; the overrides apply to every recipe). The process's peak resident size is taken per
phase from the kernel's high-water mark (``VmHWM`` in ``/proc/self/status``), reset when a phase starts
(``/proc/self/clear_refs``), so a peak that lasts a millisecond counts as much as one that lasts a minute:

* ``load``: :class:`~selfevo.loop.Loop` set-up (model, adapters, engine, optimizer);
* ``eval``: held-out evaluation (``eval.at_start``, and the last step's);
* ``rollout``: the step's episodes (the engine's prefills, KV caches, sampling);
* ``reward``: the reward sources (verifiers, judges);
* ``update``: the optimizer calls (reference and old log-probs, forward, backward, AdamW);
* ``checkpoint``: logs, adapters and the checkpoint of the step;
* ``step``: the rest of the step (the phases' ``after``, metrics); ``other``: imports, task loading, close.

A phase inside another (an evaluation inside the checkpoint's end of step) counts for the inner one only.
``peak_gib`` is the whole process's peak (the largest of the phases': the same figure as ``/usr/bin/time -v``'s
"Maximum resident set size", which this cannot report itself, as resetting the high-water mark also resets the
kernel's own maximum). Prints a table; writes results/recipe_memory.json. Linux only (a one-line error elsewhere).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import machine, save

RECIPES = ("comas", "sage", "maestro", "grpo", "azr", "mae")
PHASES = ("load", "eval", "rollout", "reward", "update", "checkpoint", "step", "other")
STATUS, CLEAR = Path("/proc/self/status"), Path("/proc/self/clear_refs")


class PhasePeaks:
    """Peak resident size (bytes) per phase of this process: ``with peaks.phase("update"): ...``; nested phases
    count for the innermost one, time outside every phase for ``other``; ``overall`` is the process's peak."""

    def __init__(self):
        if not self.available():
            raise OSError("recipe_memory needs Linux's /proc/self/status and /proc/self/clear_refs")
        self.peaks: dict[str, int] = {}
        self.overall = 0
        self._stack: list[str] = []

    @staticmethod
    def available() -> bool:
        """Whether this system has the kernel files the peaks are read and reset through (Linux)."""
        return STATUS.exists() and CLEAR.exists()

    @staticmethod
    def high_water() -> int:
        """The process's peak resident size since the last reset, in bytes."""
        line = next(x for x in STATUS.read_text().splitlines() if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    def _fold(self) -> None:
        """Credit the high-water mark since the last reset to the running phase, then reset it."""
        hwm = self.high_water()
        label = self._stack[-1] if self._stack else "other"
        self.peaks[label] = max(self.peaks.get(label, 0), hwm)
        self.overall = max(self.overall, hwm)
        CLEAR.write_text("5")  # reset the peak to the current resident size

    @contextlib.contextmanager
    def phase(self, name: str):
        self._fold()
        self._stack.append(name)
        try:
            yield
        finally:
            self._fold()
            self._stack.pop()

    def finish(self) -> dict:
        """Per-phase and overall peaks in GiB (those that ran: :data:`PHASES` first, in order, then any other name)."""
        self._fold()
        gib = lambda b: round(b / 2**30, 3)  # noqa: E731
        order = [p for p in PHASES if p in self.peaks] + [p for p in self.peaks if p not in PHASES]
        return {"phases": {p: gib(self.peaks[p]) for p in order}, "peak_gib": gib(self.overall)}


def _wrap(fn, peaks: PhasePeaks, name: str):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with peaks.phase(name):
            return fn(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def instrument(peaks: PhasePeaks):
    """Label the phases of every :class:`~selfevo.loop.Loop` of this process while inside (see the module doc)."""
    from selfevo.loop import loop as loop_mod

    Loop = loop_mod.Loop
    names = ("__init__", "evaluate", "runner", "run_step", "_update", "end_step")
    saved = {name: getattr(Loop, name) for name in names}

    def runner(self, step):
        r = saved["runner"](self, step)
        r.run = _wrap(r.run, peaks, "rollout")
        return r

    def run_step(self, step, phases, updates=None, metrics=None):
        scored = [dataclasses.replace(p, reward=_wrap(p.reward, peaks, "reward")) if p.reward else p for p in phases]
        with peaks.phase("step"):
            return saved["run_step"](self, step, scored, updates, metrics)

    patched = {"__init__": _wrap(saved["__init__"], peaks, "load"), "evaluate": _wrap(saved["evaluate"], peaks, "eval"),
               "runner": runner, "run_step": run_step, "_update": _wrap(saved["_update"], peaks, "update"),
               "end_step": _wrap(saved["end_step"], peaks, "checkpoint")}
    for name, fn in patched.items():
        setattr(Loop, name, fn)
    try:
        yield peaks
    finally:
        for name, fn in saved.items():
            setattr(Loop, name, fn)


def measure(recipe: str, overrides: list[str]) -> dict:
    """One step of ``recipe`` in this process, its phases measured; the per-phase and overall peaks (GiB)."""
    peaks = PhasePeaks()
    from selfevo import cli

    with tempfile.TemporaryDirectory() as tmp, instrument(peaks):
        rc = cli.main(["run", recipe, "trainer.max_steps=1", f"output_dir={Path(tmp) / recipe}", *overrides])
    if rc != 0:
        raise SystemExit(f"recipe_memory: selfevo run {recipe} exited with {rc}")
    return peaks.finish()


def table(rows: dict) -> str:
    """The peaks (GiB) as a text table: one line per recipe, one column per phase that ran in any of them."""
    cols = [p for p in PHASES if any(p in r["phases"] for r in rows.values())]
    lines = ["recipe    " + "".join(f"{c:>11}" for c in cols) + f"{'peak':>8}"]
    for name, r in rows.items():
        cells = "".join(f"{r['phases'][c]:>11.2f}" if c in r["phases"] else f"{'-':>11}" for c in cols)
        lines.append(f"{name:<10}{cells}{r['peak_gib']:>8.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), help=f"of {', '.join(RECIPES)}")
    ap.add_argument("--out", default="recipe_memory", help="results/<out>.json (default: recipe_memory)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="key=value for every recipe's run")
    args = ap.parse_args()
    # key=value after --recipes lands in its list: it is an override wherever it is written
    args.overrides += [r for r in args.recipes if "=" in r]
    args.recipes = [r for r in args.recipes if "=" not in r]
    unknown = [r for r in args.recipes if r not in RECIPES]
    if unknown:
        ap.error(f"unknown recipe {unknown[0]!r}; known: {', '.join(RECIPES)}")
    if args.child is not None:
        print(json.dumps(measure(args.child, args.overrides)))
        return
    rows, failed = {}, {}
    for recipe in args.recipes:  # one fresh process each; a recipe that fails or is killed loses no other's row
        out = subprocess.run([sys.executable, "-m", __spec__.name, "--child", recipe, *args.overrides],
                             capture_output=True, text=True)
        if out.returncode != 0:
            why = out.stderr.strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
            failed[recipe] = f"exit code {out.returncode}: {why[0][:300]}"
            print(f"recipe_memory: {recipe} failed ({failed[recipe]})", file=sys.stderr)
        else:
            rows[recipe] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{recipe}: {json.dumps(rows[recipe])}", file=sys.stderr, flush=True)
        save(args.out, {"recipes": rows, "failed": failed, "overrides": args.overrides,  # after each recipe
                               "command": "trainer.max_steps=1", "machine": machine()})
    if rows:
        print(table(rows))
    if failed:
        raise SystemExit(f"recipe_memory: {', '.join(failed)} failed; the others are in results/{args.out}.json")


if __name__ == "__main__":
    main()
