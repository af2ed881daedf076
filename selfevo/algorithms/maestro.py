"""MAESTRO with CLPO: execution agents explore, a trained central agent selects, its pick is broadcast.

    selfevo run maestro                                          # preset cpu: embedded model, N=2, K=2, R=2
    selfevo run maestro trainer.max_steps=2 output_dir=runs/m1   # then: ... resume=true trainer.max_steps=3
    selfevo run maestro --preset paper                           # App. C.1: N=K=R=3, LoRA r=16, lr 5e-5, KL 0.1
    selfevo run maestro trainer.optimizer=grpo                   # baselines: grpo | sft | none (prompt only)
    selfevo run maestro clpo.rank=false                          # ablation w/o L_rank (clpo.choice=false: w/o L_choice)
    selfevo eval benchmark=gsm8k setup=maestro_select central_adapter=runs/maestro/adapters/final/central
    # the paper's pipeline: SFT, then CLPO from the SFT adapter with it (frozen) as the KL reference
    selfevo run maestro trainer.optimizer=sft output_dir=runs/m-sft
    selfevo run maestro model.init_adapters=runs/m-sft/adapters/final trainer.kl_reference=initial output_dir=runs/m

Paper: arXiv 2511.06134 (``papers/004``), Sec. 3 (Eq. 1-8), App. C.1. One step: the step's questions run through
the MAESTRO rounds (:mod:`selfevo.setups.maestro_rounds`, the same program as ``selfevo eval
setup=maestro_select``), N frozen execution agents (the base model; ``protocol.train_executors``: one adapter each,
GRPO on the verifier reward of their candidates) × K candidates per round, R rounds; the greedy central output
decides and broadcasts as at inference, and G more central outputs per slate are sampled for training (the slates
of all R rounds, Eq. 5). Rewards: the ``slate`` source (each sample gets the verified reward of the candidate it
endorses; a choice that does not parse gets ``reward.on_parse_failure``); then ``trainer.epochs`` passes of the
central adapter's optimizer (``clpo``, ``grpo`` on the whole output, ``sft`` on correct selections, ``none``).

Where the paper is silent — where the one rationale per candidate of Eq. 7 comes from: the rationales are those of
G sampled central outputs per slate, each ranked by the reward of the candidate it endorses (a list of G, not |C|;
ties broken at random); Eq. 6's log π(k | q, C), summed over every candidate k (``clpo.choice_form=listwise``, the
default), is candidate k's decision string (:func:`decision_strings`: ``Chosen: k`` and its final answer; a
chained selection: the number) scored after each sample's own rationale, A_k = r(c_k) − mean reward of the
slate's candidates, averaged over the slate's samples; ``clpo.choice_form=sampled``: each sample's own decision
segment (``Chosen`` … ``Final``), A = r(endorsed) − that mean. A sample without a ``Chosen:`` line has no decision
tokens (it counts only in L_rank, KL, entropy); one with an invalid choice keeps its decision tokens (sampled
form: with reward ``on_parse_failure``; listwise: its rationale still conditions the candidates' decisions). The
masks come from :func:`~selfevo.roles.maestro.central_spans`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from selfevo.config import ConfigError, SamplingCfg, opt
from selfevo.interaction import Episode, Turn
from selfevo.loop import DataCfg, EvalCfg, Loop, Phase, RunCfg, TrainerCfg, Update, build
from selfevo.loop.metrics import mean
from selfevo.optimizers import OPTIMIZERS, ClpoCfg, Optimizer, UpdateSpec
from selfevo.optimizers.clpo import CHOICE_EXTRAS
from selfevo.setups.maestro_rounds import (CENTRAL_SAMPLE, EXECUTION, FINAL, ROUNDS, MaestroProtocol, RoundsCfg,
                                           maestro_metrics)
from selfevo.rewards import build_sources, labelled, weighted_sum
from selfevo.roles.maestro import central_spans
from selfevo.tasks import load_tasks
from selfevo.types import Task
from selfevo.verifiers import verify


# ---- config -----------------------------------------------------------------------------------------------------
@dataclass
class MaestroProtocolCfg(RoundsCfg):
    central_samples: int = opt(4, "G: sampled central outputs per slate for training (CLPO's list, GRPO's group)",
                               ge=1)
    sample_temperature: float = opt(1.0, "temperature of the G training samples (the broadcast is greedy)", gt=0)
    central_max_new_tokens: int = opt(0, "token limit of central answers (0: sampling.max_new_tokens)", ge=0)
    train_executors: bool = opt(False, "also train the execution agents (GRPO on their candidates' verifier reward; "
                                       "paper: frozen)")


@dataclass
class MaestroRewardCfg:
    on_parse_failure: float = opt(0.0, "reward of a central sample whose choice does not parse", ge=-1, le=1)
    rationale_weight: float = opt(0.0, "Eq. 5's optional rationale-quality term: reward (1 - w)·correct + w·attribute "
                                       "score of the rationale (selfevo's four checks; 0: correctness only)",
                                  ge=0, le=1)


@dataclass
class MaestroDataCfg(DataCfg):
    tasks: list[str] = opt([], "training questions (benchmarks or JSONL); empty: GSM8K train")


@dataclass
class MaestroCfg(RunCfg):
    recipe: str = opt("maestro", "the recipe", choices=("maestro",))
    output_dir: str = opt("runs/maestro", "run directory", nonempty=True)
    n_agents: int = opt(3, "N: execution agents (the central agent is one more)", ge=1)
    sampling: SamplingCfg = opt(SamplingCfg(max_new_tokens=512, temperature=0.7, top_p=0.95),
                                "sampling of execution agents (App. C.1: 0.7, top-p 0.95, 512 tokens)")
    trainer: TrainerCfg = opt(TrainerCfg(optimizer="clpo", tasks_per_step=8, lr=5e-5, kl_coef=0.1,
                                         kl_estimator="k3", kl_in_reward=False), "schedule and updates")
    protocol: MaestroProtocolCfg = opt(MaestroProtocolCfg, "the MAESTRO rounds")
    clpo: ClpoCfg = opt(ClpoCfg, "CLPO weights and ablation switches (trainer.optimizer=clpo)")
    reward: MaestroRewardCfg = opt(MaestroRewardCfg, "reward settings")
    data: MaestroDataCfg = opt(MaestroDataCfg, "training questions")
    eval: EvalCfg = opt(EvalCfg(every=0), "in-loop held-out answers of each adapter (MAESTRO: use selfevo eval)")

    @staticmethod
    def check(cfg) -> None:
        """The central agent's optimizer checks its own settings when built (CLPO: one epoch, a loss to train);
        a central mode without a selection has nothing for an optimizer that trains."""
        RunCfg.check(cfg)
        trains = build.optimizer(cfg).trains
        if cfg.protocol.central_mode != "select" and trains:
            raise ConfigError(f"protocol.central_mode={cfg.protocol.central_mode} has no selection to train: use "
                              f"trainer.optimizer=none (got {cfg.trainer.optimizer})")


# ---- the protocol of a step, CLPO's masks ----------------------------------------------------------------------
def make_protocol(cfg, executors: list, step: int | str, verdict, samples: int) -> MaestroProtocol:
    """The MAESTRO rounds of the ``protocol`` section at ``step`` (request seeds keyed by run seed and step), the
    central agent ``central``, ``samples`` training outputs per slate."""
    p = cfg.protocol
    return MaestroProtocol(p, executors, "central", verdict, seed=f"{cfg.seed}/{step}", samples=samples,
                           sample_temperature=p.sample_temperature, central_max_new_tokens=p.central_max_new_tokens)


def cached_verdict():
    """``verdict(task, text)`` by the task's verifier, each (task, text) judged once."""
    seen: dict = {}

    def verdict(task: Task, text: str):
        if (task.id, text) not in seen:
            seen[(task.id, text)] = verify(task, text)
        return seen[(task.id, text)]

    return verdict


