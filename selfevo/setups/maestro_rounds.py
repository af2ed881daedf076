"""The MAESTRO rounds (paper 004, Sec. 3.1-3.2) as ONE episode program, shared by ``selfevo eval
setup=maestro_select`` (inference, :mod:`selfevo.setups.maestro`) and ``selfevo run maestro`` (training data
collection, :mod:`selfevo.algorithms.maestro`): it lives among the setups, the lower of the two floors.

Per round t = 1..R, every episode (task) of the batch in lockstep, one engine call per wave:

1. *Divergence* (one call): each of the N execution agents samples K candidates (slot ``a*K + j``). Round 1 uses
   the initial prompt; later rounds the interactive one with the agent's own K solutions of the previous round and
   the broadcast, except that with probability ε a sample uses the base prompt (the ε-greedy coverage floor; drawn
   from ``request_seed(seed, "explore|" + episode key, round, slot)``). The interactive (revision) prompts sample at
   ``revision_temperature`` when it is set (App. C.1: 0.3), the others at the runner's temperature.
2. *Convergence* (one call): the slate is shown in a seeded shuffled order (``request_seed(seed, "slate|" + key,
   round, 0)``; ``shuffle_slate=False``: agent-major) to the central agent, greedy (temperature 0, slot 0, label
   ``central``). With ``samples = G > 0`` the same call also draws G sampled central outputs (label
   ``central_sample``, ``sample_temperature``): the training list of CLPO / group of GRPO. Every central turn refers
   to the shown candidates as ``refs["candidate_j"]`` (j = displayed position), which the ``slate`` reward source
   reads. Central-Gen (``central_mode="gen"``) writes its own answer instead; Central-Gen+SC (``gen_sc``) samples
   ``sc_samples`` answers and takes the majority answer.
3. *Broadcast*: the greedy pick (number as shown, final answer, justification cut to ``justification_chars``)
   conditions round t + 1. A central output that does not parse is a recorded failure (``chosen`` None, counted a
   wrong pick); the round's *output* then falls back to the first displayed candidate (``output_accuracy`` only).

Each episode ends with ``ep.meta[ROUNDS]`` (one record per round, see :func:`round_record`) and
``ep.meta[FINAL]`` (the last round's output text); readers (the recipe, the setup, ``selfevo report``) use these
names, never the strings. :func:`maestro_metrics` turns the records into coverage p_t,
identification q_t, accuracy and the selection parse-failure rate, per round and overall; :func:`round_flows` into
the flow of answers from round to round (correct → wrong, ...: ``selfevo report`` draws it as a Sankey figure).
"""
from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from selfevo.config import opt
from selfevo.interaction import Episode, ask, request_seed
from selfevo.roles.base import HistoryItem
from selfevo.roles.maestro import _CHOSEN, BOXED_FORMAT, VIEWS, Central, CentralGen, Executor, answer_format, broadcast, \
    gen_broadcast
from selfevo.types import Task
from selfevo.verifiers.voting import answer_equivalence, majority_vote

MODES = ("select", "gen", "gen_sc")
# the turn labels of the rounds: the executors' candidates, the central agent's greedy decision, its training samples
EXECUTION, CENTRAL, CENTRAL_SAMPLE = "execution", "central", "central_sample"
# the episode keys (``ep.meta``) an episode ends with, logged under these names in ``episodes.jsonl`` (and, in a
# setup run, in each item's ``info``): its round records and the last round's output text
ROUNDS, FINAL = "rounds", "final"
# the keys of a round record that :func:`round_state` reads (``selfevo report`` draws flows only from such records)
FLOW_KEYS = frozenset({"parsed", "chosen", "central_final", "chosen_correct", "covered"})
STAGE2_STOP = ("\n", " ", ":", ".", ",", ")", ";")  # chained selection: the number ends at the first of these


