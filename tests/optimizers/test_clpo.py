"""CLPO (selfevo.optimizers.clpo): every term against hand-worked numbers (degenerate cases included), slates kept
whole, and the ``clpo`` optimizer on a tiny fp32 model (only the central adapter moves; Eq. 8 reported)."""
import math

import pytest
import torch

from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, ClpoCfg, Samples
from selfevo.optimizers.clpo import (candidate_rows, choice_advantages, join, listwise_choice, sampled_choice,
                                     candidate_layout, slate_steps, slate_terms)
from selfevo.optimizers.objectives import slate_advantages
from selfevo.policy import SeqBatch
from selfevo.policy.packing import SHARED_PREFIX, group_prefixes


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


# ---- Eq. 6: the sum over candidates (listwise) and its sampled form, by hand --------------------------------------
def logit_ascent(loss_of, pi):
    """−∂L/∂z at logits z = log π (one token per decision, one softmax over the candidates)."""
    z = torch.tensor(pi).log().requires_grad_(True)
    loss_of(torch.log_softmax(z, -1)).backward()
    return (-z.grad).tolist()


def test_listwise_choice_is_eq6_by_hand():
    pi, r = [0.1, 0.8, 0.1], torch.tensor([1.0, 0.0, 0.0])
    a = slate_advantages(r)  # A = r − r̄ = (2/3, −1/3, −1/3)
    assert a.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    ones = torch.ones(1, 3)
    # L = −Σ_k A_k log π_k = −(2/3 ln 0.1 − 1/3 ln 0.8 − 1/3 ln 0.1) = (ln 0.8 − ln 0.1) / 3 = ln 8 / 3 = ln 2
    logp = torch.tensor(pi).log()
    assert float(listwise_choice(logp[None], a, ones)) == pytest.approx(math.log(2))
    # ∂L/∂z_j = −A_j + π_j Σ_k A_k = −A_j (Σ_k A_k = 0): every candidate pushed by its own advantage
    assert logit_ascent(lambda lp: listwise_choice(lp[None], a, ones), pi) == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    # the sampled form, one decision k ~ π: E[−A_k ∇log π_k]; ascent_j = π_j (A_j − Σ_k π_k A_k), Σ_k π_k A_k = −0.7/3
    # → (0.1·0.9, 0.8·(−0.1), 0.1·(−0.1)) = (0.09, −0.08, −0.01): Eq. 6's terms weighted by π_k, another direction
    expected = [0.0, 0.0, 0.0]
    for k, p in enumerate(pi):
        g = logit_ascent(lambda lp: sampled_choice(lp[k][None], a[k][None], torch.ones(1, dtype=torch.bool)), pi)
        expected = [e + p * x for e, x in zip(expected, g)]
    assert expected == pytest.approx([0.09, -0.08, -0.01], abs=1e-6)


def test_listwise_choice_degenerate_cases():
    pi = [0.1, 0.8, 0.1]
    ones = torch.ones(1, 3)
    equal = slate_advantages(torch.ones(3))  # all rewards equal: A = 0, no signal
    assert float(listwise_choice(torch.tensor(pi).log()[None], equal, ones)) == 0.0
    assert logit_ascent(lambda lp: listwise_choice(lp[None], equal, ones), pi) == [0.0, 0.0, 0.0]
    one = slate_advantages(torch.tensor([1.0]))  # one candidate: A = r − r = 0
    assert float(listwise_choice(torch.tensor([[-0.3]]), one, torch.ones(1, 1))) == 0.0
    ties = slate_advantages(torch.tensor([1.0, 1.0, 0.0]))  # two correct candidates: A = (1/3, 1/3, −2/3)
    assert logit_ascent(lambda lp: listwise_choice(lp[None], ties, ones), pi) == pytest.approx([1 / 3, 1 / 3, -2 / 3])
    # G rationales: the mean over those with a scored candidate (row 1 has none: left out, not a zero in the mean)
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-9.0, -9.0, -9.0], [-0.5, -1.5, -0.5]])
    mask = torch.tensor([[1.0, 1, 1], [0, 0, 0], [1, 1, 0]])
    a = torch.tensor([0.5, -0.25, -0.25])
    want = (-(0.5 * -1.0 - 0.25 * -2.0 - 0.25 * -3.0) - (0.5 * -0.5 - 0.25 * -1.5)) / 2  # = (−0.75 − 0.125) / 2
    assert float(listwise_choice(logp, a, mask)) == pytest.approx(want)
    assert float(listwise_choice(logp, a, torch.zeros(3, 3))) == 0.0  # nothing scored: 0, no division by zero