def span_mask(ends: list[int], span: tuple[int, int] | None, offset: int) -> list[float]:
    """1.0 for each token (ending at ``ends[i]`` in the completion text) that overlaps ``span`` (coordinates of the
    whole answer, whose first ``offset`` characters are the given prefix)."""
    if span is None:
        return [0.0] * len(ends)
    a, b = span[0] - offset, span[1] - offset
    return [float(start < b and end > a) for start, end in zip([0, *ends[:-1]], ends)]


def clpo_rows(tokenizer, choices: bool = False, chained: bool = False):
    """``extras(turn)`` for CLPO: decision and rationale token masks and the slate's mean candidate reward; with
    ``choices`` (the listwise L_choice) also every candidate's decision string (:func:`decision_strings`, ``chained``:
    the chained selection's) as token ids, ``choices`` / ``choice_mask`` [K, L], with its reward ``choice_reward``
    [K, 1] (empty for a row without decision tokens)."""

    def extras(turn: Turn) -> dict:
        ids = turn.completion.token_ids
        ends = [len(tokenizer.decode(ids[:i + 1], skip_special_tokens=True)) for i in range(len(ids))]
        reason, decision = central_spans(turn.answer)
        offset = len(turn.completion.request.prefix)
        d = span_mask(ends, decision, offset)
        r = [x * (1 - y) for x, y in zip(span_mask(ends, reason, offset), d)]
        rewards = turn.meta["slate_rewards"]
        out = {"decision": d, "rationale": r, "slate_mean": sum(rewards) / len(rewards)}
        if choices:
            first = d.index(1.0) if 1.0 in d else None
            start = offset + (ends[first - 1] if first else 0)  # where the first decision token starts
            lead = turn.answer[start:decision[0]] if first is not None and decision[0] > start else ""
            texts = decision_strings(turn.meta, chained, lead) if first is not None else []
            out.update(choice_tensors([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts],
                                      rewards if texts else []))
        return out

    return extras