@dataclass
class RoundsCfg:
    """The settings of the rounds: the options of ``selfevo eval setup=maestro_select`` and the base of
    ``selfevo run maestro``'s ``protocol`` section (the same keys, the same meaning)."""

    k: int = opt(3, "K: candidates each execution agent samples per round", ge=1)
    rounds: int = opt(3, "R: rounds of exploration → selection → broadcast per question", ge=1)
    epsilon: float = opt(0.1, "ε: chance that a candidate of round ≥ 2 uses the base prompt (Sec. 3.2)", ge=0, le=1)
    central_temperature: float = opt(0.0, "temperature of the central agent's deciding output (paper: greedy)", ge=0)
    revision_temperature: float | None = opt(None, "temperature of the revision (interactive) prompts of rounds >= 2 "
                                                   "(App. C.1: 0.3); ε-exploration samples keep the sampling "
                                                   "temperature (null: the sampling temperature everywhere)", ge=0)
    justification_chars: int | None = opt(300, "the broadcast's justification: its first this-many characters "
                                               "(null: whole)", ge=1)
    history_chars: int | None = opt(1500, "each earlier solution an agent sees again: its last this-many characters "
                                          "(null: whole)", ge=1)
    candidate_chars: int | None = opt(None, "each candidate the central agent sees: its last this-many characters "
                                            "(null: whole)", ge=1)
    shuffle_slate: bool = opt(True, "show the slate in a seeded random order (else agent-major)")
    central_mode: str = opt("select", "convergence: select (MAESTRO) | gen (Central-Gen) | gen_sc (Central-Gen+SC)",
                            choices=MODES)
    sc_samples: int = opt(3, "Central-Gen+SC: central answers voted on", ge=1)
    view: str = opt("both", "what the central agent sees of each candidate (Fig. 3)", choices=VIEWS)
    central_prefix: str = opt("", "start central answers with this (small models: 'Reason:'); '' = paper")
    central_chain: bool = opt(False, "small models: the selection in two stages, rationale then 'Chosen: Candidate "
                                     "k' (given up to k); Final is the chosen candidate's answer (see the docs); "
                                     "Central-Select only (central_mode=gen|gen_sc write no selection)")
    reason_tokens: int = opt(48, "central_chain: token limit of the rationale stage", ge=1)
    broadcast_answer: bool = opt(False, "the broadcast also states the chosen candidate's final answer (not in the "
                                        "paper: b_t is the chosen index and a brief justification)")


