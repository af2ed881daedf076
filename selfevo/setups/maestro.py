"""MAESTRO central selection, prompt only (no training): ``selfevo eval setup=maestro_select``.

The rounds are the shared MAESTRO episode program (:mod:`selfevo.protocols.maestro`, also what
``selfevo run maestro`` collects its training slates with): per round, N execution agents × K candidates (ε-greedy
base prompts; from round 2 each agent sees its own earlier solutions and the broadcast), then the central agent
picks one from the slate shown in a seeded shuffled order, in the strict ``Reason / Chosen / Final`` format
(App. C.1) at temperature 0; its pick and justification are broadcast. A central output that does not parse is
recorded as a failure (``chosen`` None, ``select_parse_failure`` True) and counts as a wrong pick in coverage /
identification; only the round's output falls back to the first displayed candidate (``output_accuracy_r<t>``).

Options: ``n_agents`` (N), ``k`` (K), ``rounds`` (R), ``epsilon``, ``central_temperature``, ``central_agent``,
``justification_chars``, ``history_chars``, ``candidate_chars`` (earlier solutions and candidates keep their
*end*, where the answer is), ``shuffle_slate``, ``central_mode`` (``select``; ``gen`` = Central-Gen, ``gen_sc`` =
Central-Gen+SC with ``sc_samples`` votes), ``view`` (``both`` | ``reason`` | ``answer``: what the central agent
sees of each candidate), ``central_prefix`` (the start of the central answer, e.g. ``Reason:`` for small models),
``slates`` (the ``items.jsonl`` of an earlier ``maestro_select`` eval with the same N and K: its round-1
candidates are replayed instead of generated, so every central agent is compared on the same slates),
``central_chain`` / ``reason_tokens`` (small models: the selection in two stages, see
:meth:`~selfevo.protocols.maestro.MaestroProtocol.chained_selection`).

Metrics (:func:`~selfevo.protocols.maestro.maestro_metrics`): coverage p_t, identification q_t,
accuracy and selection parse-failure rate per round and overall. Steps: 2·R. Sampling defaults: temperature 0.7,
top-p 0.95 (App. C.1). Agents: execution agent i uses ``agents[i % len(agents)]``; the central agent is
``agents[central_agent]`` if set, else ``agents[N]`` when more than N agents are given (N executors + 1 central,
as ``selfevo eval central_adapter=DIR`` arranges), else ``agents[0]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from selfevo.protocols.maestro import MODES, MaestroProtocol, maestro_metrics, read_replay
from selfevo.roles.maestro import VIEWS
from selfevo.setups.base import SETUPS, Episode, Setup, SetupError

__all__ = ["MaestroOptions", "MaestroSelect"]


@dataclass
class MaestroOptions:
    n_agents: int = 3
    k: int = 3
    rounds: int = 3
    epsilon: float = 0.1
    central_temperature: float = 0.0
    central_agent: int | None = None  # index into agents (see the module doc for the default)
    justification_chars: int | None = 300  # broadcast: the Reason cut to this many characters
    history_chars: int | None = 1500  # each previous solution in the interactive prompt: its last this-many chars
    candidate_chars: int | None = None  # each candidate shown to the central agent: its last this-many chars
    shuffle_slate: bool = True  # show the slate to the central agent in a seeded random order
    central_mode: str = "select"  # select | gen (Central-Gen) | gen_sc (Central-Gen + self-consistency)
    sc_samples: int = 3  # gen_sc: central answers voted on
    view: str = "both"  # what the central agent sees of each candidate: both | reason | answer
    central_prefix: str = ""  # the start of the central answer (small models: "Reason:")
    central_chain: bool = False  # small models: rationale, then "Chosen: Candidate " given and the number generated
    # (Central-Select only: central_mode=gen|gen_sc write no selection)
    reason_tokens: int = 48  # central_chain: token limit of the rationale stage
    slates: str | None = None  # items.jsonl of an earlier maestro_select eval: replay its round-1 candidates


@SETUPS.register("maestro_select")
class MaestroSelect(Setup):
    name = "maestro_select"
    Options = MaestroOptions
    default_temperature = 0.7
    default_top_p = 0.95

    def validate(self) -> None:
        o = self.opts
        if o.n_agents < 1 or o.k < 1 or o.rounds < 1 or o.sc_samples < 1:
            raise SetupError(f"maestro_select: n_agents, k, rounds and sc_samples must be >= 1, got {o.n_agents}, "
                             f"{o.k}, {o.rounds}, {o.sc_samples}")
        if not 0.0 <= o.epsilon <= 1.0:
            raise SetupError(f"maestro_select: epsilon must lie in [0, 1], got {o.epsilon}")
        if o.central_agent is not None and not 0 <= o.central_agent < len(self.agents):
            raise SetupError(f"maestro_select: central_agent {o.central_agent} is not an index into the "
                             f"{len(self.agents)} agent(s)")
        if o.central_mode not in MODES:
            raise SetupError(f"maestro_select: central_mode must be one of {', '.join(MODES)}, got {o.central_mode!r}")
        if o.view not in VIEWS:
            raise SetupError(f"maestro_select: view must be one of {', '.join(VIEWS)}, got {o.view!r}")
        self.replay = None
        if o.slates is not None:
            try:
                self.replay = read_replay(o.slates)
            except (OSError, ValueError) as exc:
                raise SetupError(f"maestro_select: cannot read slates={o.slates}: {exc}") from None
        if o.reason_tokens < 1:
            raise SetupError(f"maestro_select: reason_tokens must be >= 1, got {o.reason_tokens}")

    def max_steps(self) -> int:
        return (3 if self.chained else 2) * self.opts.rounds - (self.replay is not None)

    @property
    def chained(self) -> bool:
        """The selection is written in two stages (``central_chain``; Central-Select only)."""
        return self.opts.central_chain and self.opts.central_mode == "select"

    def central(self) -> str | None:
        o = self.opts
        if o.central_agent is not None:
            return self.agents[o.central_agent]
        return self.agents[o.n_agents] if len(self.agents) > o.n_agents else self.agents[0]

    @cached_property
    def protocol(self) -> MaestroProtocol:
        o = self.opts
        return MaestroProtocol(
            [self.agent(a) for a in range(o.n_agents)], self.central(), self.verdict, k=o.k, rounds=o.rounds,
            epsilon=o.epsilon, seed=self.seed, mode=o.central_mode, view=o.view, central_prefix=o.central_prefix,
            central_temperature=o.central_temperature, sc_samples=o.sc_samples,
            justification_chars=o.justification_chars, history_chars=o.history_chars,
            candidate_chars=o.candidate_chars, shuffle_slate=o.shuffle_slate, chain=o.central_chain,
            reason_tokens=o.reason_tokens, replay=self.replay)

    def slate_order(self, ep: Episode, rnd: int, size: int) -> list[int]:
        return self.protocol.slate_order(ep, rnd, size)

    def step_label(self, call: int) -> str:
        """Engine call ``call`` (1-based) of an episode: its round and stage (chain: rationale, then number;
        replayed slates: round 1 has no candidates call)."""
        stages = ["candidates", *(["rationale", "choice"] if self.chained else ["selection"])]
        index = call - 1 + (1 if self.replay is not None else 0)
        return f"round {index // len(stages) + 1} {stages[index % len(stages)]}"

    def solve(self, ep: Episode):
        yield from self.protocol.program(ep)
        self.finish(ep, ep.meta.pop("final"), rounds=ep.meta.pop("rounds"))

    def metrics(self, tasks, results) -> dict[str, Any]:
        return maestro_metrics([res.info["rounds"] for res in results], self.opts.rounds)
