"""``selfevo eval``: run inference setups on benchmarks, score the final answers, write results and a table.

    selfevo eval benchmark=gsm8k setup=debate model=smollm2-135m-instruct limit=50 output_dir=DIR
    selfevo eval benchmark=gsm8k,math500 setup=vanilla,debate adapters=[ckpt/a0,ckpt/a1] temperature=0.7
    selfevo eval --preset my_eval.yaml limit=10 --dry-run

Keys are ``key=value`` (lists as ``a,b`` or ``[a,b]``) and go through the same config machinery as ``selfevo run``
(:class:`EvalConfig`: ranges and choices checked before anything loads, did-you-mean for typos, ``--preset FILE.yaml``
for defaults, ``--dry-run`` to print the resolved keys and stop); ``selfevo eval --help`` lists them. ``benchmark``
and ``setup`` are required. Any other key must be an option of a selected setup (e.g. ``k=8``, ``aggregate=llm``,
``rounds=2``, ``epsilon=0``; see ``selfevo.setups``); it goes to every selected setup that has it.

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
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import MISSING, DictConfig, OmegaConf
from tqdm import tqdm

from selfevo.config import DTYPES, ConfigError, load_config, opt
from selfevo.config import format_table as config_table
from selfevo.engines import make_engine
from selfevo.errors import ONE_LINE_ERRORS, OneLineParser
from selfevo.loop.build import seed_everything
from selfevo.loop.memory import release_freed_memory
from selfevo.policy import LoraSettings, PolicyStore
from selfevo.setups import SETUPS, coerce_option, make_setup, option_names
from selfevo.tasks import format_prompt, load_tasks, task_names
from selfevo.types import SamplingParams, Task

TABLE_METRICS = ("coverage", "identification", "coverage_any", "select_parse_failures", "vote_agreement",
                 "unanimous_rate", "mean_assistant_turns")


class EvalError(ConfigError):
    """A bad ``selfevo eval`` argument, said in one line."""


def _benchmark_names() -> list[str]:
    return task_names()


def _setup_names() -> list[str]:
    return SETUPS.names()


@dataclasses.dataclass
class EvalConfig:
    """The keys of ``selfevo eval`` (setup options aside)."""

    benchmark: list[str] = opt(MISSING, "benchmarks to evaluate on, e.g. gsm8k,math500; selfevo ls lists them",
                               item_choices=_benchmark_names, nonempty=True)
    setup: list[str] = opt(MISSING, "inference setups, each run on every benchmark, e.g. vanilla,debate",
                           item_choices=_setup_names, nonempty=True)
    model: str = opt("smollm2-135m-instruct", "backbone: built-in model name, folder or hub id", nonempty=True)
    adapters: list[str] = opt([], "PEFT adapter folders, loaded as agents agent0, agent1, ... in that order; "
                                  "none: every agent is the base model")
    central_adapter: str | None = opt(None, "maestro_select: PEFT folder of a trained central agent (e.g. "
                                            "RUN_DIR/adapters/final/central), loaded as agent 'central'; the "
                                            "execution agents stay the base model unless adapters= is given")
    engine: str = opt("hf", "generation engine (the in-process ones; vllm_server is wired for training runs only)",
                      choices=("hf", "vllm"))
    dtype: str = opt("bfloat16", "weights and compute dtype", choices=DTYPES)
    device: str = opt("auto", "where the model lives (hf engine): the GPU if CUDA is available (auto), cpu, cuda",
                      choices=("auto", "cpu", "cuda"))
    limit: int | None = opt(None, "tasks per benchmark (null: all)", ge=1)
    split: str | None = opt(None, "benchmark split (null: each benchmark's default)")
    data_root: str | None = opt(None, "benchmark data folder, then the only place read (null: $SELFEVO_DATA, the "
                                      "cache of `selfevo prepare data`, ../shared/data, else the hub)")
    seed: int = opt(0, "seed of the RNGs and of every request", ge=0)
    output_dir: str = opt("runs/eval", "where results, table.md and summary.json are written", nonempty=True)
    temperature: float | None = opt(None, "sampling temperature (null: each setup's paper default)", ge=0)
    top_p: float | None = opt(None, "nucleus sampling (null: each setup's paper default)", gt=0, le=1)
    max_new_tokens: int = opt(256, "longest response, in tokens", ge=1)
    max_batch: int = opt(64, "hf: rows per forward pass", ge=1)

    @staticmethod
    def check(cfg: DictConfig) -> None:
        """Every adapter folder holds a PEFT adapter; a central adapter needs the maestro_select setup."""
        for path in [*cfg.adapters, *([cfg.central_adapter] if cfg.central_adapter else [])]:
            if not (Path(path) / "adapter_config.json").exists():
                raise EvalError(f"adapter folder '{path}' has no adapter_config.json")
        if cfg.central_adapter and "maestro_select" not in cfg.setup:
            raise EvalError("central_adapter is the central agent of setup=maestro_select, which is not selected")


@dataclasses.dataclass
class EvalArgs:
    benchmarks: list[str]
    setups: list[str]
    model: str
    adapters: list[str]
    engine: str
    dtype: str
    limit: int | None
    split: str | None
    data_root: str | None
    seed: int
    output_dir: str
    temperature: float | None
    top_p: float | None
    max_new_tokens: int
    max_batch: int
    setup_options: dict[str, dict[str, Any]]  # setup -> its options
    central_adapter: str | None = None  # maestro_select's central agent (PEFT folder)
    device: str = "auto"  # where the model lives (hf engine)


def _config_keys() -> set[str]:
    return {f.name for f in dataclasses.fields(EvalConfig)}


def load_eval_config(argv: Sequence[str], preset: str | None = None) -> tuple[DictConfig, dict[str, dict[str, Any]]]:
    """``key=value`` arguments (and an optional preset YAML) → the validated :class:`EvalConfig` and, per selected
    setup, its options. Every problem is a one-line :class:`~selfevo.config.ConfigError` (or ``SetupError``)."""
    for arg in argv:
        if "=" not in arg or arg.startswith("="):
            raise EvalError(f"argument '{arg}' is not of the form key=value")
    keys = _config_keys()
    ours = [a for a in argv if a.split("=", 1)[0].strip() in keys]
    cfg = load_config(EvalConfig, "eval", preset, ours)
    rest = [a.split("=", 1) for a in argv if a.split("=", 1)[0].strip() not in keys]
    options = setup_options(list(cfg.setup), [(k.strip(), v) for k, v in rest])
    check_setups(options, n_adapters=len(cfg.adapters))
    return cfg, options


def check_setups(options: dict[str, dict[str, Any]], n_adapters: int) -> None:
    """Build each setup once without an engine so that its option checks (``SetupError``) run before any work."""
    agents = [f"agent{i}" for i in range(n_adapters)] or [None]
    for name, opts in options.items():
        SETUPS.get(name)(None, SamplingParams(), agents=agents, **opts)


def setup_options(setups: Sequence[str], pairs: Sequence[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Give each ``(key, value)`` to every selected setup whose options have ``key`` (values coerced to the option's
    type); a key no selected setup has is a one-line :class:`EvalError` naming the closest known key."""
    options: dict[str, dict[str, Any]] = {s: {} for s in setups}
    for key, value in pairs:
        takers = [s for s in setups if key in option_names(SETUPS.get(s).Options)]
        if not takers:
            known = sorted(_config_keys()) + sorted({o for s in setups for o in option_names(SETUPS.get(s).Options)})
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise EvalError(f"unknown key '{key}'{hint}; keys: {', '.join(known)}")
        for s in takers:
            options[s][key] = coerce_option(SETUPS.get(s).Options, key, value, s)
    return options