class MaestroProtocol:
    """The rounds of ``cfg`` (a :class:`RoundsCfg` section: the setup's options or the recipe's ``protocol``) with
    N execution agents (``executor_agents``: adapter names, None = base model) and a central agent.
    ``verdict(task, text)`` → a Verdict (score, extracted) judges candidates for the records (cache it: every
    candidate is judged once per round). ``seed`` keys every draw; training (``selfevo run maestro``) adds
    ``samples`` (G sampled central outputs per slate) at ``sample_temperature`` and may cap central answers at
    ``central_max_new_tokens`` (0: the runner's limit); ``replay`` (task id → round-1 candidates, N·K agent-major)
    replaces round 1's generation."""

    def __init__(self, cfg: RoundsCfg, executor_agents: Sequence[str | None], central_agent: str | None,
                 verdict: Callable[[Task, str], Any], seed: int | str = 0, samples: int = 0,
                 sample_temperature: float = 1.0, central_max_new_tokens: int = 0,
                 replay: Mapping[str, Sequence[str]] | None = None):
        self.cfg, self.executor_agents, self.central_agent, self.verdict = cfg, executor_agents, central_agent, verdict
        self.seed, self.samples, self.sample_temperature, self.replay = seed, samples, sample_temperature, replay
        self.executors = [Executor(agent_id=a + 1, history_chars=cfg.history_chars)
                          for a in range(len(executor_agents))]
        role = Central if cfg.central_mode == "select" else CentralGen
        common = dict(view=cfg.view, candidate_chars=cfg.candidate_chars, prefix=cfg.central_prefix,
                      temperature=cfg.central_temperature, max_new_tokens=central_max_new_tokens)
        self.central = {False: role(**common), True: role(code=True, **common)}

    # ---- seeded draws -------------------------------------------------------------------------------------------
    def explore(self, ep: Episode, rnd: int, slot: int) -> bool:
        """ε-greedy: whether candidate ``slot`` of round ``rnd`` uses the base prompt (never in round 1)."""
        if rnd == 1 or self.cfg.epsilon <= 0:
            return False
        return random.Random(request_seed(self.seed, "explore|" + ep.key, rnd, slot)).random() < self.cfg.epsilon

    def slate_order(self, ep: Episode, rnd: int, size: int) -> list[int]:
        """``order[j]``: the real (agent-major) index of the candidate displayed as number j + 1."""
        order = list(range(size))
        if self.cfg.shuffle_slate:
            random.Random(request_seed(self.seed, "slate|" + ep.key, rnd, 0)).shuffle(order)
        return order

    # ---- the episode program --------------------------------------------------------------------------------------
    def program(self, ep: Episode):
        t, n, k = ep.task, len(self.executor_agents), self.cfg.k
        previous: list[list[HistoryItem]] = [[] for _ in range(n)]
        feedback: str | None = None
        records: list[dict] = []
        final = ""
        for rnd in range(1, self.cfg.rounds + 1):
            asks = []
            for a in range(n):
                for j in range(k):
                    base = rnd == 1 or self.explore(ep, rnd, a * k + j)
                    ctx = {} if base else {"history": previous[a], "broadcast": feedback}
                    one = ask(self.executors[a], self.executor_agents[a], t, label=EXECUTION, round=rnd,
                              meta={"agent_index": a, "explore": rnd > 1 and base}, **ctx)
                    if not base and self.cfg.revision_temperature is not None:  # App. C.1: revision prompts at 0.3
                        one = dataclasses.replace(one, temperature=self.cfg.revision_temperature)
                    asks.append(one)
            cands = self.replayed(t, asks) if rnd == 1 and self.replay is not None else (yield asks)
            previous = [[HistoryItem(str(c.agent), "solution", c.text) for c in cands[a * k:(a + 1) * k]]
                        for a in range(n)]
            order = self.slate_order(ep, rnd, n * k)
            shown = [cands[i] for i in order]
            correct = [self.verdict(t, c.text).score >= 1.0 for c in cands]
            central = self.central_asks(ep, shown, rnd)
            if self.cfg.central_chain and self.cfg.central_mode == "select":
                turns = yield from self.chained_selection(central if isinstance(central, list) else [central],
                                                          shown, t)
            else:
                turns = yield central
            turns = turns if isinstance(turns, list) else [turns]
            decide = self.select if self.cfg.central_mode == "select" else self.generate
            record = decide(t, turns, order, correct, rnd, [c.text for c in cands])
            record["explored"] = sum(x.meta["explore"] for x in asks)
            feedback, final = record.pop("_broadcast"), record.pop("_output_text")
            record["broadcast"] = feedback
            records.append(record)
        ep.meta[ROUNDS], ep.meta[FINAL] = records, final

    def replayed(self, task: Task, asks: list) -> list["Replayed"]:
        """Round 1's candidates from ``replay`` instead of the engine: every central agent compared on the very same
        slates (the slate order is seeded by the episode key as always). Not turns: no reward can refer to them."""
        texts = self.replay.get(task.id)
        if texts is None or len(texts) != len(asks):
            raise ValueError(f"replayed slates: task {task.id} has {'no' if texts is None else len(texts)} "
                             f"candidate(s), the protocol needs {len(asks)} (N·K)")
        return [Replayed(text, a.agent) for text, a in zip(texts, asks)]

    def central_asks(self, ep: Episode, shown: list, rnd: int):
        """The greedy central ask (slot 0), then the G training samples (``meta["slate"]``: episode and round)."""
        task = ep.task
        role = self.central[answer_format(task) != BOXED_FORMAT]
        refs = {f"candidate_{j}": c for j, c in enumerate(shown) if not isinstance(c, Replayed)}
        texts = [c.text for c in shown]
        one = ask(role, self.central_agent, task, label=CENTRAL, round=rnd, refs=refs, candidates=texts)
        if self.cfg.central_mode == "gen_sc":  # sampled at the runner's temperature
            return [dataclasses.replace(one, temperature=None, meta={"sample": g}) for g in range(self.cfg.sc_samples)]
        if not self.samples or self.cfg.central_mode != "select":
            return one
        extra = [dataclasses.replace(one, label=CENTRAL_SAMPLE, temperature=self.sample_temperature,
                                     meta={"sample": g, "slate": f"{ep.key}|r{rnd}"}, refs=dict(refs))
                 for g in range(self.samples)]
        return [one, *extra]

    def chained_selection(self, asks: list, shown: list, task: Task):
        """The selection written in two stages (``central_chain``; small models that never write the strict format
        unaided): stage 1 (label ``<label>_reason``) starts with ``Reason:`` and stops at ``Chosen`` or after
        ``reason_tokens``; stage 2 starts with that rationale and ``\nChosen: Candidate `` (given, not generated)
        and generates the number (at most 3 tokens, cut at the first space, newline or punctuation mark). The
        harness then writes ``Final:`` as the shown candidate's own final answer (the round outputs that candidate
        anyway) and parses the whole text strictly: no number, an out-of-range number or text after it on the line
        is a recorded parse failure. Stage-2 turns refer to their rationale (``refs["rationale"]``), whose turn the
        ``slate`` source credits with the same reward. A rationale cut by ``reason_tokens`` is cut by design
        (``meta["limit_by_design"]``: ``trainer.mask_truncated`` keeps it). Returns the stage-2 turns."""
        reasons = yield [dataclasses.replace(a, label=f"{a.label}_reason", prefix="Reason:", stop=("Chosen",),
                                             max_new_tokens=self.cfg.reason_tokens, parser=None, refs=dict(a.refs),
                                             meta={**a.meta, "limit_by_design": True}) for a in asks]
        finals = [self.verdict(task, c.text).extracted for c in shown]
        stage2 = [dataclasses.replace(a, prefix=f"Reason: {r.text.strip()}\nChosen: Candidate ", stop=STAGE2_STOP,
                                      max_new_tokens=3, parser=with_final(a.parser, finals),
                                      refs={**a.refs, "rationale": r}, meta=dict(a.meta))
                  for a, r in zip(asks, reasons)]
        return (yield stage2)

    def select(self, task: Task, turns: list, order: list[int], correct: list[bool], rnd: int,
               texts: list[str]) -> dict:
        """Central-Select: the greedy turn's pick (mapped back through ``order``) decides the round."""
        central = turns[0]
        for turn in turns:
            sel = turn.parsed.value if turn.parsed.ok else None
            turn.meta.update(chosen=order[sel.index] if sel else None, shown=sel.index + 1 if sel else None)
        sel = central.parsed.value if central.parsed.ok else None
        chosen = order[sel.index] if sel is not None else None  # None: no selection was made
        output = chosen if chosen is not None else order[0]  # what the round outputs (fallback: shown first)
        central.meta.update(output=output, parsed=sel is not None)
        for turn in turns[1:]:
            turn.meta["parsed"] = turn.parsed.ok
        return {"round": rnd, "order": order, "chosen": chosen, "shown": sel.index + 1 if sel else None,
                "output": output, "parsed": sel is not None, "select_parse_failure": sel is None,
                "central_final": sel.final if sel else None, "correct": correct, "covered": any(correct),
                "chosen_correct": chosen is not None and correct[chosen], "output_correct": correct[output],
                "_broadcast": broadcast(sel, chosen, self.cfg.k, self.cfg.justification_chars,
                                        self.cfg.broadcast_answer),
                "_output_text": texts[chosen] if chosen is not None else ""}

    def generate(self, task: Task, turns: list, order: list[int], correct: list[bool], rnd: int,
                 candidates: list[str]) -> dict:
        """Central-Gen (+SC): the central answer (the majority answer's first response) decides the round."""
        texts = [x.text for x in turns]
        pick = 0
        if len(texts) > 1:
            vote = majority_vote([self.verdict(task, s).extracted for s in texts], answer_equivalence(task))
            pick = vote.index if vote.index is not None else 0
        text = texts[pick]
        verdict = self.verdict(task, text)
        ok = verdict.score >= 1.0
        return {"round": rnd, "order": order, "chosen": None, "shown": None, "output": None, "parsed": True,
                "select_parse_failure": False, "central_final": verdict.extracted, "correct": correct,
                "covered": any(correct), "chosen_correct": ok, "output_correct": ok, "picked": pick,
                "_broadcast": gen_broadcast(text, verdict.extracted, self.cfg.justification_chars),
                "_output_text": text}


