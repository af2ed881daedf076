"""Resumable checkpoints of a run: adapters (PEFT format), optimizer states, step, RNG states, recipe state.

Written to ``<run>/checkpoint.tmp`` and renamed over ``<run>/checkpoint`` only when complete, so a crash while
saving leaves the previous checkpoint intact. A damaged checkpoint is a one-line :class:`CheckpointError`.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from selfevo.errors import SelfevoError
from selfevo.policy import PolicyStore


class CheckpointError(SelfevoError, RuntimeError):
    """A checkpoint that cannot be resumed from (missing, damaged, or without an agent's adapter), in one line."""


def rng_states() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def save(run_dir: str | Path, store: PolicyStore, step: int, state: dict | None = None,
         files: dict[str, str] | None = None) -> Path:
    """Write the checkpoint of ``step``: adapters, optimizers, RNG states, ``state`` (JSON) and any recipe
    ``files`` (name → text, e.g. a question pool) — all in one directory renamed into place at once. A write that
    fails (``OSError``: a full disk) removes the partial directory and is raised; the previous checkpoint stays."""
    run = Path(run_dir)
    tmp, final = run / "checkpoint.tmp", run / "checkpoint"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write(tmp, store, step, state, files)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # give the space back; checkpoint/ was not touched
        raise
    old = run / "checkpoint.old"
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)  # left by a save stopped before its last line; final is complete
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _write(folder: Path, store: PolicyStore, step: int, state: dict | None, files: dict[str, str] | None) -> None:
    for agent in store.agents():
        store.save_adapter(agent, folder / "adapters" / agent)
    optim = {a: o.state_dict() for a, o in store.adamws.items()}
    torch.save({"optim": optim, "rng": rng_states(), "versions": store.versions}, folder / "trainer.pt")
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    (folder / "state.json").write_text(json.dumps({"step": step, **(state or {})}))


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never a half-written file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def drop_logged_steps(run: Path, first: int, logs: tuple[str, ...]) -> None:
    """On resume: remove the lines of steps ≥ ``first`` from the run's JSONL ``logs`` (a run killed after logging a
    step but before its checkpoint was written would otherwise log that step twice)."""
    for name in logs:
        path = run / name
        if path.exists():
            keep = [line for line in path.read_text().splitlines(keepends=True) if _step_of(line) < first]
            atomic_write_text(path, "".join(keep))


def _step_of(line: str) -> float:
    """The ``step`` of a log line; a line cut short by a kill (not JSON) counts as not logged."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return float("inf")


def _latest(run: Path) -> Path:
    """``checkpoint``, or ``checkpoint.old`` when a crash fell between the two renames of :func:`save`."""
    final, old = run / "checkpoint", run / "checkpoint.old"
    return old if not final.exists() and (old / "state.json").exists() else final


def read_file(run_dir: str | Path, name: str) -> str | None:
    """A recipe file saved with the latest checkpoint (see :func:`save`), or None if it has none."""
    path = _latest(Path(run_dir)) / name
    return path.read_text() if path.exists() else None


def exists(run_dir: str | Path) -> bool:
    return (_latest(Path(run_dir)) / "state.json").exists()


def load(run_dir: str | Path, store: PolicyStore) -> dict:
    """Restore adapters, optimizers, versions and RNG states into ``store``; returns the saved state dict."""
    ckpt = _latest(Path(run_dir))
    try:
        state = json.loads((ckpt / "state.json").read_text())
        trainer = torch.load(ckpt / "trainer.pt", weights_only=False)
    except FileNotFoundError as exc:
        raise CheckpointError(f"no checkpoint in '{run_dir}' ({Path(exc.filename).name} missing)") from None
    except Exception as exc:  # truncated or corrupt files
        raise CheckpointError(f"checkpoint in '{run_dir}' is damaged: {type(exc).__name__}: {exc}") from None
    missing = sorted(set(store.agents()) - set(p.name for p in (ckpt / "adapters").iterdir()))
    if missing:
        raise CheckpointError(f"checkpoint in '{run_dir}' has no adapter for agents {missing}")
    for agent in store.agents():
        store.load_adapter(agent, ckpt / "adapters" / agent)
    for agent, opt_state in trainer["optim"].items():
        store.adamw(agent).load_state_dict(opt_state)
    store.versions.update(trainer["versions"])
    set_rng_states(trainer["rng"])
    return state
