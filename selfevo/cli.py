"""``selfevo`` command line: ``ls``, ``run RECIPE [--preset P] [--dry-run] key=value ...``, ``verify``, ``eval``,
``prepare``, ``report``, ``sweep``.

Every error that comes from the user's input (unknown recipe, preset, config key, model name, bad file) is printed
as one line on stderr with exit code 2; configs are validated before anything is loaded or written.
"""
from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from selfevo.errors import ONE_LINE_ERRORS, OneLineParser, UsageError

USAGE = """selfevo: multi-agent self-evolution of LLMs (CoMAS, SAGE, MAESTRO/CLPO) on shared parts.

commands:
  selfevo ls                                   recipes, presets, models, engines
  selfevo run RECIPE [--preset P] key=value..  run a recipe (preset default: cpu); prints and saves the config
  selfevo run RECIPE --help                    every config key of RECIPE: default, allowed values, meaning
  selfevo run RECIPE --dry-run key=value..     resolve, validate and print the config; load and write nothing
  selfevo verify --input IN --output OUT       score model responses with the verifiers (JSONL in, JSONL out)
  selfevo eval benchmark=B setup=S [key=value]  evaluate agents on benchmarks × inference setups (--help: keys)
  selfevo prepare [MODEL ...]                  build the local cache of built-in models (default: the embedded one)
  selfevo prepare data [NAME ...] [--from DIR] fill the benchmark-data cache from the hub or a local copy
  selfevo report DIR [DIR ...] [--output F]    one self-contained HTML page: curves, transcripts, config, eval items
  selfevo sweep FILE.yaml [--jobs N] [--table]  rows (recipe, preset, overrides) x seeds, trained, evaluated, paired

examples:
  selfevo run comas
  selfevo run comas trainer.max_steps=2 output_dir=runs/c1
  selfevo eval benchmark=gsm8k setup=debate limit=50 output_dir=runs/eval
  selfevo run demo n_agents=8 engine.name=vllm sampling.max_new_tokens=64
"""


# Each command imports its parts inside its function: `selfevo --help` and a mistyped command load nothing, and the
# data commands (verify, prepare data, report) run without importing torch.
def _ls() -> int:
    from selfevo import config, models
    from selfevo.engines import ENGINES
    from selfevo.algorithms import RECIPES

    print("recipes:")
    for name in RECIPES:
        r = RECIPES.get(name)
        print(f"  {name:<10} {r.about}  (presets: {', '.join(config.presets(name))})")
    print("models:")
    for m in models.MODELS.values():
        print(f"  {m.name:<24} {m.about}")
    print("  <folder> | <hub id>        any Hugging Face checkpoint")
    print(f"engines: {', '.join(ENGINES.names())}")
    _ls_kit()
    return 0


def _ls_kit() -> None:
    """The pluggable parts: roles (with their kind), reward sources, optimizers, verifiers, benchmarks, setups (with
    their options)."""
    from selfevo.optimizers import OPTIMIZERS
    from selfevo.rewards import REWARD_SOURCES
    from selfevo.roles import ROLES
    from selfevo.setups import SETUPS, option_names
    from selfevo.tasks import task_names
    from selfevo.verifiers import verifier_names

    print("roles:")
    for name in ROLES:
        print(f"  {name:<24} {ROLES.get(name).kind}")
    print(f"reward sources: {', '.join(REWARD_SOURCES.names())}")
    print(f"optimizers: {', '.join(OPTIMIZERS.names())}")
    print(f"verifiers: {', '.join(verifier_names())}")
    print(f"benchmarks: {', '.join(task_names())}")
    print("inference setups (their options, declared by each setup; selfevo eval --help: defaults and meaning):")
    for name in SETUPS:
        print(f"  {name:<24} {', '.join(option_names(SETUPS.get(name).Options)) or '-'}")


def _run_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="selfevo run", add_help=False)
    parser.add_argument("recipe", nargs="?")
    parser.add_argument("--preset", default=None, help="preset name or path to a YAML file (default: cpu)")
    parser.add_argument("--dry-run", action="store_true", help="resolve, validate and print the config; run nothing")
    parser.add_argument("-h", "--help", action="store_true")
    parser.add_argument("overrides", nargs="*", help="key=value")
    return parser