@dataclass(frozen=True)
class Replayed:
    """A round-1 candidate read back from an earlier run (``MaestroProtocol.replay``)."""

    text: str
    agent: str | None = None


def read_replay(path: str) -> dict[str, list[str]]:
    """Round-1 candidates per task id from a ``selfevo eval setup=maestro_select`` ``items.jsonl`` (execution turns
    of round 1, by slot)."""
    out: dict[str, list[str]] = {}
    with open(path) as handle:
        for n, line in enumerate(handle, 1):
            try:
                item = json.loads(line)
                turns = sorted((r for r in item["responses"]  # "role": items written before the key "label"
                                if r.get("label", r.get("role")) == EXECUTION and r["round"] == 1),
                               key=lambda r: r["slot"])
                out[item["id"]] = [r["text"] for r in turns]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path} line {n}: not a maestro_select item ({type(exc).__name__}: {exc})") \
                    from None
    return out


def with_final(parser, finals: Sequence[str | None]):
    """``parser`` of a chained selection: a valid ``Chosen: Candidate k`` line gets ``Final: \\boxed{...}`` with
    candidate k's final answer appended before the strict parse (anything else is parsed as it is: a failure)."""

    def parse(text: str):
        m = _CHOSEN.search(text)
        if m is not None and not text[m.end():].strip() and 1 <= int(m.group(1)) <= len(finals):
            text = f"{text.rstrip()}\nFinal: \\boxed{{{finals[int(m.group(1)) - 1] or ''}}}"
        return parser(text)

    return parse