def test_candidate_rows_by_hand():
    # two rows of one slate (prompt 7 7, then rationale, then decision tokens) and a row without a decision
    ids = torch.tensor([[7, 7, 1, 2, 30, 31, 0], [7, 7, 3, 40, 41, 42, 9], [7, 7, 5, 6, 0, 0, 0]])
    attn = (torch.arange(7) < torch.tensor([6, 7, 4])[:, None]).long()
    loss = attn.float() * (torch.arange(7) >= 2)
    decision = torch.zeros(3, 7)
    decision[0, 4:6], decision[1, 3:6] = 1, 1
    choices = torch.tensor([[[50, 51], [60, 0], [0, 0]]] * 3)  # candidates "50 51" and "60" (a padded third slot)
    mask = (choices > 0).float()
    batch = SeqBatch(ids, attn, loss, {"decision": decision, "choices": choices, "choice_mask": mask,
                                       "choice_reward": torch.tensor([[[1.0], [0.0], [0.0]]] * 3),
                                       "temperature": torch.tensor([0.7, 0.9, 0.7])})
    out = candidate_rows(batch, [0, 0, 0])
    rows = [out.input_ids[i][out.attention_mask[i] > 0].tolist() for i in range(4)]
    assert rows == [[7, 7, 1, 2, 50, 51], [7, 7, 1, 2, 60], [7, 7, 3, 50, 51], [7, 7, 3, 60]]
    assert [out.input_ids[i][out.loss_mask[i] > 0].tolist() for i in range(4)] == [[50, 51], [60], [50, 51], [60]]
    assert out.extras["choice_adv"].tolist() == [0.5, -0.5, 0.5, -0.5]  # r̄ over the two real candidates
    assert out.extras["parent"].tolist() == [0, 0, 1, 1] and out.extras["choice_weight"].tolist() == [0.5] * 4
    assert out.extras["temperature"].tolist() == pytest.approx([0.7, 0.7, 0.9, 0.9])  # scored as the parent row
    with pytest.raises(ValueError, match="clpo.choice_form=listwise needs"):
        candidate_rows(SeqBatch(ids, attn, loss, {"decision": decision}), [0, 0, 0])
    own = SeqBatch(ids, attn, loss, {"decision": decision}, [0, 0, 0])
    both = join(own, out.with_groups([("c", 0)] * 2 + [("c", 1)] * 2))  # candidate rows after the batch's own
    assert both.input_ids.shape == (7, 7) and both.groups[3:] == [("c", 0)] * 2 + [("c", 1)] * 2
    assert torch.equal(both.input_ids[:3], ids) and torch.equal(both.input_ids[3:, :6], out.input_ids)
    assert both.extras["choice_adv"].tolist() == [0.0] * 3 + [0.5, -0.5, 0.5, -0.5]  # 0 where a side lacks it
    assert both.extras["decision"][3:].sum() == 0 and torch.equal(both.extras["decision"][:3], decision)
    empty = candidate_rows(SeqBatch(ids, attn, loss, {**batch.extras, "decision": torch.zeros(3, 7)}), [0, 0, 0])
    assert empty.input_ids.shape[0] == 0  # no row decided: no candidate rows


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


SLATES = {"Slate one?": [("2", 1.0), ("3", 0.0)],  # each slate's candidates: (final answer, reward)
          "Slate two?": [("5", 0.0), ("6", 1.0), ("7", 0.0), ("8", 0.0)]}


def decision_text(k, answer):
    return f"\nChosen: {k}\nFinal: \\boxed{{{answer}}}"


def completion_grid(batch, prompts, values):
    """[B, T] zeros with each row's ``values`` placed on its completion tokens (after its prompt)."""
    out = torch.zeros_like(batch.loss_mask)
    for i, (p, v) in enumerate(zip(prompts, values)):
        out[i, len(p):len(p) + len(v)] = torch.tensor(v)
    return out


