"""CLPO (selfevo.optimizers.clpo): every term against hand-worked numbers (degenerate cases included), slates kept
whole, and the ``clpo`` optimizer on a tiny fp32 model (only the central adapter moves; Eq. 8 reported)."""
import math

import pytest
import torch

from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, ClpoCfg, Samples
from selfevo.optimizers.clpo import choice_advantages, slate_steps, slate_terms
from selfevo.policy import SeqBatch


# ---- CLPO terms, by hand ------------------------------------------------------------------------------------------
LOGP = torch.tensor([[-1.0, -2.0, -0.5, -0.5],
                     [-0.5, -1.0, -3.0, -1.0],
                     [-2.0, -0.2, -0.4, -0.6]])
RATIONALE = torch.tensor([[1.0, 1, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
DECISION = torch.tensor([[0.0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]])  # row 2 made no decision


def lse(*xs):
    return math.log(sum(math.exp(x) for x in xs))


def test_choice_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0])
    assert choice_advantages(r, [0, 0, 0], torch.full((3,), 1 / 3)).tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    # without the slate's candidate mean: the group mean of the rows; a group of equal rewards gets 0
    got = choice_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["a", "a", "b", "b"])
    assert got.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert choice_advantages(torch.tensor([0.7]), ["solo"]).tolist() == [0.0]  # one candidate: A = r - r = 0


def test_slate_terms_by_hand():
    adv, rewards = torch.tensor([2 / 3, -1 / 3, -1 / 3]), torch.tensor([1.0, 0.0, 0.0])
    l_choice, l_rank = slate_terms(LOGP, DECISION, RATIONALE, adv, rewards)
    # decision log-probs: row 0: -0.5 - 0.5 = -1; row 1: -3 - 1 = -4; row 2 has none (left out, 2 rows count)
    assert float(l_choice) == pytest.approx(-(2 / 3 * -1.0 + -1 / 3 * -4.0) / 2)  # = -1/3
    # rationale scores (mean log-prob): s = (-1.5, -0.75, -2.0); order by reward: row 0, then the tie 1, 2
    s0, s1, s2 = -1.5, -0.75, -2.0
    assert float(l_rank) == pytest.approx(-((s0 - lse(s0, s1, s2)) + (s1 - lse(s1, s2))))
    # ties follow the order ListMLE is given: shuffled (2, 1, 0) ranks row 2 before row 1
    _, shuffled = slate_terms(LOGP, DECISION, RATIONALE, adv, rewards, order=[2, 1, 0])
    assert float(shuffled) == pytest.approx(-((s0 - lse(s0, s2, s1)) + (s2 - lse(s2, s1))))


def test_slate_terms_degenerate_cases():
    zeros = torch.zeros(3)
    l_choice, _ = slate_terms(LOGP, DECISION, RATIONALE, choice_advantages(torch.ones(3), [0, 0, 0]), torch.ones(3))
    assert float(l_choice) == 0.0  # all-equal rewards: zero advantage, no choice signal
    _, tied = slate_terms(LOGP, DECISION, RATIONALE, zeros, torch.ones(3))
    assert float(tied) == 0.0  # ... and no order to rank: L_rank 0 (not a random order of ties)
    one_c, one_r = slate_terms(LOGP[:1], DECISION[:1], RATIONALE[:1], zeros[:1], torch.ones(1))
    assert (float(one_c), float(one_r)) == (0.0, 0.0)  # one candidate: A = 0 and a list of one has ListMLE loss 0
    empty = RATIONALE.clone()
    empty[1] = 0  # row 1 has no rationale tokens: left out of the list
    _, l_rank = slate_terms(LOGP, DECISION, empty, zeros, torch.tensor([1.0, 0.0, 0.0]))
    assert float(l_rank) == pytest.approx(-(-1.5 - lse(-1.5, -2.0)))
    no_dec, _ = slate_terms(LOGP, torch.zeros_like(DECISION), RATIONALE, torch.ones(3), torch.ones(3))
    assert float(no_dec) == 0.0  # nobody decided: no choice term (and no division by zero)
    logp = LOGP.clone().requires_grad_(True)
    c, r = slate_terms(logp, DECISION, RATIONALE, torch.tensor([1.0, -1.0, 0.0]), torch.tensor([1.0, 0.0, 0.0]))
    (c + r).backward()
    assert torch.all(logp.grad[DECISION + RATIONALE == 0] == 0)  # only decision and rationale tokens get gradient
    logp.grad = None
    c, _ = slate_terms(logp, DECISION, RATIONALE, torch.tensor([1.0, -1.0, 0.0]), torch.ones(3))
    c.backward()
    assert torch.all(logp.grad[RATIONALE > 0] == 0)  # L_choice never touches the rationale


