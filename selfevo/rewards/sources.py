"""Reward sources: plain callables ``source(episodes) -> RewardResult`` (per-turn rewards + metrics), a registry of
factories, and composition (weighted sums, gates).

A :class:`RewardResult` says, per episode, which turns (by index) get which reward; ``None`` masks a turn out of
training, and a turn a source does not mention keeps whatever it had. :func:`assign` writes the rewards onto the
turns. The formulas are the pure functions of :mod:`selfevo.rewards.formulas`; sources only find the turns they
apply to, following each turn's ``label`` and ``refs`` (an evaluation's ``refs["solution"]`` is the index of the
solution it judges).

Registered (``REWARD_SOURCES.get(name)(**options)`` builds one):

* ``interaction_scores`` — CoMAS Eq. 7-8: each scoring turn (label ``scorer`` or ``judge``) rewards itself (0, or
  -1 when its score does not parse), its evaluation (``1 - r_s``) and its solution (mean over its scored pairs).
* ``noisy_judge`` — a judge of controlled quality in the scorer's place: the verifier's verdict on the scored
  solution, kept with probability ``accuracy`` and flipped otherwise, as score 3 or 1, then Eq. 7-8 (how good
  must an LLM judge be for its rewards to teach?).
* ``verdict_agreement`` — the CoMAS w/o-scoring ablation: solution = support ratio, evaluation = agreement.
* ``verifier`` — turns of the given labels scored by the task's verifier (or a named one): 1.0 / 0.0.
* ``majority_vote`` — TTRL: the answers to the same task vote; 1.0 for the majority's answer, 0.0 for the others,
  a dummy 0.5 where voting cannot apply (no answer, a tie, code); logs the pseudo-label's accuracy.
* ``format`` — SAGE's soft format reward of tagged output (turns of the given labels).
* ``critic_score`` — a critic's 1-10 score (SAGE Eq. 2 normalisation) as the reward of the turn it judges.
* ``slate`` — listwise: each candidate of a selector's slate verified; the selector gets the chosen one's reward,
  and the slate's rewards are kept in the selector turn's ``meta["slate_rewards"]`` for listwise losses.
"""
from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from selfevo.errors import SelfevoError
from selfevo.interaction.episodes import Episode, Turn
from selfevo.registry import Registry
from selfevo.rewards.formulas import (comas_rewards, controlled_judge_score, maestro_reward, rationale_attributes, sage_norm,
                                      soft_format_reward, support_ratio, verdict_agreement)
from selfevo.verifiers import get_verifier, verify
from selfevo.verifiers.voting import answer_equivalence, majority_vote

TurnRewards = dict[int, "float | None"]
# options renamed: they name turn labels, not Role objects (a spec that uses the old name fails, naming the new one)
RENAMED_OPTIONS = {"roles": "labels", "role": "label"}


class RewardSourceError(SelfevoError, ValueError):
    """A reward-source spec of the config that cannot be built, said in one line."""


def _ok(turn: Turn) -> bool:
    """Whether the turn's output parsed (an unparsed turn, ``parsed`` None, counts as a failure)."""
    return turn.parsed is not None and turn.parsed.ok


@dataclass
class RewardResult:
    """``rewards[e][i]``: reward of turn ``i`` of episode ``e`` (None = masked); ``metrics``: what to log."""

    rewards: list[TurnRewards]
    metrics: dict[str, float | None] = field(default_factory=dict)


RewardSource = Callable[[list[Episode]], RewardResult]
REWARD_SOURCES: Registry[Callable[..., RewardSource]] = Registry("reward source")


