"""``selfevo report RUN_DIR [RUN_DIR ...] [--output FILE.html]``: one self-contained HTML page over run directories
and ``selfevo eval`` output directories.

The page needs no network: CSS and JavaScript are inline, curves are inline SVG drawn by the page's own script. It
shows metric curves (every numeric leaf of ``metrics.jsonl`` as a dotted series, with default panels; several runs
are overlaid and get a table of final values), a transcript viewer over ``episodes.jsonl`` (step and task pickers;
per turn the agent, role, collapsible prompt, response, parse status, reward and, for solver-like turns of
math/MCQ/numeric tasks, the verifier's verdict computed here), the resolved config and ``run.json`` launches, and
for eval directories the per-setup accuracy table and an item viewer. MAESTRO runs and evals also get a Sankey
figure of how the questions' answers flow from round to round (correct → correct, correct → wrong, ...; MAESTRO
Fig. 5), drawn from their round records.

Data is embedded as JSON in ``<script type="application/json">`` blocks, one per run step and per eval
combination, parsed only when shown: a 200-step run's page opens in seconds.

>>> from selfevo.report import build_report
>>> html = build_report(["runs/comas", "runs/eval"])
"""
from __future__ import annotations

import datetime
import html as html_lib
import json
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from selfevo.errors import OneLineParser, SelfevoError, UsageError
from selfevo.report.load import VERIFY_LIMIT, ReportError, kind_of, load_eval, load_run

__all__ = ["DEFAULT_PANELS", "HEADLINE", "ReportError", "build_report", "load_sources", "main", "write_report"]

# Curve panels shown by default (those with at least one matching series): title and name patterns, where ``*``
# stands for one dotted part (an agent, role or key name). Every other series is offered by the page's picker.
DEFAULT_PANELS: list[tuple[str, list[str]]] = [
    ("reward per agent", ["reward.*"]),
    ("reward by role", ["reward_by_role.*"]),
    ("parse failures", ["parse_failure_rate", "select_parse_failure_rate", "select_parse_failure_rate_r*",
                        "*.parse_failure_rate"]),
    ("held-out accuracy (eval)", ["eval.accuracy.*", "eval_start.accuracy.*", "eval.accuracy"]),
    ("verified accuracy", ["verified_accuracy", "solver_accuracy", "accuracy", "executor_accuracy", "precision",
                           "recall"]),
    ("MAESTRO coverage and identification", ["coverage", "identification", "coverage_any", "coverage_r*",
                                             "identification_r*", "accuracy_r*", "output_accuracy_r*"]),
    ("MAESTRO central samples", ["samples.*"]),
    ("format (share well-formed)", ["format.*"]),
    ("response length by role (tokens)", ["length_by_role.*"]),
    ("loss", ["train.*.loss"]),
    ("grad norm", ["train.*.grad_norm"]),
    ("KL", ["train.*.kl", "train.*.kl_rollout"]),
    ("clip fraction", ["train.*.clip_frac"]),
    ("parameter updates", ["train.*.parameter_updates",
                           "train.*.optimizer_steps"]),  # the name runs logged before the rename use
    ("SAGE question pool", ["pool_size"]),
    ("SAGE admission", ["pool_added", "acceptance_rate", "rejected.*"]),
    ("tokens and masked samples", ["tokens", "masked_samples"]),
    ("time per step (s)", ["*_s"]),
]

# Columns of the final-metrics table: label, patterns, how several matching series are combined (their last values).
HEADLINE: list[tuple[str, list[str], str]] = [
    ("reward (mean of agents)", ["reward.*"], "mean"),
    ("parse failure rate", ["parse_failure_rate"], "mean"),
    ("verified accuracy", ["verified_accuracy"], "mean"),
    ("solver accuracy", ["solver_accuracy"], "mean"),
    ("acceptance rate", ["acceptance_rate"], "mean"),
    ("pool size", ["pool_size"], "mean"),
    ("coverage", ["coverage"], "mean"),
    ("identification", ["identification"], "mean"),
    ("accuracy", ["accuracy"], "mean"),
    ("executor accuracy", ["executor_accuracy"], "mean"),
    ("eval accuracy (mean of agents)", ["eval.accuracy.*"], "mean"),
    ("loss (mean of agents)", ["train.*.loss"], "mean"),
    ("KL (mean of agents)", ["train.*.kl"], "mean"),
]


def load_sources(dirs: Sequence[str | Path], verify: bool = True,
                 verify_limit: int = VERIFY_LIMIT) -> list[dict[str, Any]]:
    """Each directory as a run or eval record (:mod:`selfevo.report.load`), named by the path as given; at most
    ``verify_limit`` solver turns are scored by the verifiers over all of them."""
    if not dirs:
        raise ReportError("give at least one run or eval directory")
    budget = [verify_limit]
    sources, names = [], set()
    for given in dirs:
        path = Path(given)
        kind = kind_of(path)
        record = (load_run(path, verify=verify, budget=budget, limit=verify_limit) if kind == "run"
                  else load_eval(path))
        name = str(given).rstrip("/") or str(given)
        while name in names:
            name += "'"
        names.add(name)
        record["name"] = name
        sources.append(record)
    return sources