def eval_args(cfg: DictConfig, options: dict[str, dict[str, Any]]) -> EvalArgs:
    """A validated :class:`EvalConfig` and the setups' options as :class:`EvalArgs` (what :func:`run_eval` takes)."""
    return EvalArgs(benchmarks=list(cfg.benchmark), setups=list(cfg.setup), model=cfg.model,
                    adapters=list(cfg.adapters), engine=cfg.engine, dtype=cfg.dtype, limit=cfg.limit,
                    split=cfg.split, data_root=cfg.data_root, seed=cfg.seed, output_dir=cfg.output_dir,
                    temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                    max_batch=cfg.max_batch, setup_options=options, central_adapter=cfg.central_adapter,
                    device=cfg.device)


def parse_args(argv: Sequence[str], preset: str | None = None) -> EvalArgs:
    """``key=value`` arguments (and an optional preset YAML) → :class:`EvalArgs` (one-line errors)."""
    return eval_args(*load_eval_config(argv, preset))


# ----------------------------------------------------------------------------------------------------------------
# Model, agents, engine
# ----------------------------------------------------------------------------------------------------------------


def load_agents(store, model: str, adapters: Sequence[str]) -> list[str | None]:
    """Load ``adapters`` (PEFT folders) as agents ``agent0, agent1, ...`` on ``model``; none → ``[None]``."""
    store.backbone(model)
    names: list[str | None] = [load_adapter(store, model, f"agent{i}", path) for i, path in enumerate(adapters)]
    return names or [None]


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


def build_engine(name: str, store, dtype: str, max_batch: int, workdir: str | None = None):
    if name == "hf":
        return make_engine("hf", store, max_batch=max_batch)
    ranks = [store.backbones[store.agent_backbone[a]].model.peft_config[a].r for a in store.agents()]
    rank = next(v for v in (8, 16, 32, 64, 128, 256, 320, 512) if v >= max(ranks or [16]))
    return make_engine("vllm", store, dtype=dtype, max_lora_rank=rank, workdir=workdir)


# ----------------------------------------------------------------------------------------------------------------
# One benchmark x setup
# ----------------------------------------------------------------------------------------------------------------


def sampling_for(setup_cls, max_new_tokens: int, temperature: float | None, top_p: float | None) -> SamplingParams:
    """The command line's values where given, else the setup's paper defaults."""
    return SamplingParams(max_new_tokens=max_new_tokens,
                          temperature=setup_cls.default_temperature if temperature is None else temperature,
                          top_p=setup_cls.default_top_p if top_p is None else top_p)


