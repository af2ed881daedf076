"""The base of the tests' scripted engines (golden, sage_script, maestro_script): a subclass gives the text of
each request (``answer``); completions carry the backbone's real prompt and completion token ids, so updates
train on real batches (without a store: fixed stand-in ids)."""
from selfevo.engines.base import render_prompt
from selfevo.types import Completion


class ScriptedEngine:
    def __init__(self, store=None, **_):
        self.store = store

    @classmethod
    def from_config(cls, section, store, dtype, workdir=None):
        """Built by ``engine.name=<its registered name>``: only the store matters."""
        return cls(store)

    def answer(self, request) -> str:
        raise NotImplementedError

    def generate(self, requests):
        return [self.complete(r, self.answer(r)) for r in requests]

    def complete(self, request, text: str) -> Completion:
        if self.store is None:
            return Completion(request, [1], [2, 3], [0.0, 0.0], text, "stop")
        tok = self.store.backbones[self.store.backbone_for(request)].tokenizer
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return Completion(request, render_prompt(tok, request.messages, request.prefix), ids, [0.0] * len(ids), text,
                          "stop")

    def sync_adapter(self, agent):
        pass

    def close(self):
        pass


class ReplyEngine(ScriptedEngine):
    """Answers each request with ``reply(request)`` and records every call's requests (``calls``): the setups'
    protocol tests read what each agent was shown and in which call."""

    def __init__(self, reply):
        super().__init__()
        self.reply, self.calls = reply, []

    def answer(self, request) -> str:
        return self.reply(request)

    def generate(self, requests):
        self.calls.append(list(requests))
        return super().generate(requests)