def _run(argv: list[str]) -> int:
    """``selfevo run RECIPE [--preset P] [--dry-run] [--help] key=value ...`` (options and overrides in any order)."""
    from selfevo.config import load_config
    from selfevo.algorithms import RECIPES

    args = _run_parser().parse_intermixed_args(argv)
    if args.recipe is None or "=" in args.recipe:  # `selfevo run key=value`: the recipe was left out
        if args.help:
            print(RUN_USAGE + f"recipes: {', '.join(RECIPES)}")
            return 0
        raise UsageError(f"which recipe? selfevo run RECIPE ... (recipes: {', '.join(RECIPES)})")
    recipe = RECIPES.get(args.recipe)
    module = recipe.load()
    if args.help:
        print(recipe_help(recipe, recipe.config_class()))
        return 0
    cfg = load_config(recipe.config_class(), recipe.name, args.preset or recipe.default_preset, args.overrides)
    from selfevo import distributed

    if args.dry_run or distributed.is_main():  # under torchrun: printed once, by rank 0
        print(OmegaConf.to_yaml(cfg, resolve=True))
    if args.dry_run:
        return 0
    module.main(cfg, command_line=["selfevo", "run", *argv])  # run.json records it, also for in-process calls
    return 0


def recipe_help(recipe, schema_cls: type) -> str:
    """``selfevo run RECIPE --help``: usage, presets, and every config key with default, allowed values, meaning."""
    from selfevo.config import format_table, presets

    names = [f"{p} (default)" if p == recipe.default_preset else p for p in presets(recipe.name)]
    return (f"selfevo run {recipe.name} [--preset P] [--dry-run] key=value ...\n  {recipe.about}\n\n"
            f"presets: {', '.join(names) or 'none'}; or a path to a .yaml file\n\n"
            f"config keys (schema defaults; a preset may change them):\n{format_table(schema_cls)}")


RUN_USAGE = """selfevo run RECIPE [--preset P] [--dry-run] key=value ...
  --preset P   preset name (selfevo ls) or path to a .yaml file; default: the recipe's default (cpu)
  --dry-run    resolve, validate and print the config; load nothing, write nothing
  --help       with RECIPE: every config key with its default, allowed values and meaning
"""


def _verify(argv: list[str]) -> int:
    from selfevo.verifiers.cli import main as verify_main

    return verify_main(argv)


def _eval(argv: list[str]) -> int:
    from selfevo.evaluation import main as eval_main

    return eval_main(argv)


def _prepare(argv: list[str]) -> int:
    """``selfevo prepare [MODEL ...]`` builds model caches; ``selfevo prepare data ...`` fills the data cache."""
    from selfevo import models

    if argv[:1] == ["data"]:
        return _prepare_data(argv[1:])
    for name in argv or [models.DEFAULT_MODEL]:
        print(f"{name}: {models.resolve(name)}")
    return 0


def _prepare_data(argv: list[str]) -> int:
    """``selfevo prepare data [NAME ...] [--from DIR]``: see :mod:`selfevo.tasks.prepare`."""
    from selfevo.tasks.prepare import prepare_data

    parser = OneLineParser(prog="selfevo prepare data", description="fill the benchmark-data cache "
                           "($SELFEVO_CACHE/data, default ~/.cache/selfevo/data) from the Hugging Face hub or --from")
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks (default: all that have the source)")
    parser.add_argument("--from", dest="from_dir", metavar="DIR", help="a copy of the benchmark data folder")
    args = parser.parse_intermixed_args(argv)
    return prepare_data(args.names, args.from_dir)


def _report(argv: list[str]) -> int:
    from selfevo.report import main as report_main

    return report_main(argv)


def _sweep(argv: list[str]) -> int:
    from selfevo.sweep import main as sweep_main

    return sweep_main(argv)


COMMANDS = {"ls": lambda argv: _ls(), "run": _run, "verify": _verify, "eval": _eval, "prepare": _prepare,
            "report": _report, "sweep": _sweep}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"selfevo: unknown command '{argv[0]}' (commands: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    try:
        return command(argv[1:])
    except ONE_LINE_ERRORS as exc:
        print(f"selfevo: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