# ---- metrics --------------------------------------------------------------------------------------------------
def rates(covered: Sequence[bool], hits: Sequence[bool]) -> dict[str, float | None]:
    """p = share covered; q = share of covered whose decision is correct (None without coverage); accuracy = share
    of decisions correct."""
    n, n_cov = len(covered), sum(covered)
    return {"coverage": sum(covered) / n if n else None,
            "identification": sum(h for h, c in zip(hits, covered) if c) / n_cov if n_cov else None,
            "accuracy": sum(hits) / n if n else None}


def coverage_identification(slate_correct: Sequence[Sequence[bool]],
                            chosen: Sequence[int | None]) -> dict[str, Any]:
    """Coverage, identification and accuracy of selections: ``chosen[i]`` is the selected candidate's index, or
    None when the selection failed (the central output did not parse) — a wrong pick, never a default candidate."""
    hits = [c is not None and bool(s[c]) for s, c in zip(slate_correct, chosen)]
    return rates([any(s) for s in slate_correct], hits)


def maestro_metrics(records: Sequence[Sequence[dict]], rounds: int) -> dict[str, Any]:
    """Per round t: ``coverage_r<t>``, ``identification_r<t>``, ``accuracy_r<t>`` (decision correct; a parse
    failure is wrong), ``output_accuracy_r<t>`` (fallbacks included), ``select_parse_failure_rate_r<t>``; overall:
    the last round's ``coverage`` / ``identification``, ``coverage_any`` (some round covered),
    ``select_parse_failures`` and their rate over all rounds, and the ε-exploration samples."""
    if not records:
        return {}
    out: dict[str, Any] = {}
    for r in range(rounds):
        info = [task[r] for task in records]
        for key, value in rates([x["covered"] for x in info], [x["chosen_correct"] for x in info]).items():
            out[f"{key}_r{r + 1}"] = value
        out[f"output_accuracy_r{r + 1}"] = sum(x["output_correct"] for x in info) / len(info)
        out[f"select_parse_failure_rate_r{r + 1}"] = sum(not x["parsed"] for x in info) / len(info)
    out["coverage"], out["identification"] = out[f"coverage_r{rounds}"], out[f"identification_r{rounds}"]
    out["coverage_any"] = sum(any(x["covered"] for x in task) for task in records) / len(records)
    fails = sum(not x["parsed"] for task in records for x in task)
    out["select_parse_failures"] = fails
    out["select_parse_failure_rate"] = fails / (len(records) * rounds)
    out["explore_samples"] = sum(x["explored"] for task in records for x in task)
    return out