def clpo_samples(store, context: str = "", reasoning: str = ""):
    """ROWS as the central agent's samples; ``context`` goes before each slate's prompt, ``reasoning`` after each
    rationale (longer prompts, longer rationales)."""
    tok = store.backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts, comps, dec, rat = [], [], [], []
    for prompt, rationale, decision, _ in ROWS:
        r, d = ids(rationale + reasoning), ids(decision)
        prompts.append(ids(context + prompt))
        comps.append(r + d)
        rat.append([1.0] * len(r) + [0.0] * len(d))
        dec.append([0.0] * len(r) + [1.0] * len(d))
    batch = SeqBatch.build(prompts, comps, tok.pad_token_id)

    cands = [[ids(decision_text(k, a)) for k, (a, _) in enumerate(SLATES[row[0]], 1)] for row in ROWS]
    width = max(len(c) for row in cands for c in row)
    choices, mask = torch.zeros(4, 4, width, dtype=torch.long), torch.zeros(4, 4, width)
    reward = torch.zeros(4, 4, 1)
    for i, row in enumerate(cands):
        for k, c in enumerate(row):
            choices[i, k, :len(c)], mask[i, k, :len(c)] = torch.tensor(c), 1.0
            reward[i, k, 0] = SLATES[ROWS[i][0]][k][1]
    batch = batch.with_extras(decision=completion_grid(batch, prompts, dec),
                              rationale=completion_grid(batch, prompts, rat),
                              slate_mean=torch.tensor([0.5, 0.5, 0.25, 0.25]),
                              choices=choices, choice_mask=mask, choice_reward=reward)
    return Samples(batch, torch.tensor([r[3] for r in ROWS]), ["s1", "s1", "s2", "s2"])


def snapshot(store):
    return {n: p.detach().clone() for n, p in store.backbones["tiny-random"].model.named_parameters()}