def evaluate(setup_name: str, tasks: Sequence[Task], engine, sampling: SamplingParams,
             agents: Sequence[str | None] | None = None, seed: int = 0, options: dict[str, Any] | None = None,
             out_dir: str | Path | None = None, progress: Callable[[str], None] | None = None,
             verifier: Callable | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one setup on ``tasks``, score the final responses, and (with ``out_dir``) write results.json and
    items.jsonl there. Returns the results.json record."""
    setup = make_setup(setup_name, engine, sampling, agents=agents, seed=seed, verifier=verifier,
                       progress=progress, **(options or {}))
    start = time.perf_counter()
    run = setup.run(tasks)
    wall = time.perf_counter() - start
    release_freed_memory()
    items, correct, scores = [], 0, 0.0
    for task, res in zip(tasks, run.results):
        verdict = setup.verdict(task, res.final_response)
        correct += verdict.score >= 1.0
        scores += verdict.score
        items.append({
            "id": task.id, "prompt": format_prompt(task), "reference": task.reference,
            "responses": res.turn_records(), "final_response": res.final_response,
            "extracted": res.extracted, "verdict": dataclasses.asdict(verdict), "correct": verdict.score >= 1.0,
            "info": res.info,
        })
    n = len(tasks)
    tokens = sum(t["n_tokens"] for it in items for t in it["responses"])
    record: dict[str, Any] = {
        **(meta or {}), "setup": setup_name, "n": n, "accuracy": correct / n if n else None,
        "mean_score": scores / n if n else None, **run.metrics, "steps": run.steps, "generations": run.generations,
        "generated_tokens": tokens, "wall_time_s": round(wall, 2), "seed": seed, "agents": list(setup.agents),
        "sampling": run.sampling, "options": run.options,
    }
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
        with open(out / "items.jsonl", "w") as handle:
            for item in items:
                handle.write(json.dumps(item, default=str) + "\n")
    return record


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def format_table(records: Sequence[dict[str, Any]]) -> str:
    """A markdown table: one row per benchmark × setup."""
    extra = [k for k in TABLE_METRICS if any(k in r for r in records)]
    head = ["benchmark", "setup", "n", "accuracy", "temperature", "steps", "generations", "wall s", *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in records:
        row = [r.get("benchmark", ""), r["setup"], r["n"], r["accuracy"], r["sampling"]["temperature"], r["steps"],
               r["generations"], r["wall_time_s"], *(r.get(k) for k in extra)]
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------


def run_eval(args: EvalArgs, store=None, engine=None, verifier: Callable | None = None,
             show_progress: bool = True) -> list[dict[str, Any]]:
    """Every benchmark × setup of ``args``; returns the results.json records (and writes all files)."""
    seed_everything(args.seed)
    tasks = {b: load_tasks(b, args.split, data_root=args.data_root, limit=args.limit) for b in args.benchmarks}
    if store is None:
        store = PolicyStore(dtype=args.dtype, device=args.device)
    agents = load_agents(store, args.model, args.adapters)
    central = load_adapter(store, args.model, "central", args.central_adapter) if args.central_adapter else None
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if engine is None:
        engine = build_engine(args.engine, store, args.dtype, args.max_batch, workdir=str(out / "_vllm"))
    combos = [(b, s) for b in args.benchmarks for s in args.setups]
    team = {s: setup_agents(s, agents, central, args.setup_options[s]) for s in args.setups}
    plans = {s: SETUPS.get(s)(engine, SamplingParams(), agents=team[s], **args.setup_options[s]).max_steps()
             for s in args.setups}  # validates options before anything runs
    total = sum(plans[s] for b, s in combos if tasks[b])
    bar = tqdm(total=total, desc="eval", unit="step", disable=not show_progress, file=sys.stderr)
    records = []
    try:
        for bench, name in combos:
            bar.set_description(f"{bench}-{name}")
            done = bar.n
            sampling = sampling_for(SETUPS.get(name), args.max_new_tokens, args.temperature, args.top_p)
            split = args.split or (tasks[bench][0].meta.get("split") if tasks[bench] else None)
            meta = {"benchmark": bench, "split": split, "model": args.model, "adapters": list(args.adapters),
                    "central_adapter": args.central_adapter, "engine": args.engine}
            records.append(evaluate(name, tasks[bench], engine, sampling, team[name], args.seed,
                                    args.setup_options[name], out / f"{bench}-{name}",
                                    progress=lambda label: bar.update(1), verifier=verifier, meta=meta))
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
    """``selfevo eval --help``: the module doc, every key (default, allowed, meaning) and the setups' options."""
    options = "\n".join(f"  {s}: {', '.join(option_names(SETUPS.get(s).Options)) or '-'}" for s in SETUPS.names())
    return (f"{__doc__}\nkeys:\n{config_table(EvalConfig)}\n"
            f"setup options (each goes to every selected setup that has it):\n{options}\n")


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
        run_eval(eval_args(cfg, options))
    except ONE_LINE_ERRORS as exc:
        print(f"selfevo eval: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
