"""AutoGen two-agent chat (MASLab ``autogen``, no code execution): an assistant and an LLM user proxy.

Loop (MASLab's, at most ``max_turns`` = 3 assistant turns and 2 proxy turns, so at most 5 waves):

1. The assistant answers the task. If its answer contains ``TERMINATE`` the task is done.
2. Up to ``max_turns - 1`` times: the user proxy reviews the assistant's latest answer; if the proxy's reply
   contains ``TERMINATE`` the task is done (final = the assistant's latest answer); otherwise the assistant answers
   the proxy (with its whole history) and is done if that answer contains ``TERMINATE``.
3. The final response is the assistant's last answer with ``TERMINATE`` removed.

Each wave sends the still-active tasks of all tasks in one engine call; a wave with no active task is skipped.
The user proxy's requests use seed slot 1.

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
from typing import Any

from selfevo.config import opt
from selfevo.setups.base import SETUPS, Episode, Setup, user
from selfevo.tasks import format_prompt

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
    max_turns: int = opt(3, "assistant turns at most (the user proxy reviews between them)", ge=1)


def strip_terminate(text: str) -> str:
    return text.replace(TERMINATE, "").strip()


@SETUPS.register("autogen")
class AutoGen(Setup):
    name = "autogen"
    Options = AutoGenOptions
    default_temperature = 0.5

    def max_waves(self) -> int:
        return 2 * self.opts.max_turns - 1

    def wave_label(self, wave: int) -> str:
        return f"assistant {(wave + 1) // 2}" if wave % 2 else f"user proxy {wave // 2}"

    def solve(self, ep: Episode):
        query = format_prompt(ep.task)
        history = [{"role": "system", "content": ASSISTANT_SYSTEM}, {"role": "user", "content": query}]
        last, stop = "", "max_turns"  # stop: why the chat ended ("assistant", "user_proxy" or "max_turns")
        for turn_no in range(1, self.opts.max_turns + 1):
            if turn_no > 1:  # the user proxy reviews the latest answer (seed slot 1, as it always had)
                review = user(PROXY_PROMPT.format(query=query, answer=strip_terminate(last)))
                reply = yield self.ask(self.agent(1), "user_proxy", review, round=turn_no - 1, slot=1)
                if TERMINATE in reply.text:
                    stop = "user_proxy"
                    break
                history.append({"role": "user", "content": reply.text})
            answer = yield self.ask(self.agent(0), "assistant", list(history), round=turn_no)
            history.append({"role": "assistant", "content": answer.text})
            last = answer.text
            if TERMINATE in answer.text:
                stop = "assistant"
                break
        self.finish(ep, strip_terminate(last), stopped_by=stop,
                    assistant_turns=sum(t.label == "assistant" for t in ep.turns))

    def metrics(self, tasks, results) -> dict[str, Any]:
        if not results:
            return {}
        n = len(results)
        return {"mean_assistant_turns": sum(r.info["assistant_turns"] for r in results) / n,
                **{f"stopped_by_{k}": sum(r.info["stopped_by"] == k for r in results) / n
                   for k in ("assistant", "user_proxy", "max_turns")}}