def test_clpo_trains_only_the_central_adapter_and_reports_eq8(make_store):
    store = make_store(agents=("central", "other"), micro_batch=2)
    samples = clpo_samples(store)
    opt = OPTIMIZERS.get("clpo")(TrainerCfg(kl_coef=0.1, kl_estimator="k3"), ClpoCfg(lambda_rank=0.5,
                                                                                       lambda_ent=0.01,
                                                                                       choice_form="sampled"))
    before = snapshot(store)
    with torch.no_grad():
        logp, ent = store.token_logprobs("central", samples.batch, entropy=True)
    stats = opt(store, "central", samples)
    after = snapshot(store)
    moved = lambda who: sum(float((after[n] - before[n]).abs().sum()) for n in before  # noqa: E731
                            if ("lora_" in n and f".{who}." in n) or (who == "base" and "lora_" not in n))
    assert moved("central") > 0 and moved("other") == 0 and moved("base") == 0
    assert store.versions == {"central": 1, "other": 0} and stats["parameter_updates"] == 1 and stats["slates"] == 2
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


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_clpo_listwise_choice_scores_every_candidate_after_each_rationale(make_store):
    """The default L_choice is Eq. 6 as written: each row's rationale, then every candidate's decision string of its
    slate, scored (K rows sharing the row's prefix), −Σ_k A_k log π(d_k | ...), averaged over the slate's rows with a
    decision, then over the slates; KL and entropy stay token means over the sampled rows only."""
    store = make_store(agents=("central",), micro_batch=2)
    samples = clpo_samples(store)
    tok = store.backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    # by hand: row i's prompt and rationale, then candidate k's decision (the scored tokens)
    per_slate = {}
    for prompt, rationale, decision, _ in ROWS:
        if not decision:
            continue  # no decision tokens: no candidate rows
        answers = SLATES[prompt]
        rows = SeqBatch.build([ids(prompt) + ids(rationale)] * len(answers),
                              [ids(decision_text(k, a)) for k, (a, _) in enumerate(answers, 1)], tok.pad_token_id)
        with torch.no_grad():
            seq = store.token_logprobs("central", rows).sum(-1)
        a = slate_advantages(torch.tensor([r for _, r in answers]))
        per_slate.setdefault(prompt, []).append(float(listwise_choice(seq[None], a, torch.ones(1, len(answers)))))
    want = sum(sum(v) / len(v) for v in per_slate.values()) / 2  # slate one: 2 rationales; slate two: 1
    with torch.no_grad():
        logp, ent = store.token_logprobs("central", samples.batch, entropy=True)
    listwise = OPTIMIZERS.get("clpo")(TrainerCfg(kl_coef=0.1), ClpoCfg(lambda_ent=0.01))(store, "central", samples)
    assert listwise["choice"] == pytest.approx(want, rel=1e-4) and listwise["choice_rows"] == 2 + 2 + 4
    mask = samples.batch.loss_mask
    assert listwise["entropy"] == pytest.approx(float((ent * mask).sum() / mask.sum()), rel=1e-4)
    assert listwise["kl"] == pytest.approx(0.0, abs=1e-6)
    # the sampled form on the same rows gives another number (a fresh store: the same starting policy)
    store2 = make_store(agents=("central",), micro_batch=2)
    sampled = OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice_form="sampled"))(store2, "central", samples)
    x, adv = samples.batch.extras, samples.rewards - samples.batch.extras["slate_mean"]
    want_sampled = sum(float(slate_terms(logp[r], x["decision"][r], x["rationale"][r], adv[r], samples.rewards[r])[0])
                       for r in ([0, 1], [2, 3])) / 2
    assert sampled["choice"] == pytest.approx(want_sampled, rel=1e-4) and "choice_rows" not in sampled
    assert abs(sampled["choice"] - listwise["choice"]) > 1e-3


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
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
    stats = OPTIMIZERS.get("clpo")(TrainerCfg(train_batch=2), ClpoCfg(choice_form="sampled"))(store, "central", plain)
    assert stats["rank"] == 0.0 and stats["parameter_updates"] == 2 and stats["slates"] == 2
    with pytest.raises(ValueError, match="needs every row's candidate decisions"):  # listwise without candidates
        OPTIMIZERS.get("clpo")(TrainerCfg())(store, "central", plain)
    ablated = OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice=False, lambda_ent=0.0))(store, "central", plain)
    assert ablated["loss"] == pytest.approx(0.0, abs=1e-7) and "choice_rows" not in ablated  # w/o L_choice: no rows


def test_clpo_says_which_row_extras_it_reads_and_refuses_an_empty_loss():
    """What the maestro recipe asks of the optimizer object instead of its name: the per-row extras it reads (the
    listwise L_choice also reads every candidate's decision string) and whether it trains at all."""
    from selfevo.config import ConfigError
    from selfevo.optimizers.clpo import CHOICE_EXTRAS, ROW_MASKS

    listwise, sampled = (OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice_form=f)) for f in ("listwise", "sampled"))
    assert listwise.row_extras == {*ROW_MASKS, *CHOICE_EXTRAS} and sampled.row_extras == set(ROW_MASKS)
    assert OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice=False)).row_extras == set(ROW_MASKS)
    assert listwise.trains and not OPTIMIZERS.get("grpo")(TrainerCfg()).row_extras
    with pytest.raises(ConfigError, match="CLPO would train nothing"):
        OPTIMIZERS.get("clpo")(TrainerCfg(), ClpoCfg(choice=False, rank=False))


LONG_CONTEXT = "Candidate solutions follow, each with its reasoning and its final answer. " * 8


