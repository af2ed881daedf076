"""train_agents reports its progress: one line before each agent's call and one after the last, with the rows and
tokens done of the update's total."""
import pytest

from selfevo.interaction import Episode, Turn
from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, train_agents
from selfevo.types import Completion, Request, Task


def _turn(agent, prompt, completion, reward):
    req = Request(agent, [{"role": "user", "content": "q"}])
    return Turn(agent, "solver", Completion(req, prompt, completion, [0.0] * len(completion), "x", "stop"),
                reward=reward)


@pytest.mark.slow  # over 0.7 s on the AVX2 machine: out of the quick subset
def test_progress_lines(make_store):
    store = make_store(agents=("a0", "a1", "a2"))
    turns = [_turn("a0", [5, 6, 7], [8, 9], 1.0), _turn("a0", [5], [8], 0.0),    # 5 + 2 tokens
             _turn("a1", [5, 6], [9], None),                                     # not rewarded: not trained
             _turn("a2", [5, 6, 7, 8], [9, 10, 11], 1.0), _turn("a2", [5], [9], -1.0)]  # 7 + 2 tokens
    lines = []
    train_agents(store, OPTIMIZERS.get("reinforce_pp")(TrainerCfg()), [Episode(Task("t", "math", "q", "1"), turns)],
                 ["a0", "a1", "a2"], progress=lines.append)
    assert lines == ["update a0 (1/2) · rows 0/4 · tokens 0/16",
                     "update a2 (2/2) · rows 2/4 · tokens 7/16",
                     "update done · rows 4/4 · tokens 16/16"]
