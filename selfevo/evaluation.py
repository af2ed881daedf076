"""``selfevo eval``: run inference setups on benchmarks, score the final answers, write results and a table.

    selfevo eval benchmark=gsm8k setup=debate model.backbones=smollm2-135m-instruct limit=50 output_dir=DIR
    selfevo eval benchmark=gsm8k,math500 setup=vanilla,debate adapters=[ckpt/a0,ckpt/a1] sampling.temperature=0.7
    selfevo eval --preset my_eval.yaml limit=10 --dry-run

Keys are ``key=value`` (lists as ``a,b`` or ``[a,b]``) and go through the same config machinery as ``selfevo run``
(:class:`EvalConfig`: ranges and choices checked before anything loads, did-you-mean for typos, ``--preset FILE.yaml``
for defaults, ``--dry-run`` to print the resolved keys and stop); ``selfevo eval --help`` lists them. ``model.*``,
``engine.*`` and ``sampling.*`` are the sections of ``selfevo run`` (the same keys, the same meaning; here a null
``sampling.temperature`` / ``sampling.top_p`` is each setup's paper default, and adapters bring their own LoRA
settings). ``benchmark`` and ``setup`` are required. Any other key must be an option of a selected setup (e.g.
``k=8``, ``aggregate=llm``, ``rounds=2``, ``epsilon=0``; declared by each setup, see ``selfevo.setups``); it goes to
every selected setup that has it.

For every benchmark × setup it writes ``DIR/<benchmark>-<setup>/results.json`` (benchmark, setup, n, accuracy,
the setup's metrics such as coverage/identification for maestro_select, sampling, options, wall time, engine
calls) and ``items.jsonl`` (per task: prompt, every response, final response, extracted answer, verdict); then
``DIR/table.md`` and ``DIR/summary.json`` over all combinations, and prints the table. Accuracy is the share of
final responses the benchmark's verifier scores 1.0. A tqdm bar counts engine calls (steps).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import MISSING, DictConfig, OmegaConf
from tqdm import tqdm

from selfevo.config import (ConfigError, EngineCfg, ModelCfg, SamplingCfg, check_sampling_fits_engine, describe,
                            load_config, opt, parse_overrides)
from selfevo.config import format_table as config_table
from selfevo.engines import build_engine
from selfevo.errors import ONE_LINE_ERRORS, OneLineParser
from selfevo.loop.build import policy_store, seed_everything
from selfevo.loop.heldout import evaluate
from selfevo.policy import LoraSettings
from selfevo.setups import SETUPS, load_options, option_names
from selfevo.tasks import load_tasks, task_names
from selfevo.types import SamplingParams

TABLE_METRICS = ("coverage", "identification", "coverage_any", "select_parse_failures", "vote_agreement",
                 "unanimous_rate", "mean_assistant_turns", "mean_rounds", "mean_layers")


class EvalError(ConfigError):
    """A bad ``selfevo eval`` argument, said in one line."""


def _benchmark_names() -> list[str]:
    return task_names()


def _setup_names() -> list[str]:
    return SETUPS.names()


@dataclasses.dataclass
class EvalSamplingCfg(SamplingCfg):
    """``selfevo run``'s sampling section, where null means each setup's paper default."""

    temperature: float | None = opt(None, "sampling temperature; 0 = greedy; null: each setup's paper default", ge=0)
    top_p: float | None = opt(None, "nucleus sampling: keep the smallest token set with this much probability; null: "
                                    "each setup's paper default", gt=0, le=1)


@dataclasses.dataclass
class EvalConfig:
    """The keys of ``selfevo eval`` (setup options aside)."""

    benchmark: list[str] = opt(MISSING, "benchmarks to evaluate on, e.g. gsm8k,math500; selfevo ls lists them",
                               item_choices=_benchmark_names, nonempty=True)
    setup: list[str] = opt(MISSING, "inference setups, each run on every benchmark, e.g. vanilla,debate",
                           item_choices=_setup_names, nonempty=True)
    model: ModelCfg = opt(ModelCfg, "backbones (adapters[i] runs on backbones[i % n]), dtype, device; model.lora.* "
                                    "does not apply: adapters bring their own LoRA settings")
    adapters: list[str] = opt([], "PEFT adapter folders, loaded as agents agent0, agent1, ... in that order; "
                                  "none: every agent is the base model")
    central_adapter: str | None = opt(None, "maestro_select: PEFT folder of a trained central agent (e.g. "
                                            "RUN_DIR/adapters/final/central), loaded as agent 'central' on "
                                            "model.backbones[0]; the execution agents stay the base model unless "
                                            "adapters= is given")
    engine: EngineCfg = opt(EngineCfg, "the generation engine")
    sampling: EvalSamplingCfg = opt(EvalSamplingCfg(max_new_tokens=256), "sampling of every generation (a setup "
                                    "may override: maestro_select's central agent)")
    limit: int | None = opt(None, "tasks per benchmark (null: all)", ge=1)
    split: str | None = opt(None, "benchmark split (null: each benchmark's default)")
    data_root: str | None = opt(None, "benchmark data folder, then the only place read (null: $SELFEVO_DATA, the "
                                      "cache of `selfevo prepare data`, ../shared/data, else the hub)")
    seed: int = opt(0, "seed of the RNGs and of every request", ge=0)
    output_dir: str = opt("runs/eval", "where results, table.md and summary.json are written", nonempty=True)

    @staticmethod
    def check(cfg: DictConfig) -> None:
        """Every adapter folder holds a PEFT adapter; a central adapter needs the maestro_select setup; several
        backbones need adapters (the bare model of a request without agent must be one); a response fits vLLM's
        context."""
        for path in [*cfg.adapters, *([cfg.central_adapter] if cfg.central_adapter else [])]:
            if not (Path(path) / "adapter_config.json").exists():
                raise EvalError(f"adapter folder '{path}' has no adapter_config.json")
        if cfg.central_adapter and "maestro_select" not in cfg.setup:
            raise EvalError("central_adapter is the central agent of setup=maestro_select, which is not selected")
        if len(cfg.model.backbones) > 1 and not cfg.adapters:
            raise EvalError(f"model.backbones has {len(cfg.model.backbones)} entries but no adapters= run on them: "
                            f"give one backbone, or adapters (adapters[i] runs on backbones[i % n])")
        check_sampling_fits_engine(cfg)


def _config_keys() -> set[str]:
    return {f.name for f in dataclasses.fields(EvalConfig)}


def _key(arg: str) -> str:
    """The key of a ``key=value`` argument."""
    return arg.split("=", 1)[0].strip()


def load_eval_config(argv: Sequence[str], preset: str | None = None) -> tuple[DictConfig, dict[str, dict[str, Any]]]:
    """``key=value`` arguments (and an optional preset YAML) → the validated :class:`EvalConfig` and, per selected
    setup, its options. Every problem is a one-line :class:`~selfevo.config.ConfigError` (or ``SetupError``)."""
    for arg in argv:
        if "=" not in arg or arg.startswith("="):
            raise EvalError(f"argument '{arg}' is not of the form key=value")
    keys = _config_keys()
    ours = [a for a in argv if _key(a).split(".")[0] in keys]
    cfg = load_config(EvalConfig, "eval", preset, ours)
    options = setup_options(list(cfg.setup), [a for a in argv if _key(a).split(".")[0] not in keys])
    check_setups(options, n_adapters=len(cfg.adapters))
    return cfg, options


def check_setups(options: dict[str, dict[str, Any]], n_adapters: int) -> None:
    """Build each setup once without an engine so that its checks (``SetupError``) run before any work."""
    agents = [f"agent{i}" for i in range(n_adapters)] or [None]
    for name, opts in options.items():
        SETUPS.get(name)(None, SamplingParams(), agents=agents, **opts)


def setup_options(setups: Sequence[str], args: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Give each ``key=value`` to every selected setup whose declared options have ``key``, read and checked by the
    config machinery (:func:`~selfevo.setups.load_options`: typed values); a key no selected setup has is a one-line
    :class:`EvalError` naming the closest known key."""
    names = {s: option_names(SETUPS.get(s).Options) for s in setups}
    for arg in args:
        if not any(_key(arg) in names[s] for s in setups):
            known = [key for key, *_ in describe(EvalConfig)] + sorted({o for s in setups for o in names[s]})
            close = difflib.get_close_matches(_key(arg), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise EvalError(f"unknown key '{_key(arg)}'{hint}; keys: {', '.join(known)}")
    options: dict[str, dict[str, Any]] = {}
    for s in setups:
        declared = SETUPS.get(s).Options
        mine = [a for a in args if _key(a) in names[s]]
        typed = OmegaConf.to_container(load_options(declared, parse_overrides(declared, mine), s))
        options[s] = {_key(a): typed[_key(a)] for a in mine}
    return options


# ----------------------------------------------------------------------------------------------------------------
# Model, agents
# ----------------------------------------------------------------------------------------------------------------


def load_agents(store, backbones: Sequence[str], adapters: Sequence[str]) -> list[str | None]:
    """Load ``adapters`` (PEFT folders) as agents ``agent0, agent1, ...`` (adapter i on ``backbones[i % n]``); none
    → ``[None]``, the bare first backbone."""
    if not adapters:
        store.backbone(backbones[0])
        return [None]
    return [load_adapter(store, backbones[i % len(backbones)], f"agent{i}", path) for i, path in enumerate(adapters)]


def load_adapter(store, model: str, name: str, path: str) -> str:
    """Add agent ``name`` on ``model`` with the LoRA settings of the PEFT folder ``path`` and load its weights."""
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    targets = cfg.get("target_modules") or "all-linear"
    lora = LoraSettings(r=int(cfg.get("r", 16)), alpha=int(cfg.get("lora_alpha", 32)),
                        dropout=float(cfg.get("lora_dropout", 0.0)),
                        target_modules=sorted(targets) if isinstance(targets, (list, set)) else targets)
    store.add_agent(name, model, lora)
    try:
        store.load_adapter(name, path)
    except ValueError as exc:
        raise EvalError(str(exc)) from None
    return name


def setup_agents(name: str, agents: list[str | None], central: str | None, options: dict[str, Any]) -> list:
    """The agents a setup runs with: with a ``central`` agent, maestro_select gets its N execution agents (the
    given agents in turn) and the central agent last (its ``agents[N]``)."""
    if name != "maestro_select" or central is None:
        return agents
    n = options.get("n_agents", SETUPS.get(name).Options().n_agents)
    return [agents[i % len(agents)] for i in range(n)] + [central]


# ----------------------------------------------------------------------------------------------------------------
# One benchmark x setup (run and scored by :func:`selfevo.loop.heldout.evaluate`, which the training loop's held-out
# evaluation also runs)
# ----------------------------------------------------------------------------------------------------------------


def sampling_for(setup_cls, sampling) -> SamplingParams:
    """The ``sampling`` section's values where set, else the setup's paper defaults."""
    return SamplingParams(max_new_tokens=sampling.max_new_tokens,
                          temperature=setup_cls.default_temperature if sampling.temperature is None
                          else sampling.temperature,
                          top_p=setup_cls.default_top_p if sampling.top_p is None else sampling.top_p)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_table(records: Sequence[dict[str, Any]]) -> str:
    """A markdown table: one row per benchmark × setup."""
    extra = [k for k in TABLE_METRICS if any(k in r for r in records)]
    head = ["benchmark", "setup", "n", "accuracy", "temperature", "waves", "generations", "wall s", *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in records:
        waves = r.get("waves", r.get("steps"))  # "steps": records written before the word "wave"
        row = [r.get("benchmark", ""), r["setup"], r["n"], r["accuracy"], r["sampling"]["temperature"], waves,
               r["generations"], r["wall_time_s"], *(r.get(k) for k in extra)]
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------


def run_eval(cfg: DictConfig, options: dict[str, dict[str, Any]], store=None, engine=None,
             verifier: Callable | None = None, show_progress: bool = True) -> list[dict[str, Any]]:
    """Every benchmark × setup of a validated :class:`EvalConfig` with the setups' ``options`` (see
    :func:`load_eval_config`); returns the results.json records (and writes all files). The store and the engine
    are built from ``model`` and ``engine`` as ``selfevo run`` builds them, unless given."""
    seed_everything(cfg.seed)
    tasks = {b: load_tasks(b, cfg.split, data_root=cfg.data_root, limit=cfg.limit) for b in cfg.benchmark}
    store = store if store is not None else policy_store(cfg.model)
    backbones = list(cfg.model.backbones)
    agents = load_agents(store, backbones, list(cfg.adapters))
    central = load_adapter(store, backbones[0], "central", cfg.central_adapter) if cfg.central_adapter else None
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if engine is None:
        engine = build_engine(cfg.engine, store, store.dtype, workdir=str(out / "_vllm"))
    combos = [(b, s) for b in cfg.benchmark for s in cfg.setup]
    team = {s: setup_agents(s, agents, central, options[s]) for s in cfg.setup}
    plans = {s: SETUPS.get(s)(engine, SamplingParams(), agents=team[s], **options[s]).max_waves()
             for s in cfg.setup}  # validates options before anything runs
    total = sum(plans[s] for b, s in combos if tasks[b])
    bar = tqdm(total=total, desc="eval", unit="wave", disable=not show_progress, file=sys.stderr)
    records = []
    try:
        for bench, name in combos:
            bar.set_description(f"{bench}-{name}")
            done = bar.n
            sampling = sampling_for(SETUPS.get(name), cfg.sampling)
            split = cfg.split or (tasks[bench][0].meta.get("split") if tasks[bench] else None)
            meta = {"benchmark": bench, "split": split, "backbones": backbones, "adapters": list(cfg.adapters),
                    "central_adapter": cfg.central_adapter, "engine": cfg.engine.name, "dtype": store.dtype}
            records.append(evaluate(name, tasks[bench], engine, sampling, team[name], cfg.seed, options[name],
                                    out / f"{bench}-{name}", progress=lambda label: bar.update(1),
                                    verifier=verifier, meta=meta))
            if tasks[bench]:
                bar.update(plans[name] - (bar.n - done))  # a setup that stopped early (autogen) fills its share
    finally:
        bar.close()
    table = format_table(records)
    (out / "table.md").write_text(table)
    (out / "summary.json").write_text(json.dumps(records, indent=2, default=str) + "\n")
    print(table, end="")
    return records


def _parser():
    parser = OneLineParser(prog="selfevo eval", add_help=False)
    parser.add_argument("--preset", default=None, help="a .yaml file of keys (the command line overrides it)")
    parser.add_argument("--dry-run", action="store_true", help="resolve, validate and print the keys; run nothing")
    parser.add_argument("-h", "--help", action="store_true")
    parser.add_argument("pairs", nargs="*", help="key=value")
    return parser


def eval_help() -> str:
    """``selfevo eval --help``: the module doc, every key (default, allowed, meaning) and each setup's declared
    options (the same columns)."""
    options = "".join(f"  {s}:\n" + (config_table(SETUPS.get(s).Options, indent="    ")
                                     if option_names(SETUPS.get(s).Options) else "    (no options)\n")
                      for s in SETUPS.names())
    return (f"{__doc__}\nkeys:\n{config_table(EvalConfig)}\n"
            f"setup options (each goes to every selected setup that has it):\n{options}")


def main(argv: list[str]) -> int:
    """``selfevo eval [--preset FILE.yaml] [--dry-run] key=value ...``; user errors are one line on stderr with exit
    code 2, found before anything is loaded or written."""
    try:
        flags = _parser().parse_intermixed_args(argv)
        if flags.help or flags.pairs == ["help"]:
            print(eval_help(), end="")
            return 0
        cfg, options = load_eval_config(flags.pairs, flags.preset)
        if flags.dry_run:
            print(OmegaConf.to_yaml({**OmegaConf.to_container(cfg), "setup_options": options}), end="")
            return 0
        run_eval(cfg, options)
    except ONE_LINE_ERRORS as exc:
        print(f"selfevo eval: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