@pytest.mark.slow  # four listwise updates on the tiny model (about 4 s on the AVX2 machine)
@pytest.mark.parametrize("context,reasoning,by_slate", [(LONG_CONTEXT, "", True), ("", LONG_CONTEXT, False)])
def test_clpo_packs_a_slate_with_its_candidate_rows_the_cheaper_way(make_store, context, reasoning, by_slate):
    """With trainer.shared_prompts and a long slate prompt, a slate's rows and their candidate rows run as one
    micro-batch, the prompt once (one packed row per slate); with rationales much longer than the prompt, each
    row's candidate rows run apart, sharing its prompt and rationale (the cheaper layout). Either way the same
    terms, loss and gradient norm as unpacked (no LoRA dropout here: packed rows would share a dropout mask)."""
    stats, shapes = [], []
    for shared in (False, True):
        torch.manual_seed(0)  # PEFT draws the LoRA A matrices from the global generator
        store = make_store(agents=("central",), micro_batch=2, shared_prompts=shared)
        samples = clpo_samples(store, context, reasoning)
        stats.append(OPTIMIZERS.get("clpo")(TrainerCfg(kl_coef=0.1), ClpoCfg(lambda_ent=0.01))(
            store, "central", samples))
        shapes.append(store.shapes.counts["train"])
    for key in ("loss", "grad_norm", "choice", "rank", "entropy"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-4, abs=1e-6), key
    assert stats[1]["choice_rows"] == stats[0]["choice_rows"] == 8
    micro = [sorted(k[0] for k, (n, _) in c.items() for _ in range(n)) for c in shapes]
    assert micro[0] == [2, 2, 2, 2, 4]  # unpacked: each slate's 2 rows, then each row's candidate rows apart
    run = [sum(k[0] * total for k, (_, total) in c.items()) for c in shapes]  # token positions (rows x width)
    assert run[1] < run[0]
    b = samples.batch
    _, prefixes, groups = candidate_layout(b, candidate_rows(b, [0, 0, 1, 1]), [0, 0, 1, 1], micro_batch=2)
    prompt_len = len(store.tokenizer("central")(context + "Slate two?", add_special_tokens=False)["input_ids"])
    # slate two's 4 candidate rows (one row's): in the slate's micro-batch sharing only the slate's prompt, or apart
    # sharing the row's prompt and rationale
    if by_slate:
        assert (prefixes[4:] == prompt_len).all() and groups[4:] == [1] * 4
        assert micro[1] == [1, 1]  # one micro-batch and one packed row per slate: its prompt once
    else:
        assert (prefixes[4:] > prompt_len).all() and groups[4:] == [("candidates of", 2)] * 4


def chained_samples(store):
    """A chained selection's rows (``protocol.central_chain``), two slates of two samples: each sample a rationale
    row (the slate's prompt, then its rationale; L_rank) and a decision row (the prompt, the rationale and
    ``Chosen: Candidate`` given, then the number; L_choice over every candidate's number), rationale rows first."""
    tok = store.backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    slates = [(LONG_CONTEXT + "Slate one?", [(" cand 1 adds up.", "1", 1.0), (" cand 2 is off.", "2", 0.0)],
               [1.0, 0.0]),
              (LONG_CONTEXT + "Slate two?", [(" cand 1 looks fine.", "1", 0.0), (" maybe the third", "3", 1.0)],
               [0.0, 0.0, 1.0])]
    prompts, comps, dec, rat, rewards, groups, shown = [], [], [], [], [], [], []
    for s, (prompt, samples, cand_rewards) in enumerate(slates):
        p = ids(prompt)
        for rationale, _, reward in samples:
            prompts.append(p)
            comps.append(ids(rationale))
            rat.append([1.0] * len(comps[-1]))
            dec.append([0.0] * len(comps[-1]))
            rewards.append(reward)
            groups.append(s)
            shown.append([])
        for rationale, pick, reward in samples:
            prompts.append(p + ids(rationale) + ids(" Chosen: Candidate"))
            comps.append(ids(pick))
            rat.append([0.0] * len(comps[-1]))
            dec.append([1.0] * len(comps[-1]))
            rewards.append(reward)
            groups.append(s)
            shown.append(cand_rewards)
    batch = SeqBatch.build(prompts, comps, tok.pad_token_id)

    n, k = len(prompts), 3
    choices, mask, reward = torch.zeros(n, k, 1, dtype=torch.long), torch.zeros(n, k, 1), torch.zeros(n, k, 1)
    for i, r in enumerate(shown):
        for j, value in enumerate(r):
            choices[i, j, 0], mask[i, j, 0], reward[i, j, 0] = ids(str(j + 1))[0], 1.0, value
    means = [sum(r) / len(r) for r in (slates[g][2] for g in groups)]
    batch = batch.with_extras(decision=completion_grid(batch, prompts, dec),
                              rationale=completion_grid(batch, prompts, rat), slate_mean=torch.tensor(means),
                              choices=choices, choice_mask=mask, choice_reward=reward)
    return Samples(batch, torch.tensor(rewards), groups)


