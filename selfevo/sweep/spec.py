"""A sweep file: its schema, loading and checking, and the plan of runs and evaluations it names.

:func:`load_sweep` reads the YAML into :class:`SweepCfg` (top level and ``eval``) and one :class:`RowCfg` per row,
through the config machinery (unknown keys with did-you-mean, ranges and choices: one-line ``ConfigError``);
:func:`plan` then resolves every row × seed into its ``selfevo run`` config (validated as ``selfevo run --dry-run``
does) and its ``selfevo eval`` keys (validated as ``selfevo eval --dry-run`` does), before anything runs.
"""
from __future__ import annotations

import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from omegaconf import MISSING, DictConfig, OmegaConf

from selfevo.config import DTYPES, ConfigError, load_config, load_section, opt, renamed_key

ROW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def _recipe_names() -> list[str]:
    from selfevo.algorithms import RECIPES

    return RECIPES.names()


def _benchmark_names() -> list[str]:
    from selfevo.tasks import task_names

    return task_names()


def _setup_names() -> list[str]:
    from selfevo.setups import SETUPS

    return SETUPS.names()


@dataclass
class SweepSamplingCfg:
    max_new_tokens: int = opt(256, "answer length of every evaluation", ge=1)
    temperature: float = opt(0.0, "sampling temperature of every evaluation; 0 = greedy", ge=0)
    top_p: float = opt(1.0, "nucleus sampling of every evaluation", gt=0, le=1)


@dataclass
class SweepEvalCfg:
    """The evaluation every row shares (``selfevo eval``'s keys)."""

    benchmark: str = opt(MISSING, "the held-out benchmark (selfevo ls lists them)", choices=_benchmark_names)
    split: str | None = opt(None, "benchmark split (null: the benchmark's default)")
    limit: int | None = opt(None, "the first n items of the split (null: all)", ge=1)
    setup: str = opt("vanilla", "inference setup (a row may name another, e.g. maestro_select)",
                     choices=_setup_names)
    sampling: SweepSamplingCfg = opt(SweepSamplingCfg, "sampling of every evaluation (greedy by default)")
    dtype: str = opt("auto", "model.dtype of every evaluation", choices=DTYPES)
    backbones: list[str] | None = opt(None, "model.backbones of the evaluation-only rows (null: selfevo eval's "
                                            "default); a trained row is evaluated on its run's backbones")
    set: list[str] = opt([], "more selfevo eval keys for every evaluation (key=value: model.device=cpu, data_root=...)")


@dataclass
class RowCfg:
    """One row: a recipe run (recipe, preset, overrides) evaluated with its final adapter, or an evaluation-only row
    (no recipe: the untrained base, or a setup such as maestro_select with a given adapter)."""

    recipe: str | None = opt(None, "the recipe to train (null: an evaluation-only row)", choices=_recipe_names)
    preset: str | None = opt(None, "the recipe's preset or a .yaml path (null: the recipe's default)")
    overrides: list[str] = opt([], "key=value overrides of the run (seed and output_dir are the sweep's)")
    command: list[str] = opt([], "python arguments of a training other than selfevo run (e.g. [-m, "
                                 "benchmarks.sweeps.trl_grpo]), given selfevo run's arguments after them ([--preset P] "
                                 "overrides seed=k output_dir=DIR); finished when its adapter is there")
    adapter: str = opt("adapters/final/agent0", "the adapter evaluated, relative to the run directory")
    adapter_key: str = opt("adapters", "the selfevo eval key that loads it (central_adapter: a MAESTRO central "
                                       "agent)", choices=("adapters", "central_adapter"))
    setup: str | None = opt(None, "this row's inference setup (null: eval.setup)", choices=_setup_names)
    eval_set: list[str] = opt([], "more selfevo eval keys for this row (setup options such as n_agents=3)")
    seeds: list[int] | None = opt(None, "this row's seeds (null: the sweep's)")
    baseline: str | None = opt(None, "the row this one is paired against (null: the sweep's baseline), e.g. a base "
                                     "evaluated under this row's own eval_set keys")
    curve: list[str] = opt([], "metrics.jsonl keys plotted per step in curves.png (dotted: reward.agent0)")
    about: str = opt("", "what the row tests, one line")


@dataclass
class SweepCfg:
    output_dir: str | None = opt(None, "where the runs and the table go (null: runs/sweeps/<file name>)")
    seeds: list[int] = opt([0], "training seeds of every row", nonempty=True)
    baseline: str | None = opt(None, "the row every other row is paired against (null: no paired columns)")
    contrasts: list[str] = opt([], "more pairs of rows compared on the same items, each 'a - b' (spaces around "
                                   "the minus): the table's second part")
    eval: SweepEvalCfg = opt(SweepEvalCfg, "the evaluation every row shares")
    rows: dict[str, Any] = opt({}, "name: row (recipe, preset, overrides, ... or an evaluation-only row)")


