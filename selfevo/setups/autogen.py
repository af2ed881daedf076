"""AutoGen two-agent chat (MASLab ``autogen``, no code execution): an assistant and an LLM user proxy.

Loop (MASLab's, at most ``max_turns`` = 3 assistant turns and 2 proxy turns, so at most 5 steps):

1. The assistant answers the task. If its answer contains ``TERMINATE`` the task is done.
2. Up to ``max_turns - 1`` times: the user proxy reviews the assistant's latest answer; if the proxy's reply
   contains ``TERMINATE`` the task is done (final = the assistant's latest answer); otherwise the assistant answers
   the proxy (with its whole history) and is done if that answer contains ``TERMINATE``.
3. The final response is the assistant's last answer with ``TERMINATE`` removed.

Each step sends the still-active tasks of all tasks in one engine call; a step with no active task is skipped.

Prompts (kept simple):
* the assistant gets a system message paraphrasing MASLab's no-code assistant prompt (solve with language skills,
  plan first, verify carefully, always end with the current final answer in ``\\boxed{}``, reply TERMINATE when
  done), then the task's prompt as the user message; the proxy's replies come back as user messages.
* the user proxy (MASLab gives it an empty system message and a mirrored chat history) gets here one user
  message: the task, the assistant's latest answer, and the request to check it and reply exactly ``TERMINATE``
  when satisfied, else to point out the problem briefly. This fits small models better than a mirrored history.

Default sampling: temperature 0.5 (MASLab). Agents: assistant ``agents[0]``, user proxy ``agents[1 % len]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from selfevo.setups.base import SETUPS, Setup, SetupError, TaskResult, Turn, user
from selfevo.tasks import format_prompt
from selfevo.types import Task

TERMINATE = "TERMINATE"

ASSISTANT_SYSTEM = (
    "You are a helpful AI assistant. Solve the task with your language skills; do not write code. First explain "
    "your plan, then solve the task step by step, and verify your answer carefully, showing the evidence. In every "
    "response, conclude with your current final answer in the format 'The final answer is \\boxed{...}'. "
    "Reply TERMINATE when everything is done."
)

PROXY_PROMPT = (
    "You asked an AI assistant to solve the following task.\n\n[Task]:\n{query}\n\n[Assistant's answer]:\n{answer}"
    "\n\nCheck the assistant's answer carefully. If you are satisfied that it is correct and complete, reply with "
    "exactly TERMINATE. Otherwise, point out the mistake or the missing part briefly and ask the assistant to fix it."
)


@dataclass
class AutoGenOptions:
    max_turns: int = 3  # assistant turns


def strip_terminate(text: str) -> str:
    return text.replace(TERMINATE, "").strip()


@SETUPS.register("autogen")
class AutoGen(Setup):
    name = "autogen"
    Options = AutoGenOptions
    default_temperature = 0.5

    def validate(self) -> None:
        if self.opts.max_turns < 1:
            raise SetupError(f"autogen: max_turns must be >= 1, got {self.opts.max_turns}")

    def max_steps(self) -> int:
        return 2 * self.opts.max_turns - 1

    def solve(self, tasks: Sequence[Task]) -> list[TaskResult]:
        queries = [format_prompt(t) for t in tasks]
        history = [[{"role": "system", "content": ASSISTANT_SYSTEM}, {"role": "user", "content": q}]
                   for q in queries]
        turns: list[list[Turn]] = [[] for _ in tasks]
        last = [""] * len(tasks)
        stop = [""] * len(tasks)  # why a task ended: "assistant", "user_proxy" or "max_turns"

        def assistant(active: list[int], turn_no: int) -> list[int]:
            comps = self.generate([self.request(tasks[i], 0, list(history[i]), self.agent(0)) for i in active],
                                  f"assistant {turn_no}")
            still = []
            for i, c in zip(active, comps):
                history[i].append({"role": "assistant", "content": c.text})
                turns[i].append(self.turn(c, "assistant", round=turn_no))
                last[i] = c.text
                if TERMINATE in c.text:
                    stop[i] = "assistant"
                else:
                    still.append(i)
            return still

        active = assistant(list(range(len(tasks))), 1)
        for turn_no in range(2, self.opts.max_turns + 1):
            if not active:
                break
            comps = self.generate([self.request(tasks[i], 1, user(PROXY_PROMPT.format(query=queries[i],
                                                                                      answer=strip_terminate(last[i]))),
                                                self.agent(1)) for i in active], f"user proxy {turn_no - 1}")
            reply = []
            for i, c in zip(active, comps):
                turns[i].append(self.turn(c, "user_proxy", slot=1, round=turn_no - 1))
                if TERMINATE in c.text:
                    stop[i] = "user_proxy"
                else:
                    history[i].append({"role": "user", "content": c.text})
                    reply.append(i)
            active = assistant(reply, turn_no) if reply else []
        for i in active:
            stop[i] = "max_turns"
        return [self.result(t, strip_terminate(last[i]), turns[i], stopped_by=stop[i],
                            assistant_turns=sum(x.role == "assistant" for x in turns[i]))
                for i, t in enumerate(tasks)]

    def metrics(self, tasks, results) -> dict[str, Any]:
        if not results:
            return {}
        n = len(results)
        return {"mean_assistant_turns": sum(r.info["assistant_turns"] for r in results) / n,
                **{f"stopped_by_{k}": sum(r.info["stopped_by"] == k for r in results) / n
                   for k in ("assistant", "user_proxy", "max_turns")}}