def _json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<`` (so no ``</script>`` or ``<!--``), no line separators."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _block(block_id: str, value: Any) -> str:
    return f'<script type="application/json" id="{block_id}">{_json(value)}</script>'


def _asset(name: str) -> str:
    return resources.files("selfevo.report").joinpath(name).read_text(encoding="utf-8")


def build_report(dirs: Sequence[str | Path], verify: bool = True, title: str | None = None,
                 verify_limit: int = VERIFY_LIMIT) -> str:
    """The report page (one self-contained HTML string) over run and eval directories (see the module doc)."""
    sources = load_sources(dirs, verify=verify, verify_limit=verify_limit)
    blocks, index = [], []
    for i, src in enumerate(sources):
        if src["kind"] == "run":
            steps = []
            for j, (step, episodes) in enumerate(src.pop("episodes").items()):
                block_id = f"ep-{i}-{j}"
                blocks.append(_block(block_id, episodes))
                steps.append({"step": step, "block": block_id, "n": len(episodes)})
            src["episode_steps"] = steps
        else:
            for j, combo in enumerate(src["combos"]):
                block_id = f"items-{i}-{j}"
                blocks.append(_block(block_id, combo.pop("items")))
                combo["block"] = block_id
                combo["n_items"] = combo["results"].get("n")
        index.append(src)
    title = title or "selfevo report: " + ", ".join(s["name"] for s in sources)
    data = {
        "title": title, "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "sources": index, "panels": [{"title": t, "patterns": p} for t, p in DEFAULT_PANELS],
        "headline": [{"label": lab, "patterns": p, "agg": agg} for lab, p, agg in HEADLINE],
    }
    parts = {
        "TITLE": html_lib.escape(title), "STYLE": _asset("report.css"), "SCRIPT": _asset("report.js"),
        "DATA": _block("report-data", data) + "\n" + "\n".join(blocks),
    }
    return re.sub(r"\{\{(TITLE|STYLE|SCRIPT|DATA)\}\}", lambda m: parts[m.group(1)], _asset("template.html"))


def write_report(dirs: Sequence[str | Path], output: str | Path, verify: bool = True,
                 verify_limit: int = VERIFY_LIMIT) -> Path:
    """:func:`build_report` written to ``output`` (its folder made if needed)."""
    out = Path(output)
    page = build_report(dirs, verify=verify, verify_limit=verify_limit)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


USAGE = f"""selfevo report DIR [DIR ...] [--output FILE.html] [--no-verify] [--verify-limit N]
  DIR               a run directory (selfevo run: config.yaml, run.json, metrics.jsonl, episodes.jsonl) or a
                    selfevo eval output directory (summary.json, <benchmark>-<setup>/results.json, items.jsonl)
  --output FILE     where the page goes (default: DIR/report.html for one directory, else ./report.html)
  --no-verify       do not score solver turns with the verifiers (otherwise done for math/MCQ/numeric tasks)
  --verify-limit N  score at most N solver turns in all (default: {VERIFY_LIMIT}, ~5 ms each; the rest say so)
One self-contained HTML file (no network needed to view it): curves, transcripts, config, eval tables and items.
"""


def _parser():
    parser = OneLineParser(prog="selfevo report", add_help=False)
    parser.add_argument("dirs", nargs="*")
    parser.add_argument("-o", "--output", default=None)
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--verify-limit", type=int, default=VERIFY_LIMIT)
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def main(argv: Sequence[str]) -> int:
    """``selfevo report DIR ... [--output FILE.html] [--no-verify]``; errors are one line on stderr, exit code 2."""
    try:
        args = _parser().parse_intermixed_args(list(argv))
        if args.help:
            print(USAGE, end="")
            return 0
        if not args.dirs:
            raise UsageError("which directories? selfevo report DIR [DIR ...] [--output FILE.html]")
        output = args.output or (Path(args.dirs[0]) / "report.html" if len(args.dirs) == 1 else "report.html")
        if args.verify_limit < 0:
            raise UsageError(f"--verify-limit must be >= 0, got {args.verify_limit}")
        out = write_report(args.dirs, output, verify=not args.no_verify, verify_limit=args.verify_limit)
    except (SelfevoError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, OSError) and exc.filename:
            message = f"{exc.filename}: {exc.strerror or message}"
        print(f"selfevo report: {message}", file=sys.stderr)
        return 2
    print(f"report: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0