@dataclass(frozen=True)
class Job:
    """One row × seed: its run directory, the training command (none for an evaluation-only row), the evaluation
    keys, and what marks the run finished (its final adapter, and the checkpoint at ``max_steps - 1``)."""

    row: str
    seed: int
    dir: Path
    train: tuple[str, ...] = ()
    eval: tuple[str, ...] = ()
    max_steps: int | None = None
    adapter: str = ""
    command: tuple[str, ...] = ()  # a training other than selfevo run: python's arguments before ``train``

    @property
    def eval_dir(self) -> Path:
        return self.dir / "eval"

    def trained(self) -> bool:
        """True for an evaluation-only row, else the run's final adapter is there and its checkpoint is the last
        step (a run killed between the two is resumed, which then only exports what is missing)."""
        if not self.train:
            return True
        if self.command:  # another trainer: its own checkpoints, its adapter written last
            return (self.dir / self.adapter / "adapter_config.json").exists()
        from selfevo.loop import checkpoint

        state = checkpoint.read_file(self.dir, "state.json")
        return ((self.dir / self.adapter / "adapter_config.json").exists() and state is not None
                and json.loads(state).get("step") == self.max_steps - 1)

    def evaluated(self) -> bool:
        """selfevo eval writes summary.json last; a carried-over evaluation (numbers recorded elsewhere, kept for
        the table) is not this sweep's own, so running the sweep evaluates the row again and replaces it."""
        from .table import carried_over

        return (self.eval_dir / "summary.json").exists() and not carried_over(self.eval_dir)

    def commands(self, python: str = sys.executable) -> list[list[str]]:
        """What is left to do: the training (with resume=true where a checkpoint is there; a row's own ``command``
        resumes by itself), then the evaluation."""
        from selfevo.loop import checkpoint

        todo = []
        if self.command and not self.trained():
            todo.append([python, *self.command, *self.train])
        elif not self.trained():
            resume = ["resume=true"] if checkpoint.exists(self.dir) else []
            todo.append([python, "-m", "selfevo", *self.train, *resume])
        if not self.evaluated():
            todo.append([python, "-m", "selfevo", *self.eval])
        return todo


def _read_yaml(path: Path) -> DictConfig:
    if not path.exists():
        raise ConfigError(f"no sweep file '{path}'")
    try:
        data = OmegaConf.load(path)
    except Exception as exc:  # YAML syntax errors
        raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, DictConfig):
        raise ConfigError(f"{path} must be a mapping of keys (output_dir, seeds, baseline, eval, rows)")
    return data


def load_sweep(path: str | Path) -> tuple[DictConfig, dict[str, DictConfig]]:
    """The sweep file's top level and ``eval`` (:class:`SweepCfg`) and its rows (name → :class:`RowCfg`), checked
    key by key; every problem is a one-line ``ConfigError`` naming the file (and the row)."""
    path = Path(path)
    data = _read_yaml(path)
    cfg = load_section(SweepCfg, data, str(path))
    if not cfg.rows:
        raise ConfigError(f"{path} names no rows")
    rows = {}
    for name, row in cfg.rows.items():
        if not ROW_NAME.match(str(name)):
            raise ConfigError(f"row name '{name}' in {path} must be letters, digits and _.+- (a folder name)")
        if row is None:  # `base:` alone: a row of defaults
            row = OmegaConf.create({})
        if not isinstance(row, DictConfig):
            raise ConfigError(f"row '{name}' in {path} must be a mapping (recipe, preset, overrides, ...)")
        rows[str(name)] = load_section(RowCfg, row, f"{path}, row '{name}'")
    if cfg.baseline is not None and cfg.baseline not in rows:
        raise ConfigError(f"baseline '{cfg.baseline}' is not a row of {path}{hint(cfg.baseline, rows)}")
    for name, row in rows.items():
        if row.baseline is not None and row.baseline not in rows:
            raise ConfigError(f"row '{name}' in {path}: baseline '{row.baseline}' is not a row"
                              f"{hint(row.baseline, rows)}")
    for pair in cfg.contrasts:
        contrast_rows(pair, rows, path)
    if cfg.output_dir is None:
        cfg.output_dir = str(Path("runs") / "sweeps" / path.stem)
    return cfg, rows