def assign(episodes: Sequence[Episode], result: RewardResult) -> None:
    """Write ``result``'s rewards onto the turns (turns it does not mention are left as they are)."""
    for ep, rewards in zip(episodes, result.rewards):
        for i, r in rewards.items():
            ep.turns[i].reward = r


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _rate(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


# ---- CoMAS ------------------------------------------------------------------------------------------------------
@REWARD_SOURCES.register("interaction_scores")
def interaction_scores(on_parse_failure: str = "mask", labels: Sequence[str] = ("scorer", "judge")) -> RewardSource:
    """CoMAS Eq. 7-8 from each scoring turn's parsed 1-3 score; a solution with several scored pairs gets their
    mean (pairs whose reward is masked are left out; none left: masked)."""

    def source(episodes: list[Episode]) -> RewardResult:
        return _scored_pairs(episodes, labels, lambda ep, i, t: t.parsed.value if _ok(t) else None, on_parse_failure)

    return source


@REWARD_SOURCES.register("noisy_judge")
def noisy_judge(accuracy: float = 1.0, seed: int | str = 0, labels: Sequence[str] = ("scorer", "judge"),
                on_parse_failure: str = "mask") -> RewardSource:
    """A judge of controlled quality standing in for CoMAS's scorer: each scoring turn's score is replaced by the
    verifier's verdict on the solution it scores, kept with probability ``accuracy`` and flipped otherwise
    (:func:`~selfevo.rewards.formulas.controlled_judge_score`: 3 or 1), then Eq. 7-8 as in ``interaction_scores``.
    The draw is seeded by (``seed``, task id, solution text, turn index): the same answer gets the same verdict
    whatever the batch. Logs ``judge_flip_rate`` (verdicts flipped) beside the model scorer's own
    ``parse_failure_rate`` (its text is not read for the reward)."""
    flips: list[bool] = []

    def score_of(ep: Episode, i: int, t: Turn) -> int:
        solution = ep.turns[t.refs["solution"]].text
        correct = verify(ep.task, solution).score >= 1.0
        u = random.Random(f"{seed}|{ep.task.id}|{solution}|{i}").random()
        score = controlled_judge_score(correct, accuracy, u)
        flips.append((score == 3) != correct)
        return score

    def source(episodes: list[Episode]) -> RewardResult:
        flips.clear()
        result = _scored_pairs(episodes, labels, score_of, on_parse_failure)
        failures = [not _ok(t) for ep in episodes for t in ep.turns if t.label in labels]
        return RewardResult(result.rewards, {"parse_failure_rate": _rate(failures), "judge_flip_rate": _rate(flips)})

    return source


def _scored_pairs(episodes: list[Episode], labels: Sequence[str], score_of, on_parse_failure: str) -> RewardResult:
    """Eq. 7-8 over each scoring turn (label in ``labels``) with its score ``score_of(episode, turn index, turn)``
    (None: did not parse): the scorer's, its evaluation's and its solution's rewards, a solution's the mean over its
    pairs."""
    out, failures = [], []
    for ep in episodes:
        rewards: TurnRewards = {}
        pairs: dict[int, list[float | None]] = {}
        for i, t in enumerate(ep.turns):
            if t.label not in labels:
                continue
            score = score_of(ep, i, t)
            failures.append(score is None)
            r = comas_rewards(score, on_parse_failure)
            rewards[i] = r["scorer"]
            if "evaluation" in t.refs:
                rewards[t.refs["evaluation"]] = r["evaluator"]
            pairs.setdefault(t.refs["solution"], []).append(r["solver"])
        for sol, rs in pairs.items():
            rewards[sol] = _mean(rs)
        out.append(rewards)
    return RewardResult(out, {"parse_failure_rate": _rate(failures)})


@REWARD_SOURCES.register("verdict_agreement")
def verdict_agreement_source(on_parse_failure: str = "mask", label: str = "evaluator") -> RewardSource:
    """CoMAS w/o scoring: a solution's reward is the share of its parsed verdicts that support it; an
    evaluation's is its agreement with the other verdicts on the same solution (unparsed: masked, or 0)."""
    failed = 0.0 if on_parse_failure == "zero" else None

    def source(episodes: list[Episode]) -> RewardResult:
        out, failures = [], []
        for ep in episodes:
            rewards: TurnRewards = {}
            by_solution: dict[int, list[int]] = {}
            for i, t in enumerate(ep.turns):
                if t.label == label:
                    by_solution.setdefault(t.refs["solution"], []).append(i)
            for sol, evals in by_solution.items():
                verdicts = [ep.turns[i].parsed.value if _ok(ep.turns[i]) else None for i in evals]
                failures += [v is None for v in verdicts]
                rewards[sol] = support_ratio(verdicts)
                for j, i in enumerate(evals):
                    rewards[i] = verdict_agreement(verdicts, j) if verdicts[j] is not None else failed
            out.append(rewards)
        return RewardResult(out, {"parse_failure_rate": _rate(failures)})

    return source


# ---- verifiers, format, critics, slates ------------------------------------------------------------------------
@REWARD_SOURCES.register("verifier")
def verifier_source(labels: Sequence[str] = ("solver",), verifier: str | None = None) -> RewardSource:
    """1.0 / 0.0 from the task's verifier (``task.meta["verifier"]`` or its domain; ``verifier`` forces one) for
    every turn whose label is in ``labels``; logs ``accuracy``."""
    check = get_verifier(verifier) if verifier else verify

    def source(episodes: list[Episode]) -> RewardResult:
        out, correct = [], []
        for ep in episodes:
            rewards: TurnRewards = {}
            for i, t in enumerate(ep.turns):
                if t.label in labels:
                    score = check(ep.task, t.text).score
                    rewards[i] = float(score)
                    correct.append(score >= 1.0)
            out.append(rewards)
        return RewardResult(out, {"accuracy": _rate(correct)})

    return source


@REWARD_SOURCES.register("majority_vote")
def majority_vote_source(labels: Sequence[str] = ("solver",), dummy: float | None = 0.5,
                         dummy_verifiers: Sequence[str] = ("code",), break_ties: bool = False) -> RewardSource:
    """TTRL (test-time RL; CoMAS's TTRL baseline): no ground truth. The turns of ``labels`` on the same task (by task
    id, over all the episodes given: several answers in one episode, or ``trainer.prompt_reuse`` episodes) are a
    vote: their answers (the task's verifier's ``extracted``) are grouped by
    :func:`~selfevo.verifiers.voting.majority_vote` (normalised text; math equivalence on math tasks); the largest
    group's answer is the pseudo-label, and each turn gets 1.0 if its answer is in that group, else 0.0 (no answer:
    0.0).

    Where voting cannot apply every turn of the task gets ``dummy`` (CoMAS: 0.5): no answer extracted at all, a tie
    for the most votes (no majority; ``break_ties=True`` lets the first-seen group win instead, like the released
    code's ``Counter.most_common``), or a task whose verifier is in ``dummy_verifiers`` (code has no comparable
    answer). Each turn's ``meta["pseudo_label"]`` records the label (None: dummy). Logs ``label_accuracy`` (pseudo
    labels the verifier finds correct against the true reference, over voted tasks that have one), ``dummy_rate``
    (share of tasks given the dummy) and ``accuracy`` (voted answers correct against the true reference)."""
    def source(episodes: list[Episode]) -> RewardResult:
        out: list[TurnRewards] = [{} for _ in episodes]
        groups: dict[str, list[tuple[int, int]]] = {}
        for e, ep in enumerate(episodes):
            for i, t in enumerate(ep.turns):
                if t.label in labels:
                    groups.setdefault(ep.task.id, []).append((e, i))
        right_labels, dummies, correct = [], [], []
        for members in groups.values():
            task = episodes[members[0][0]].task
            turns = [episodes[e].turns[i] for e, i in members]
            pseudo, winners = None, set()
            if str(task.meta.get("verifier") or task.domain) not in dummy_verifiers:
                verdicts = [verify(task, t.text) for t in turns]
                vote = majority_vote([v.extracted for v in verdicts], answer_equivalence(task))
                top = [g for g in vote.groups if len(g) == vote.count]
                if vote.index is not None and (break_ties or len(top) == 1):
                    pseudo, winners = vote.answer, set(next(g for g in vote.groups if vote.index in g))
                    if _has_label(task):
                        right_labels.append(verdicts[vote.index].score >= 1.0)
                        correct += [v.score >= 1.0 for v in verdicts]
            dummies.append(pseudo is None)
            for k, ((e, i), t) in enumerate(zip(members, turns)):
                out[e][i] = dummy if pseudo is None else float(k in winners)
                t.meta["pseudo_label"] = pseudo
        return RewardResult(out, {"label_accuracy": _rate(right_labels), "dummy_rate": _rate(dummies),
                                  "accuracy": _rate(correct)})

    return source


def _has_label(task) -> bool:
    return bool(task.reference or task.tests or task.meta.get("io"))


@REWARD_SOURCES.register("format")
def format_source(tags: Mapping[str, int], labels: Sequence[str]) -> RewardSource:
    """SAGE's soft format reward (:func:`~selfevo.rewards.formulas.soft_format_reward`) of the whole answer (a
    given prefix included): ``tags`` maps each required tag to how often it should appear; turns of ``labels``."""
    tags = dict(tags)

    def source(episodes: list[Episode]) -> RewardResult:
        out, scores = [], []
        for ep in episodes:
            rewards = {i: soft_format_reward(t.answer, tags) for i, t in enumerate(ep.turns) if t.label in labels}
            scores += list(rewards.values())
            out.append(rewards)
        return RewardResult(out, {"format": round(_mean(scores), 4) if scores else None})

    return source


@REWARD_SOURCES.register("critic_score")
def critic_score(label: str = "critic", ref: str = "target", one_is_min: bool = False,
                 unparsed: float | None = None, clip: bool = False) -> RewardSource:
    """A critic turn's parsed 1-10 score, normalised to [0, 1] (SAGE Eq. 2; ``clip``: see
    :func:`~selfevo.rewards.formulas.sage_norm`), becomes the reward of the turn it judges (``refs[ref]``). A turn
    judged by several critics gets the mean of their parsed scores (MAE's repeated Judge calls); one whose critics'
    scores all fail to parse gets ``unparsed`` (None: masked)."""

    def source(episodes: list[Episode]) -> RewardResult:
        out = []
        for ep in episodes:
            scores: dict[int, list[float | None]] = {}
            for t in ep.turns:
                if t.label == label and ref in t.refs:
                    scores.setdefault(t.refs[ref], []).append(sage_norm(t.parsed.value, one_is_min, clip)
                                                              if _ok(t) else None)
            means = {i: _mean(xs) for i, xs in scores.items()}
            out.append({i: unparsed if m is None else m for i, m in means.items()})
        return RewardResult(out)

    return source


@REWARD_SOURCES.register("slate")
def slate_source(label: str = "selector", on_parse_failure: float | None = 0.0,
                 credit_refs: Sequence[str] = (), binary: bool = True, rationale_weight: float = 0.0) -> RewardSource:
    """Listwise slate reward: the candidates a selector turn saw (``refs["candidate_k"]``, k = 0..K-1) are verified
    against the task (each candidate turn once, however many selector turns share it); the selector's reward is its
    chosen candidate's (``parsed.value``: the 0-based index, or an object with an ``index``, e.g. MAESTRO's
    ``Selection``), or ``on_parse_failure`` when its choice does not parse (recorded as a failure, never read as a
    choice). ``credit_refs``: names of a selector turn's refs (e.g. ``rationale``: the first stage of a chained
    selection) whose turns get the same reward and ``slate_rewards``. ``binary``: a candidate's reward is 1.0 when it
    is fully correct (every test of a code task passes: pass@1, what coverage and identification count), else 0.0;
    off: the verifier's score (a code candidate's fraction of tests passed). ``rationale_weight`` w: MAESTRO Eq. 5's
    rationale term, ``(1 - w) * r(chosen) + w * rationale_attributes(reason, ...)`` for a selection with a
    ``reason`` (:func:`~selfevo.rewards.formulas.maestro_reward`); 0: correctness alone."""
    def source(episodes: list[Episode]) -> RewardResult:
        out, failures, covered = [], [], []
        for ep in episodes:
            rewards: TurnRewards = {}
            verified: dict[int, float] = {}
            for i, t in enumerate(ep.turns):
                if t.label != label:
                    continue
                refs = [t.refs[f"candidate_{k}"] for k in range(_slate_size(t))]
                for j in refs:
                    if j not in verified:
                        score = float(verify(ep.task, ep.turns[j].text).score)
                        verified[j] = float(score >= 1.0) if binary else score
                scores = [verified[j] for j in refs]
                t.meta["slate_rewards"] = scores
                chosen = getattr(t.parsed.value, "index", t.parsed.value) if _ok(t) else None
                if chosen is not None and not (isinstance(chosen, int) and 0 <= chosen < len(scores)):
                    raise ValueError(f"selector turn {i} chose {chosen!r}, not an index of its {len(scores)} candidates")
                failures.append(chosen is None)
                covered.append(max(scores, default=0.0) >= 1.0)
                rewards[i] = scores[chosen] if chosen is not None else on_parse_failure
                if chosen is not None and rationale_weight and hasattr(t.parsed.value, "reason"):
                    sel = t.parsed.value
                    rewards[i] = maestro_reward(scores[chosen], rationale_attributes(sel.reason, chosen + 1,
                                                                                    sel.final), rationale_weight)
                for name in credit_refs:
                    if name in t.refs:
                        rewards[t.refs[name]] = rewards[i]
                        ep.turns[t.refs[name]].meta["slate_rewards"] = scores
            out.append(rewards)
        return RewardResult(out, {"select_parse_failure_rate": _rate(failures), "coverage": _rate(covered)})

    return source


def _slate_size(turn: Turn) -> int:
    return sum(1 for k in turn.refs if k.startswith("candidate_"))


# ---- composition ------------------------------------------------------------------------------------------------
def weighted_sum(parts: Sequence[tuple[float, RewardSource]]) -> RewardSource:
    """``sum_k w_k r_k`` per turn over the sources that reward it; a turn any of them masks (None) stays masked.
    Metrics are merged (a later source's key wins on a clash)."""

    def source(episodes: list[Episode]) -> RewardResult:
        results = [(w, src(episodes)) for w, src in parts]
        out = []
        for e in range(len(episodes)):
            total: TurnRewards = {}
            for w, res in results:
                for i, r in res.rewards[e].items():
                    if i in total and total[i] is None:
                        continue
                    total[i] = None if r is None else total.get(i, 0.0) + w * r
            out.append(total)
        metrics = {k: v for _, res in results for k, v in res.metrics.items()}
        return RewardResult(out, metrics)

    return source


def gated(source: RewardSource, gate: RewardSource, threshold: float, otherwise: float | None = 0.0) -> RewardSource:
    """``source``'s reward where ``gate`` gives the same turn a value ≥ ``threshold``; ``otherwise`` where the gate
    gives less or masks it; turns the gate does not mention keep ``source``'s reward."""

    def gated_source(episodes: list[Episode]) -> RewardResult:
        res, g = source(episodes), gate(episodes)
        out = []
        for rewards, gates in zip(res.rewards, g.rewards):
            out.append({i: (r if i not in gates or (gates[i] is not None and gates[i] >= threshold) else otherwise)
                        for i, r in rewards.items()})
        return RewardResult(out, {**g.metrics, **res.metrics})

    return gated_source


def labelled(source: RewardSource, prefix: str = "", section: str | None = None) -> RewardSource:
    """``source`` whose metrics are renamed ``prefix + key``, and put under ``section`` when given (two sources of
    one step whose metric names would clash: MAESTRO's executors' ``accuracy`` beside its own)."""

    def labelled_source(episodes: list[Episode]) -> RewardResult:
        res = source(episodes)
        metrics = {prefix + k: v for k, v in res.metrics.items()}
        return RewardResult(res.rewards, {section: metrics} if section else metrics)

    return labelled_source


def build_sources(specs: Sequence[str | Mapping], **defaults) -> RewardSource:
    """Sources from config: ``"verifier"``, ``"verifier:0.5"`` (name:weight) or ``{"name": ..., "weight": ...,
    **options}``; several are summed with their weights (:func:`weighted_sum`). ``defaults`` go to every source
    whose factory takes them."""
    parts = []
    for spec in specs:
        if isinstance(spec, str):
            name, _, weight = spec.partition(":")
            options: dict = {}
        else:
            options = dict(spec)
            name, weight = options.pop("name"), options.pop("weight", 1.0)
        for old in RENAMED_OPTIONS.keys() & (options.keys() | defaults.keys()):
            raise RewardSourceError(f"reward source '{name}': option '{old}' is now '{RENAMED_OPTIONS[old]}'")
        factory = REWARD_SOURCES.get(name)
        params = inspect.signature(factory).parameters
        kwargs = {k: v for k, v in defaults.items() if k in params} | options
        parts.append((1.0 if weight in ("", None) else float(weight), factory(**kwargs)))
    if not parts:
        raise ValueError("no reward source given")
    return parts[0][1] if len(parts) == 1 and parts[0][0] == 1.0 else weighted_sum(parts)