def test_slate_steps_keep_slates_whole():
    gen = torch.Generator().manual_seed(0)
    groups = [0, 0, 1, 1, 1, 2, 3, 3]
    steps = slate_steps(groups, 3, gen)
    assert sorted(i for s in steps for i in s) == list(range(8)) and all(len(s) >= 3 for s in steps[:-1])
    for g in set(groups):  # every slate lies in exactly one step, whole
        members = {i for i, x in enumerate(groups) if x == g}
        assert sum(members <= set(s) for s in steps) == 1
    assert slate_steps([0, 1, 1], 0, gen) == [[0, 1, 2]]


# ---- the clpo optimizer on a tiny model -----------------------------------------------------------------------------
ROWS = [  # (prompt, rationale, decision, reward) — two slates of two sampled central outputs
    ("Slate one?", " cand 1 adds up.", "\nChosen: 1\nFinal: \\boxed{2}", 1.0),
    ("Slate one?", " cand 2 is off.", "\nChosen: 2\nFinal: \\boxed{3}", 0.0),
    ("Slate two?", " cand 1 looks fine.", "\nChosen: 1\nFinal: \\boxed{5}", 0.0),
    ("Slate two?", " no idea", "", 0.0),
]


def clpo_samples(store):
    tok = store.backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts, comps, dec, rat = [], [], [], []
    for prompt, rationale, decision, _ in ROWS:
        r, d = ids(rationale), ids(decision)
        prompts.append(ids(prompt))
        comps.append(r + d)
        rat.append([1.0] * len(r) + [0.0] * len(d))
        dec.append([0.0] * len(r) + [1.0] * len(d))
    batch = SeqBatch.build(prompts, comps, tok.pad_token_id)

    def grid(values):
        out = torch.zeros_like(batch.loss_mask)
        for i, (p, v) in enumerate(zip(prompts, values)):
            out[i, len(p):len(p) + len(v)] = torch.tensor(v)
        return out

    batch = batch.with_extras(decision=grid(dec), rationale=grid(rat), slate_mean=torch.tensor([0.5, 0.5, 0.25, 0.25]))
    return Samples(batch, torch.tensor([r[3] for r in ROWS]), ["s1", "s1", "s2", "s2"])


def snapshot(store):
    return {n: p.detach().clone() for n, p in store.backbones["tiny-random"].model.named_parameters()}


def test_clpo_trains_only_the_central_adapter_and_reports_eq8(make_store):
    store = make_store(agents=("central", "other"), micro_batch=2)
    samples = clpo_samples(store)
    opt = OPTIMIZERS.get("clpo")(TrainerCfg(kl_coef=0.1, kl_estimator="k3"), ClpoCfg(lambda_rank=0.5,
                                                                                       lambda_ent=0.01))
    before = snapshot(store)
    with torch.no_grad():
        logp, ent = store.token_logprobs("central", samples.batch, entropy=True)
    stats = opt(store, "central", samples)
    after = snapshot(store)
    moved = lambda who: sum(float((after[n] - before[n]).abs().sum()) for n in before  # noqa: E731
                            if ("lora_" in n and f".{who}." in n) or (who == "base" and "lora_" not in n))
    assert moved("central") > 0 and moved("other") == 0 and moved("base") == 0
    assert store.versions == {"central": 1, "other": 0} and stats["optimizer_steps"] == 1 and stats["slates"] == 2
    # the terms it reports are Eq. 6-8 on the store's own log-probs (a fresh adapter: π = π_ref, KL = 0)
    x, adv = samples.batch.extras, samples.rewards - samples.batch.extras["slate_mean"]
    want_choice = sum(float(slate_terms(logp[r], x["decision"][r], x["rationale"][r], adv[r], samples.rewards[r])[0])
                      for r in ([0, 1], [2, 3])) / 2
    assert stats["choice"] == pytest.approx(want_choice, rel=1e-4)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    mask = samples.batch.loss_mask
    assert stats["entropy"] == pytest.approx(float((ent * mask).sum() / mask.sum()), rel=1e-4)
    assert stats["loss"] == pytest.approx(stats["choice"] + 0.5 * stats["rank"] + 0.1 * stats["kl"]
                                          - 0.01 * stats["entropy"], rel=1e-4)


def test_clpo_ablation_switches_and_defaults(make_store):
    store = make_store(agents=("central",), micro_batch=4)
    samples = clpo_samples(store)
    no_choice = OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice=False, lambda_rank=1.0, lambda_ent=0.0))(
        store, "central", samples)
    assert no_choice["loss"] == pytest.approx(1.0 * no_choice["rank"], rel=1e-5)
    no_rank = OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(rank=False, lambda_ent=0.0))(store, "central",
                                                                                          samples)
    assert no_rank["loss"] == pytest.approx(no_rank["choice"], rel=1e-5)
    # plain samples (no masks): every completion token is a decision token, no rationale, groups by prompt
    plain = Samples(SeqBatch(samples.batch.input_ids, samples.batch.attention_mask, samples.batch.loss_mask),
                    samples.rewards)
    stats = OPTIMIZERS.get("clpo")(TrainerCfg(train_batch=2))(store, "central", plain)
    assert stats["rank"] == 0.0 and stats["optimizer_steps"] == 2 and stats["slates"] == 2
