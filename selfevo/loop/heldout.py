"""Held-out evaluation: one inference setup on tasks, scored by the tasks' verifiers (``selfevo eval``'s
:func:`evaluate`), and the training loop's per-agent accuracy built on it (:func:`agent_accuracy`,
:func:`heldout_accuracy`).

``selfevo eval`` (:mod:`selfevo.evaluation`) runs :func:`evaluate` for every benchmark × setup and writes its
records; the loop's ``eval.*`` section runs the vanilla setup once per agent through the same function and logs
``{"n", "accuracy": {agent: share correct}}`` (``eval`` / ``eval_start`` in ``metrics.jsonl``).
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import DictConfig

from selfevo.loop.data import load_entries
from selfevo.loop.memory import release_freed_memory
from selfevo.setups import make_setup
from selfevo.tasks import format_prompt
from selfevo.types import SamplingParams, Task


def evaluate(setup_name: str, tasks: Sequence[Task], engine, sampling: SamplingParams,
             agents: Sequence[str | None] | None = None, seed: int | str = 0, options: dict[str, Any] | None = None,
             out_dir: str | Path | None = None, progress: Callable[[str], None] | None = None,
             verifier: Callable | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one setup on ``tasks``, score the final responses, and (with ``out_dir``) write results.json and
    items.jsonl there. Returns the results.json record (``accuracy``: the share of final responses the verifier
    scores 1.0; None without tasks)."""
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
        "mean_score": scores / n if n else None, **run.metrics, "waves": run.waves, "generations": run.generations,
        "generated_tokens": tokens, "wall_time_s": round(wall, 2), "seed": seed, "agents": list(setup.agents),
        "sampling": run.sampling, "options": run.options,
    }
    if out_dir is not None:
        _write(Path(out_dir), record, items)
    return record


def _write(out: Path, record: dict[str, Any], items: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    with open(out / "items.jsonl", "w") as handle:
        for item in items:
            handle.write(json.dumps(item, default=str) + "\n")


def agent_accuracy(engine, agents: Sequence[str | None], tasks: Sequence[Task], sampling: SamplingParams,
                   seed: int | str = 0, progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Each agent answers each task once, alone (:func:`evaluate` with the vanilla setup: the task's prompt, no
    other turn); its accuracy, rounded to 4 digits. ``progress(f"eval {agent}")`` after every engine call."""
    out = {}
    for agent in agents:
        tick = None if progress is None else (lambda label, agent=agent: progress(f"eval {agent}"))
        record = evaluate("vanilla", tasks, engine, sampling, [agent], seed, progress=tick)
        out[str(agent)] = round(record["accuracy"] or 0.0, 4)
    return out


def one_model(store, agents: Sequence[str], temperature: float) -> bool:
    """Whether a greedy evaluation of every agent would repeat one model's answers: several agents on one
    backbone, none trained yet (fresh adapters add nothing: :meth:`PolicyStore.is_untrained`)."""
    return (temperature == 0 and len(agents) > 1 and len({store.agent_backbone[a] for a in agents}) == 1
            and all(store.is_untrained(a) for a in agents))


def heldout_accuracy(cfg: DictConfig, engine, store, agents: list[str],
                     progress: Callable[[str], None] | None = None) -> dict:
    """A run's held-out evaluation (its ``eval`` section; tasks read as ``data.*`` says): ``{"n", "accuracy":
    {agent: accuracy}}``. Where every agent would answer as one model (:func:`one_model`) only the first is
    evaluated and its accuracy stands for all (``"evaluated": agent``)."""
    e = cfg.eval
    tasks = load_entries(list(e.tasks), e.limit, cfg.data.data_root, cfg.data.source)
    sampling = SamplingParams(max_new_tokens=e.max_new_tokens, temperature=e.temperature)
    shared = one_model(store, agents, e.temperature)
    evaluated = agents[:1] if shared else agents
    accuracy = agent_accuracy(engine, evaluated, tasks, sampling, seed=f"{cfg.seed}/eval", progress=progress)
    if not shared:
        return {"n": len(tasks), "accuracy": accuracy}
    return {"n": len(tasks), "accuracy": {a: accuracy[evaluated[0]] for a in agents}, "evaluated": evaluated[0]}
