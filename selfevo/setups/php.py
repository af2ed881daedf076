"""Progressive-Hint Prompting (PHP; Zheng et al. 2023, arXiv 2304.09797): one agent answers, then is asked again
with its earlier answers as a hint, until two consecutive answers agree. A MAESTRO Table 1 baseline.

* Call 1: the task's prompt (:func:`~selfevo.tasks.format_prompt`).
* Call c ≥ 2: the same prompt with ``" (Hint: The answer is near to A1, A2, ...)."`` after the question (before the
  answer-format instruction), listing every answer extracted so far in order, repeats included.
* Stop: when the answers of two consecutive calls are both extracted and agree (normalised text, or math
  equivalence: the setups' vote of the two responses), or after ``max_rounds`` calls. Final response: the last one.
* Parse failures: a response whose answer the verifier cannot extract adds nothing to the hint, never counts as an
  agreement, and is counted (``info["parse_failures"]``; metric ``parse_failure_rate``). The official code keeps an
  unparsed answer as ``""``, so two unparsed answers in a row would stop it on no answer.

Where each default comes from (the official code: chuanyang-Zheng/Progressive-Hint ``main_clean.py``):

* hint text and place: ``"{question} (Hint: The answer is near to {answers})."``, all earlier answers listed;
* stop rule: the last ``--hint_length 2`` answers equal;
* temperature 0 (``--temp 0.0``, also for the hinted calls: ``--temp2`` defaults to ``--temp``);
* ``max_rounds=10``: the paper and its code set no cap (``while True``; MASLab has no PHP); a cap is needed so
  that an agent that never repeats itself ends; 10 is selfevo's choice;
* zero-shot prompts: the paper's base and PHP prompts are few-shot (exemplars that show how hints are used, "We know
  the Answer Hints: ... With the Answer Hints: ..., we will answer the question."); every selfevo setup shows the
  benchmark's own zero-shot prompt, so no exemplars here.

Waves: at most ``max_rounds`` (a task that has stopped asks nothing more). Agent: ``agents[0]``. PHP is meant for
short answers (the paper: arithmetic and MATH); on code tasks the hint would list extracted programs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from selfevo.config import opt
from selfevo.setups.base import SETUPS, Episode, Setup, user
from selfevo.tasks import format_prompt
from selfevo.types import Task

HINT = " (Hint: The answer is near to {answers})."


def hinted(task: Task, hints: list[str]) -> Task:
    """``task`` with PHP's hint after its question (no hint: the task itself)."""
    if not hints:
        return task
    return replace(task, question=task.question.rstrip() + HINT.format(answers=", ".join(hints)))


@dataclass
class PHPOptions:
    max_rounds: int = opt(10, "answers at most, the first one included (the paper sets no cap)", ge=1)


@SETUPS.register("php")
class PHP(Setup):
    name = "php"
    Options = PHPOptions
    default_temperature = 0.0

    def max_waves(self) -> int:
        return self.opts.max_rounds

    def wave_label(self, wave: int) -> str:
        return "answer" if wave == 1 else f"hinted answer {wave - 1}"

    def solve(self, ep: Episode):
        task, hints, answers, texts = ep.task, [], [], []
        stopped = "max_rounds"
        for rnd in range(1, self.opts.max_rounds + 1):
            label = "answer" if rnd == 1 else "hinted"
            turn = yield self.ask(self.agent(0), label, user(format_prompt(hinted(task, hints))), round=rnd)
            texts.append(turn.text)
            answers.append(self.extract(task, turn.text))
            if answers[-1] is not None:
                hints.append(answers[-1])
            if rnd > 1 and self.vote(task, texts[-2:]).count == 2:
                stopped = "agreement"
                break
        self.finish(ep, texts[-1], answers=answers, stopped=stopped,
                    parse_failures=sum(a is None for a in answers))

    def metrics(self, tasks, results) -> dict[str, Any]:
        if not results:
            return {}
        n, calls = len(results), sum(len(r.info["answers"]) for r in results)
        return {"mean_rounds": calls / n,
                "agreement_rate": sum(r.info["stopped"] == "agreement" for r in results) / n,
                "parse_failure_rate": sum(r.info["parse_failures"] for r in results) / calls}