# ---- the flow of answers between rounds (paper Fig. 5; drawn by selfevo report) -----------------------------------
# A round's outcome for one question: its decision correct; wrong although a correct candidate was on the slate
# (an identification miss); wrong with no correct candidate (a coverage miss); no answer at all.
FLOW_STATES = ("correct", "missed", "uncovered", "no_answer")


def round_state(record: Mapping[str, Any]) -> str:
    """The outcome (one of :data:`FLOW_STATES`) of one round record: ``no_answer`` when the central output did not
    parse, or (Central-Gen, which chooses nothing) when its answer has no final answer; else ``correct`` when the
    decision is correct, ``missed`` when it is wrong but the slate held a correct candidate, ``uncovered`` when the
    slate held none."""
    if not record["parsed"] or (record["chosen"] is None and record["central_final"] is None):
        return "no_answer"
    if record["chosen_correct"]:
        return "correct"
    return "missed" if record["covered"] else "uncovered"


def round_flows(records: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The flow of the questions' outcomes from round to round, from their round records (one list per question,
    as :func:`maestro_metrics` takes them): ``columns`` (per round: how many questions are in each state),
    ``flows`` (every non-zero ``{"from": t, "source": state in round t, "target": state in round t + 1, "count"}``,
    in source then target order) and ``transitions`` (per pair of rounds: ``correct_correct``, ``correct_wrong``,
    ``wrong_correct``, ``wrong_wrong``, where wrong is any state but correct). A question with fewer rounds counts
    in the rounds it has."""
    states = [[round_state(r) for r in rounds] for rounds in records]
    depth = max((len(s) for s in states), default=0)
    columns, flows, transitions = [], [], []
    for t in range(depth):
        counts = dict.fromkeys(FLOW_STATES, 0)
        for s in states:
            if len(s) > t:
                counts[s[t]] += 1
        columns.append({"round": t + 1, "counts": counts})
    for t in range(depth - 1):
        pairs = [(s[t], s[t + 1]) for s in states if len(s) > t + 1]
        flows += [{"from": t + 1, "source": a, "target": b, "count": pairs.count((a, b))}
                  for a in FLOW_STATES for b in FLOW_STATES if (a, b) in pairs]
        ok = [(x == "correct", y == "correct") for x, y in pairs]
        transitions.append({"from": t + 1, "to": t + 2, "correct_correct": ok.count((True, True)),
                            "correct_wrong": ok.count((True, False)), "wrong_correct": ok.count((False, True)),
                            "wrong_wrong": ok.count((False, False))})
    return {"n": len(records), "rounds": depth, "states": list(FLOW_STATES), "columns": columns, "flows": flows,
            "transitions": transitions}
