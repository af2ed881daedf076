"""MAESTRO central selection, prompt only (no training): ``selfevo eval setup=maestro_select``.

The rounds are the shared MAESTRO episode program (:mod:`selfevo.setups.maestro_rounds`, also what
``selfevo run maestro`` collects its training slates with): per round, N execution agents × K candidates (ε-greedy
base prompts; from round 2 each agent sees its own earlier solutions and the broadcast), then the central agent
picks one from the slate shown in a seeded shuffled order, in the strict ``Reason / Chosen / Final`` format
(App. C.1) at temperature 0; its pick and justification are broadcast. A central output that does not parse is
recorded as a failure (``chosen`` None, ``select_parse_failure`` True) and counts as a wrong pick in coverage /
identification; only the round's output falls back to the first displayed candidate (``output_accuracy_r<t>``).

Options (:class:`MaestroOptions`, listed by ``selfevo eval --help``): the rounds' settings, the same keys as
``selfevo run maestro``'s ``protocol.*`` (:class:`~selfevo.setups.maestro_rounds.RoundsCfg`: ``k`` (K),
``rounds`` (R), ``epsilon``, ``central_mode`` (``select``; ``gen`` = Central-Gen, ``gen_sc`` = Central-Gen+SC with
``sc_samples`` votes), ``view``, ``central_prefix``, ``central_chain`` / ``reason_tokens`` (small models: the
selection in two stages, see :meth:`~selfevo.setups.maestro_rounds.MaestroProtocol.chained_selection`), the
``*_chars`` cuts (earlier solutions and candidates keep their *end*, where the answer is), ...), plus ``n_agents``
(N), ``central_agent`` and ``slates`` (the ``items.jsonl`` of an earlier ``maestro_select`` eval with the same N
and K: its round-1 candidates are replayed instead of generated, so every central agent is compared on the same
slates).

Metrics (:func:`~selfevo.setups.maestro_rounds.maestro_metrics`): coverage p_t, identification q_t,
accuracy and selection parse-failure rate per round and overall. Waves: 2·R. Sampling defaults: temperature 0.7,
top-p 0.95 (App. C.1). Agents: execution agent i uses ``agents[i % len(agents)]``; the central agent is
``agents[central_agent]`` if set, else ``agents[N]`` when more than N agents are given (N executors + 1 central,
as ``selfevo eval central_adapter=DIR`` arranges), else ``agents[0]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from selfevo.config import opt
from selfevo.setups.maestro_rounds import FINAL, ROUNDS, MaestroProtocol, RoundsCfg, maestro_metrics, read_replay
from selfevo.setups.base import SETUPS, Episode, Setup, SetupError

__all__ = ["MaestroOptions", "MaestroSelect"]


@dataclass
class MaestroOptions(RoundsCfg):
    n_agents: int = opt(3, "N: execution agents (execution agent i uses agents[i % len(agents)])", ge=1)
    central_agent: int | None = opt(None, "the central agent's index into the agents (null: agents[N] when more "
                                          "than N are given, else agents[0])", ge=0)
    slates: str | None = opt(None, "items.jsonl of an earlier maestro_select eval with the same N and K: its round-1 "
                                   "candidates are replayed instead of generated")


@SETUPS.register("maestro_select")
class MaestroSelect(Setup):
    name = "maestro_select"
    Options = MaestroOptions
    default_temperature = 0.7
    default_top_p = 0.95

    def __init__(self, *args, **kwargs):
        """As every setup; then the facts its options cannot say alone: ``central_agent`` is an index into the
        agents, and ``slates`` is read (``self.replay``)."""
        super().__init__(*args, **kwargs)
        o = self.opts
        if o.central_agent is not None and o.central_agent >= len(self.agents):
            raise SetupError(f"setup 'maestro_select': central_agent {o.central_agent} is not an index into the "
                             f"{len(self.agents)} agent(s)")
        self.replay = None
        if o.slates is not None:
            try:
                self.replay = read_replay(o.slates)
            except (OSError, ValueError) as exc:
                raise SetupError(f"setup 'maestro_select': cannot read slates={o.slates}: {exc}") from None

    def max_waves(self) -> int:
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
        """The shared MAESTRO rounds over this setup's options (a :class:`RoundsCfg`)."""
        return MaestroProtocol(self.opts, [self.agent(a) for a in range(self.opts.n_agents)], self.central(),
                               self.verdict, seed=self.seed, replay=self.replay)

    def slate_order(self, ep: Episode, rnd: int, size: int) -> list[int]:
        return self.protocol.slate_order(ep, rnd, size)

    def wave_label(self, wave: int) -> str:
        """Wave ``wave`` (1-based) of an episode: its round and stage (chain: rationale, then number; replayed
        slates: round 1 has no candidates wave)."""
        stages = ["candidates", *(["rationale", "choice"] if self.chained else ["selection"])]
        index = wave - 1 + (1 if self.replay is not None else 0)
        return f"round {index // len(stages) + 1} {stages[index % len(stages)]}"

    def solve(self, ep: Episode):
        yield from self.protocol.program(ep)
        self.finish(ep, ep.meta.pop(FINAL), **{ROUNDS: ep.meta.pop(ROUNDS)})

    def metrics(self, tasks, results) -> dict[str, Any]:
        return maestro_metrics([res.info[ROUNDS] for res in results], self.opts.rounds)