def contrast_rows(pair: str, rows: Sequence[str], path: str | Path = "the sweep file") -> tuple[str, str]:
    """``"a - b"`` (a contrast of the sweep file) as ``(a, b)``, both rows of it and not the same row."""
    parts = str(pair).split(" - ")
    if len(parts) != 2 or not all(x.strip() for x in parts):
        raise ConfigError(f"contrast '{pair}' in {path} must be two rows as 'a - b' (spaces around the minus)")
    a, b = (x.strip() for x in parts)
    for name in (a, b):
        if name not in rows:
            raise ConfigError(f"contrast '{pair}' in {path}: '{name}' is not a row of it{hint(name, rows)}")
    if a == b:
        raise ConfigError(f"contrast '{pair}' in {path} compares a row with itself")
    return a, b


def hint(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (rows: {', '.join(known)})"


def pick_rows(rows: dict[str, DictConfig], only: Sequence[str] | None) -> list[str]:
    """The rows named by ``--only`` (all without it), in the file's order; an unknown name is a one-line error."""
    for name in only or ():
        if name not in rows:
            raise ConfigError(f"--only: no row '{name}'{hint(name, list(rows))}")
    return [r for r in rows if not only or r in only]


def row_seeds(cfg: DictConfig, row: DictConfig, seeds: Sequence[int] | None = None) -> list[int]:
    """``--seeds`` where given, else the row's own seeds, else the sweep's."""
    return list(seeds) if seeds else list(row.seeds if row.seeds is not None else cfg.seeds)


def eval_keys(cfg: DictConfig, row: DictConfig, seed: int, out: Path, backbones: Sequence[str] | None,
              adapter: Path | None) -> list[str]:
    """The ``selfevo eval`` keys of one row × seed (writing to ``out``)."""
    e = cfg.eval
    keys = [f"benchmark={e.benchmark}", f"setup={row.setup or e.setup}",
            *([f"split={e.split}"] if e.split else []), *([f"limit={e.limit}"] if e.limit else []),
            f"sampling.max_new_tokens={e.sampling.max_new_tokens}", f"sampling.temperature={e.sampling.temperature}",
            f"sampling.top_p={e.sampling.top_p}", f"model.dtype={e.dtype}", f"seed={seed}"]
    if backbones:
        keys.append(f"model.backbones=[{','.join(backbones)}]")
    keys += [*e["set"], *row.eval_set]
    if adapter is not None:
        keys.append(f"{row.adapter_key}=[{adapter}]" if row.adapter_key == "adapters" else
                    f"central_adapter={adapter}")
    return [*keys, f"output_dir={out}"]


def written_by_sweep(key: str, out: Path) -> bool:
    """Whether ``key=value`` names a file inside the sweep's ``out`` that is not there yet: one a row of the sweep
    writes first (the slates of a ``maestro_select`` row that others replay), not checkable before it runs."""
    name, _, value = key.partition("=")
    path = Path(value)
    return name != "output_dir" and not path.exists() and Path(out).resolve() in path.resolve().parents


def check_eval(keys: list[str], adapter: bool, out: Path | None = None) -> None:
    """``selfevo eval --dry-run``'s checks of ``keys``; a trained row's adapter (not there before its run) and a
    file the sweep writes in ``out`` before this row (:func:`written_by_sweep`) are left out of them, and a trained
    row's setup checked to take its adapter."""
    from selfevo.evaluation import EvalError, load_eval_config

    given = [k for k in keys if not (adapter and k.startswith(("adapters=", "central_adapter=")))
             and not (out is not None and written_by_sweep(k, out))]
    cfg, _ = load_eval_config(given)
    if adapter and any(k.startswith("central_adapter=") for k in keys) and "maestro_select" not in cfg.setup:
        raise EvalError("adapter_key=central_adapter is the central agent of setup=maestro_select, which the row "
                        "does not use")


def run_config(row: DictConfig, seed: int, where: Path) -> DictConfig:
    """The row's ``selfevo run`` config for ``seed`` in ``where``, validated (``selfevo run --dry-run``)."""
    from selfevo.algorithms import RECIPES

    recipe = RECIPES.get(row.recipe)
    recipe.load()
    return load_config(recipe.config_class(), recipe.name, row.preset or recipe.default_preset,
                       [*row.overrides, f"seed={seed}", f"output_dir={where}"])


def check_same_run(where: Path, cfg: DictConfig) -> None:
    """A run directory is reused only by the config that started it (``config.yaml``, ``resume`` aside): a sweep
    file changed under a run is a one-line error, not a silently mixed row."""
    path = where / "config.yaml"
    if not path.exists():
        return
    now = _flat(OmegaConf.to_container(cfg, resolve=True))
    had = _resolved_dtype(where, _current_names(_flat(OmegaConf.to_container(OmegaConf.load(path))), now), now)
    for key in sorted(set(had) | set(now)):
        if key != "resume" and had.get(key, "(none)") != now.get(key, "(none)"):
            raise ConfigError(f"{where} was trained with {key}={had.get(key, '(none)')}, the sweep file now says "
                              f"{now.get(key, '(none)')}: remove the folder or use another output_dir")


def _resolved_dtype(where: Path, had: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """A run started with ``model.dtype=auto`` trained in the dtype ``auto`` resolved to on its machine, which each
    launch records in run.json: a file that now pins that dtype names the same run (not one pinning another)."""
    want, record = now.get("model.dtype"), where / "run.json"
    if had.get("model.dtype") != "auto" or want == "auto" or not record.exists():
        return had
    launches = json.loads(record.read_text())
    return {**had, "model.dtype": want} if launches and {x.get("dtype") for x in launches} == {want} else had


def _current_names(had: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """A run started before a key was renamed (:data:`selfevo.config.RENAMED`) recorded the old name: its value
    is read under the new name, so the rename alone does not make it another run."""
    out = {}
    for key, value in had.items():
        new = [n for n in renamed_key(key) if n in now] if key not in now else []
        out.update({n: value for n in new or [key]})  # a key split into several sections: each has its value
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    return {k: v for key, val in d.items() for k, v in _flat(val, f"{prefix}{key}.").items()}


def check_same_eval(eval_dir: Path, cfg: DictConfig, row: DictConfig, seed: int) -> None:
    """A finished evaluation is reused only where its summary.json says it was the one the file asks for now
    (benchmark, split, setup, number of items, sampling, seed): a changed ``eval`` section is a one-line error, not
    a silently stale row."""
    path = eval_dir / "summary.json"
    if not path.exists():
        return
    had = json.loads(path.read_text())[0]
    e = cfg.eval
    want = {"benchmark": e.benchmark, "setup": row.setup or e.setup, "seed": seed,
            "sampling.max_new_tokens": e.sampling.max_new_tokens, "sampling.temperature": e.sampling.temperature,
            "sampling.top_p": e.sampling.top_p, **({"split": e.split} if e.split else {}),
            **({"n": e.limit} if e.limit else {})}
    got = {**had, **{f"sampling.{k}": v for k, v in (had.get("sampling") or {}).items()}}
    for key, value in want.items():
        if got.get(key) != value and not (key == "n" and got.get("n", 0) < value):  # a split shorter than limit
            raise ConfigError(f"{eval_dir} was evaluated with {key}={got.get(key)}, the sweep file now says {value}: "
                              f"remove that folder or use another output_dir")


def plan(cfg: DictConfig, rows: dict[str, DictConfig], names: Sequence[str],
         seeds: Sequence[int] | None = None) -> list[Job]:
    """Every row × seed of ``names`` as a :class:`Job`, each config validated before any runs."""
    out, jobs = Path(cfg.output_dir), []
    for name in names:
        row = rows[name]
        for seed in row_seeds(cfg, row, seeds):
            where = out / name / f"seed{seed}"
            if row.recipe is None:
                keys = eval_keys(cfg, row, seed, where / "eval", cfg.eval.backbones, None)
                check_eval(keys, adapter=False, out=out)
                check_same_eval(where / "eval", cfg, row, seed)
                jobs.append(Job(name, seed, where, eval=("eval", *keys)))
                continue
            run = run_config(row, seed, where)
            check_same_run(where, run)
            keys = eval_keys(cfg, row, seed, where / "eval", list(run.model.backbones), where / row.adapter)
            check_eval(keys, adapter=True, out=out)
            check_same_eval(where / "eval", cfg, row, seed)
            args = (*(["--preset", row.preset] if row.preset else []), *row.overrides, f"seed={seed}",
                    f"output_dir={where}")
            train = args if row.command else ("run", row.recipe, *args)
            jobs.append(Job(name, seed, where, train, ("eval", *keys), run.trainer.max_steps, row.adapter,
                            tuple(row.command)))
    return jobs


def shown(cmd: Sequence[str]) -> str:
    """A command as the user types it: ``selfevo run grpo ...`` (``python -m ...`` for a row's own command)."""
    return ("selfevo " + " ".join(cmd[3:])) if list(cmd[1:3]) == ["-m", "selfevo"] else "python " + " ".join(cmd[1:])