@pytest.mark.slow  # three listwise updates on the tiny model
def test_clpo_packs_a_chained_slate_by_its_shared_prompt(make_store):
    """A chained selection's decision rows carry their rationale before their scored number, so by each row's
    prompt a slate runs as one packed row per decision row plus one for its rationale rows. By the slate's common
    prefix (its prompt) the slate's rows and all their candidate rows run as one packed row, in the update and in
    the reference's scoring pass: fewer positions, the same terms, loss and gradient norm as unpacked."""
    stats, train, score = [], [], []
    for shared in (False, True):
        torch.manual_seed(0)
        store = make_store(agents=("central",), micro_batch=4, shared_prompts=shared)
        samples = chained_samples(store)
        stats.append(OPTIMIZERS.get("clpo")(TrainerCfg(kl_coef=0.1), ClpoCfg(lambda_ent=0.01))(
            store, "central", samples))
        train.append(store.shapes.counts["train"])
        score.append(store.shapes.counts["score"])
    for key in ("loss", "grad_norm", "choice", "rank", "kl", "entropy"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-4, abs=1e-6), key
    assert stats[1]["choice_rows"] == stats[0]["choice_rows"] == 2 * 2 + 2 * 3
    assert sorted(k[0] for k, (n, _) in train[1].items() for _ in range(n)) == [1, 1]  # a packed row per slate
    assert sorted(k[0] for k, (n, _) in score[1].items() for _ in range(n)) == [1, 1]
    b = samples.batch
    slates = [0, 0, 0, 0, 1, 1, 1, 1]
    prompt_len = len(store.tokenizer("central")(LONG_CONTEXT + "Slate one?", add_special_tokens=False)["input_ids"])
    own, prefixes, groups = candidate_layout(b, candidate_rows(b, slates), slates, micro_batch=4)
    assert (own[:4] == prompt_len).all() and (prefixes[:4] == prompt_len).all() and groups[:4] == [0] * 4
    own, prefixes, groups = candidate_layout(b, candidate_rows(b, slates), slates, micro_batch=4,
                                             share_slate_prefix=False)
    assert (own[2:4] > prompt_len).all() and (prefixes[:4] > prompt_len).all()  # each decision row's own prompt


@pytest.mark.slow  # four updates on the tiny model
@pytest.mark.parametrize("name", ["grpo", "sft"])
def test_other_selectors_pack_a_chained_slate_by_its_shared_prompt(make_store, name):
    """The baselines that train the central agent (GRPO, SFT) on a chained selection's rows: a slate kept in one
    micro-batch shares the tokens its rows all begin with (``packing.group_prefixes``, as ``Samples.from_turns``
    sets for ``keep_together`` rows), so each slate runs as one packed row instead of one per decision row plus
    one for its rationale rows; the loss and gradient norm are those of the unpacked rows."""
    stats, train = [], []
    for shared in (False, True):
        torch.manual_seed(0)
        store = make_store(agents=("central",), micro_batch=4, shared_prompts=shared)
        s = chained_samples(store)
        b = s.batch.with_groups(s.groups)
        prefixes = group_prefixes(b.input_ids, b.attention_mask, b.loss_mask, b.groups)
        rows = SeqBatch(b.input_ids, b.attention_mask, b.loss_mask, {SHARED_PREFIX: prefixes}, b.groups)
        stats.append(OPTIMIZERS.get(name)(TrainerCfg(kl_coef=0.1))(store, "central", Samples(rows, s.rewards,
                                                                                              s.groups)))
        train.append(store.shapes.counts["train"])
    for key in ("loss", "grad_norm"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-4, abs=1e-6), key
    packed = sorted(k[0] for k, (n, _) in train[1].items() for _ in range(n))
    by_row = sorted(k[0] for k, (n, _) in train[0].items() for _ in range(n))
    if name == "grpo":
        assert packed == [1, 1] and by_row == [4, 4]  # a packed row per slate; unpacked, its four rows
    else:  # SFT trains the rows with reward 1, a rationale row and its decision row per slate: one packed row each
        assert packed == [2] and by_row == [4]