def decision_strings(meta: dict, chained: bool, lead: str = "") -> list[str]:
    """The decision string of every candidate k = 1..K of a central sample's slate (Eq. 6's "decision tokens: the
    choice and its corresponding answer"), as the sample would write it after its rationale: ``lead`` (the text of
    its first decision token before ``Chosen``, if any), ``Chosen: k``, then ``Final: \\boxed{a_k}`` with a_k the
    candidate's final answer (``meta["slate_finals"]``, displayed order; '' where none was found). A chained
    selection (``chained``) generates only the number after the given ``Chosen: Candidate ``: the strings are
    ``1`` … ``K``."""
    k = len(meta["slate_rewards"])
    if chained:
        return [str(j) for j in range(1, k + 1)]
    finals = meta["slate_finals"]
    if len(finals) != k:
        raise ValueError(f"a slate of {k} candidates with {len(finals)} final answers")
    return [f"{lead}Chosen: {j}\nFinal: \\boxed{{{a or ''}}}" for j, a in enumerate(finals, 1)]


def choice_tensors(token_ids: list[list[int]], rewards: list[float]) -> dict:
    """``choices`` / ``choice_mask`` [K, L] (token ids, 0-padded / 1 on real tokens) and ``choice_reward`` [K, 1]."""
    width = max((len(t) for t in token_ids), default=0)
    ids, mask = torch.zeros(len(token_ids), width, dtype=torch.long), torch.zeros(len(token_ids), width)
    for k, t in enumerate(token_ids):
        ids[k, :len(t)], mask[k, :len(t)] = torch.tensor(t, dtype=torch.long), 1.0
    return {"choices": ids, "choice_mask": mask,
            "choice_reward": torch.tensor(rewards, dtype=torch.float32).reshape(len(token_ids), 1)}


def note_finals(verdict):
    """A rollout phase's ``after``: each central sample's ``meta["slate_finals"]``, the final answers of the
    candidates it was shown (displayed order; what :func:`decision_strings` writes after ``Final:``)."""

    def after(episodes: list[Episode]) -> dict:
        for ep in episodes:
            for t in ep.turns:
                if t.label == CENTRAL_SAMPLE:
                    shown = [ep.turns[t.refs[f"candidate_{j}"]] for j in range(_slate_size(t))]
                    t.meta["slate_finals"] = [verdict(ep.task, c.text).extracted for c in shown]
        return {}

    return after


def _slate_size(turn: Turn) -> int:
    return sum(1 for k in turn.refs if k.startswith("candidate_"))


# ---- the loop ---------------------------------------------------------------------------------------------------
def step_of(loop: Loop, step: int, tasks: list[Task], executors: list, reward) -> tuple[list[Episode], dict]:
    """The MAESTRO rounds on the step's questions (G training samples per slate unless nothing trains), the slate
    reward (and the executors' verifier reward), then the central agent's update (one slate per group, kept in one
    micro-batch; CLPO's masks as extras) and, with ``protocol.train_executors``, GRPO of the executors."""
    cfg, central = loop.cfg, loop.optimizer
    verdict = cached_verdict()
    proto = make_protocol(cfg, executors, step, verdict, cfg.protocol.central_samples if central.trains else 0)
    updates = [Update(agents=["central"], spec=central_spec(loop.store.tokenizer("central"), central,
                                                              cfg.protocol.central_chain))]
    if trained := [a for a in executors if a is not None]:
        updates.append(Update(agents=trained, optimizer=OPTIMIZERS.get(EXECUTOR_OPTIMIZER)(cfg.trainer)))

    def metrics(episodes: list[Episode]) -> dict:
        sampled = [t.reward for e in episodes for t in e.turns if t.label == CENTRAL_SAMPLE]
        return {"accuracy": mean(verdict(ep.task, ep.meta[FINAL]).score >= 1.0 for ep in episodes),
                **maestro_metrics([ep.meta[ROUNDS] for ep in episodes], cfg.protocol.rounds),
                "samples": {"reward": mean(sampled)}}

    listwise = set(CHOICE_EXTRAS) <= central.row_extras  # every candidate's decision scored (CLPO's listwise form)
    after = note_finals(verdict) if listwise and not cfg.protocol.central_chain else None  # what they end with
    return loop.run_step(step, [Phase("rollout", loop.batch(tasks, step), proto.program, reward, after=after)],
                         updates, metrics=metrics)


# how MAESTRO learns: the central agent with trainer.optimizer (MaestroCfg's default: CLPO), one slate's G samples a
# group kept in one micro-batch, with the row masks the optimizer reads; the executors (protocol.train_executors)
# with GRPO on their candidates, grouped by prompt
EXECUTOR_OPTIMIZER = "grpo"


def central_spec(tokenizer, optimizer: Optimizer, chained: bool) -> UpdateSpec:
    """The central agent's rows: one group per slate (its G samples), kept in one micro-batch; the per-row masks
    of :func:`clpo_rows` when the optimizer reads them (with every candidate's decision string for CLPO's
    listwise L_choice)."""
    slate = lambda t: t.meta["slate"]  # noqa: E731
    listwise = set(CHOICE_EXTRAS) <= optimizer.row_extras
    extras = clpo_rows(tokenizer, listwise, chained) if optimizer.row_extras else None
    return UpdateSpec(group_by=slate, keep_together=slate, extras=extras)


def reward_source(cfg):
    """The slate reward of the central samples (metrics under ``samples``) and, when the executors train, their
    candidates' verifier reward (``executor_accuracy``)."""
    central = build_sources([{"name": "slate", "label": CENTRAL_SAMPLE, "credit_refs": ["rationale"],
                              "on_parse_failure": cfg.reward.on_parse_failure,
                              "rationale_weight": cfg.reward.rationale_weight}])
    if not cfg.protocol.train_executors:
        return labelled(central, section="samples")
    executors = build_sources([{"name": "verifier", "labels": [EXECUTION]}])
    return weighted_sum([(1.0, labelled(central, section="samples")), (1.0, labelled(executors, "executor_"))])


def main(cfg, command_line: list[str] | None = None) -> None:
    n, d = cfg.n_agents, cfg.data
    executors = [f"exec{i}" for i in range(n)] if cfg.protocol.train_executors else [None] * n
    with Loop(cfg, agents=["central", *[a for a in executors if a]], command_line=command_line) as loop:
        tasks = loop.tasks(lambda: load_tasks("gsm8k", "train", data_root=d.data_root, source=d.source))
        reward = reward_source(cfg)
        for step in loop.steps():
            loop.end_step(step, *step_of(loop, step, tasks, executors, reward))
