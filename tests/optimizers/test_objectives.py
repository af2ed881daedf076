"""Hand-worked checks of selfevo.optimizers.objectives (arithmetic written out in the comments)."""
import math

import pytest
import torch

from selfevo.optimizers import objectives as O

T = torch.tensor


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                          atol=tol, rtol=0)


# ---------------------------------------------------------------- KL estimators
def test_kl_estimators_by_hand():
    logp, ref = T([-1.0, -2.0]), T([-1.5, -1.0])
    # k1 = logp - ref = [0.5, -1.0]
    assert close(O.kl_k1(logp, ref), [0.5, -1.0])
    # k2 = 0.5 * d^2 = [0.5*0.25, 0.5*1.0] = [0.125, 0.5]
    assert close(O.kl_k2(logp, ref), [0.125, 0.5])
    # k3 with u = ref - logp = [-0.5, 1.0]: exp(u) - u - 1 = [0.606531 + 0.5 - 1, 2.718282 - 1 - 1]
    assert close(O.kl_k3(logp, ref), [0.1065307, 0.7182818])
    assert close(O.kl_estimate(logp, ref, "k3"), O.kl_k3(logp, ref))
    # clamp: k1 of d=30 clamped to 10
    assert close(O.kl_estimate(T([0.0]), T([-30.0]), "k1", clamp=10.0), [10.0])
    with pytest.raises(ValueError):
        O.kl_estimate(logp, ref, "k4")


def test_kl_zero_when_equal():
    x = T([-0.3, -4.0])
    for f in (O.kl_k1, O.kl_k2, O.kl_k3):
        assert close(f(x, x), [0.0, 0.0])


# ---------------------------------------------------------------- REINFORCE++
R = T([1.0, 0.0])
KL = T([[0.1, 0.2, 0.3], [0.4, 0.5, 9.9]])  # 9.9 sits off the mask and must be ignored
M = T([[1, 1, 1], [1, 1, 0]])


def test_kl_penalised_returns_by_hand():
    # beta = 0.5. Row 0 token rewards: -0.05, -0.10, -0.15 + 1 = 0.85 -> reverse cumsum 0.70, 0.75, 0.85
    #   (= r - beta * sum_{l>=t} kl_l: 1 - 0.5*0.6, 1 - 0.5*0.5, 1 - 0.5*0.3)
    # Row 1 (last completion token is t=1, reward 0): -0.20, -0.25 -> returns -0.45, -0.25, then 0 off the mask
    ret = O.kl_penalised_returns(R, KL, M, beta=0.5)
    assert close(ret, [[0.70, 0.75, 0.85], [-0.45, -0.25, 0.0]])


def test_reinforce_pp_whitened_by_hand():
    adv = O.reinforce_pp_advantages(R, KL, M, beta=0.5)
    # five masked values 0.70, 0.75, 0.85, -0.45, -0.25: sum 1.6, mean 0.32
    # deviations 0.38, 0.43, 0.53, -0.77, -0.57; squares 0.1444+0.1849+0.2809+0.5929+0.3249 = 1.528
    # population var 1.528/5 = 0.3056, std = sqrt(0.3056)
    std = math.sqrt(0.3056)
    want = [[0.38 / std, 0.43 / std, 0.53 / std], [-0.77 / std, -0.57 / std, 0.0]]
    assert close(adv, want)
    # not whitened: the raw returns
    assert close(O.reinforce_pp_advantages(R, KL, M, beta=0.5, whiten=False), [[0.70, 0.75, 0.85], [-0.45, -0.25, 0]])


def test_reinforce_pp_beta_zero_gives_reward_everywhere():
    # beta=0 (CoMAS Table 2): A_t = r on every completion token; whitened over tokens 1,1,1,0,0:
    # mean 0.6, deviations 0.4 (x3), -0.6 (x2), var (3*0.16 + 2*0.36)/5 = 1.2/5 = 0.24
    adv = O.reinforce_pp_advantages(R, None, M, beta=0.0)
    s = math.sqrt(0.24)
    assert close(adv, [[0.4 / s] * 3, [-0.6 / s, -0.6 / s, 0.0]])


def test_reinforce_pp_gamma_and_holes():
    # gamma 0.5, beta 0, reward 1 at the last token t=2: returns 0.25, 0.5, 1
    ret = O.kl_penalised_returns(T([1.0]), None, T([[1, 1, 1]]), gamma=0.5)
    assert close(ret, [[0.25, 0.5, 1.0]])
    # left padding: mask 0,1,1,0 -> reward 2 lands on t=2, returns [0, 2, 2, 0]
    ret = O.kl_penalised_returns(T([2.0]), None, T([[0, 1, 1, 0]]))
    assert close(ret, [[0.0, 2.0, 2.0, 0.0]])


def test_reinforce_pp_all_masked_row():
    # the empty middle row gets zeros and does not move the statistics of the others
    rewards = T([1.0, 5.0, 0.0])
    mask = T([[1, 1], [0, 0], [1, 1]])
    adv = O.reinforce_pp_advantages(rewards, None, mask)
    # values 1,1,0,0: mean 0.5, std 0.5 -> +-1 (up to eps)
    assert close(adv, [[1, 1], [0, 0], [-1, -1]])
    assert close(O.reinforce_pp_advantages(T([3.0]), None, T([[0, 0]])), [[0.0, 0.0]])


def _reinforce_pp_float64(rewards, kl, mask, beta, groups):
    """Reference: REINFORCE++ returns and per-group whitening in plain float64 Python, straight from CoMAS Eq. 9-10."""
    out = [[0.0] * len(mask[0]) for _ in mask]
    for b, row in enumerate(mask):
        last = max(t for t, x in enumerate(row) if x)
        for t, x in enumerate(row):
            if x:
                out[b][t] = rewards[b] * (t <= last) - beta * sum(kl[b][u] for u in range(t, last + 1) if row[u])
    adv = [[0.0] * len(mask[0]) for _ in mask]
    for g in set(groups):
        cells = [(b, t) for b in range(len(mask)) if groups[b] == g for t in range(len(mask[0])) if mask[b][t]]
        vals = [out[b][t] for b, t in cells]
        if len(vals) < 2:
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for b, t in cells:
            adv[b][t] = (out[b][t] - mean) / (std + 1e-8) if std > 0 else 0.0
    return adv


def test_reinforce_pp_returns_with_kl_match_float64_over_long_rows():
    """Equal rewards with KL over 512-token rows, groups of 3, 2 and 1 rows (token-level whitening): the float64
    returns and whitening give the float64 reference to 1e-6 (float32 returns: off by 3.6e-4 here)."""
    gen = torch.Generator().manual_seed(0)
    B, L = 6, 512
    kl = (torch.rand(B, L, generator=gen, dtype=torch.float64) * 1e-4).float()  # small KL: a small spread to whiten
    mask = torch.ones(B, L)
    mask[1, 400:] = 0
    rewards, groups = [3.0] * B, ["a", "a", "a", "b", "b", "solo"]
    got = O.reinforce_pp_advantages(torch.tensor(rewards), kl, mask, beta=0.1, group_ids=groups)
    want = _reinforce_pp_float64(rewards, kl.double().tolist(), mask.tolist(), 0.1, groups)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6, rtol=0)


def test_reinforce_pp_per_group_whitening():
    # row 0 group "a": 0.70, 0.75, 0.85 (mean 0.76667); row 1 group "b": -0.45, -0.25 (mean -0.35, std 0.1 -> -1, +1)
    adv = O.reinforce_pp_advantages(R, KL, M, beta=0.5, group_ids=["a", "b"])
    d = [0.70 - 0.7666667, 0.75 - 0.7666667, 0.85 - 0.7666667]
    sa = math.sqrt(sum(x * x for x in d) / 3)
    assert close(adv[0], [x / sa for x in d])
    assert close(adv[1], [-1.0, 1.0, 0.0])


def test_reinforce_pp_advantages_are_whitened_over_tokens():
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.float32)
    adv = O.reinforce_pp_advantages(torch.tensor([1.0, 0.0]), None, mask)
    # returns: row 0 = 1 on its 2 tokens, row 1 = 0 on its 3 tokens; token-weighted mean 0.4, std sqrt(0.24)
    std = math.sqrt(0.24)
    want = torch.tensor([[0, 0.6 / std, 0.6 / std, 0], [0, -0.4 / std, -0.4 / std, -0.4 / std]])
    torch.testing.assert_close(adv, want, rtol=1e-5, atol=1e-6)
    # per-row groups: each group's returns are constant over its tokens -> 0
    assert torch.equal(O.reinforce_pp_advantages(torch.tensor([1.0, 0.0]), None, mask, group_ids=["a", "b"]),
                       torch.zeros(2, 4))


# ---------------------------------------------------------------- group whitening, Task-Relative REINFORCE++
def test_group_whiten_sequence_level():
    v = T([1.0, 2.0, 3.0, 10.0, 5.0, 100.0])
    mask = T([1, 1, 1, 1, 0, 0])
    g = ["s", "s", "s", "e", "x", "s"]
    # group s counted: 1,2,3 (100 masked) -> mean 2, pop std sqrt(2/3) = 0.816497 -> -1.224745, 0, 1.224745
    # group e: singleton -> 0; group x: only a masked entry -> 0; masked entries -> 0
    out = O.group_whiten(v, mask, g)
    assert close(out, [-1.224745, 0.0, 1.224745, 0.0, 0.0, 0.0])


def test_group_whiten_token_level_and_tensor_ids():
    # rows 0 and 2 share group 7: tokens 1,3 | 5 -> mean 3, pop var (4+0+4)/3 -> std 1.632993
    v = T([[1.0, 3.0], [9.0, 9.0], [5.0, 0.0]])
    mask = T([[1, 1], [1, 1], [1, 0]])
    out = O.group_whiten(v, mask, torch.tensor([7, 8, 7]))
    s = math.sqrt(8 / 3)
    assert close(out, [[-2 / s, 0.0], [0.0, 0.0], [2 / s, 0.0]])  # group 8 is constant -> 0


def test_task_relative_by_hand():
    r = [0.2, 0.4, 0.9, 0.5, 0.5, 0.7]
    keys = ["c", "c", "s", "p", "p", "cr"]
    # c: mean 0.3, deviations +-0.1, population std 0.1 -> +-0.1/(0.1+1e-6) ~ +-0.99999
    # s, cr: singletons -> 0; p: constant -> 0
    a = O.task_relative_advantages(r, keys)
    assert close(a, [-1.0, 1.0, 0.0, 0.0, 0.0, 0.0], tol=1e-4)
    # unbiased: sample std sqrt(0.02/1) = 0.141421 -> +-0.707107
    a = O.task_relative_advantages(r, keys, unbiased=True)
    assert close(a, [-0.707107, 0.707107, 0, 0, 0, 0], tol=1e-4)


def test_task_relative_tuple_keys_and_uneven_groups():
    # (role, task) keys; ("solver","math"): 1,0,0 -> mean 1/3, pop std sqrt(2/9) = 0.471405
    #   -> (2/3)/0.471405 = 1.414214, (-1/3)/0.471405 = -0.707107
    keys = [("solver", "math"), ("solver", "code"), ("solver", "math"), ("solver", "math"), ("solver", "code")]
    r = [1.0, 1.0, 0.0, 0.0, 0.0]
    a = O.task_relative_advantages(r, keys)
    # ("solver","code"): 1,0 -> +-1
    assert close(a, [1.414214, 1.0, -0.707107, -0.707107, -1.0], tol=1e-4)


# ---------------------------------------------------------------- PPO clip
def _ppo_inputs():
    # log-ratios chosen for ratios 1, 1.5, 0.5, 1.1, 0.5
    lr = T([[0.0, math.log(1.5), math.log(0.5), math.log(1.1), math.log(0.5)]])
    old = T([[-1.0, -2.0, -0.5, -1.2, -3.0]])
    adv = T([[1.0, 1.0, -1.0, -2.0, 1.0]])
    return old + lr, old, adv


def test_ppo_clip_by_hand():
    logp, old, adv = _ppo_inputs()
    loss, frac = O.ppo_clip_loss(logp, old, adv)
    # t0: -min(1*1, 1*1) = -1
    # t1: -min(1.5*1, 1.2*1) = -1.2               (clipped: rho > 1.2, A > 0)
    # t2: -min(0.5*-1, 0.8*-1) = -(-0.8) = 0.8    (clipped: rho < 0.8, A < 0)
    # t3: -min(1.1*-2, 1.1*-2) = 2.2
    # t4: -min(0.5*1, 0.8*1) = -0.5               (not clipped: the unclipped term is the min)
    assert close(loss, [[-1.0, -1.2, 0.8, 2.2, -0.5]])
    assert close(frac, 2 / 5)
    _, frac = O.ppo_clip_loss(logp, old, adv, mask=T([[1, 0, 1, 1, 1]]))
    assert close(frac, 1 / 4)
    # asymmetric clip-higher 0.28: t1 -> -1.28
    loss, _ = O.ppo_clip_loss(logp, old, adv, eps_high=0.28)
    assert close(loss[0, 1], -1.28)


def test_ppo_clip_gradients_and_broadcast():
    logp, old, adv = _ppo_inputs()
    logp = logp.clone().requires_grad_(True)
    loss, _ = O.ppo_clip_loss(logp, old, adv)
    loss.sum().backward()
    # d(-rho*A)/dlogp = -rho*A on unclipped tokens; 0 where clipped
    assert close(logp.grad, [[-1.0, 0.0, 0.0, 2.2, -0.5]])
    # [B] advantages broadcast over tokens
    l1, _ = O.ppo_clip_loss(old, old, T([2.0]))
    assert close(l1, [[-2.0] * 5])
    _, frac = O.ppo_clip_loss(old, old, T([2.0]), mask=torch.zeros(1, 5))
    assert close(frac, 0.0)


# ---------------------------------------------------------------- aggregation
def test_token_mean_by_hand():
    loss = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = T([[1, 1, 0], [1, 0, 0]])
    assert close(O.token_mean(loss, mask), 7 / 3)  # (1+2+4)/3
    assert close(O.token_mean(loss, mask, normaliser=7), 1.0)  # 7/7
    z = O.token_mean(loss.requires_grad_(True), torch.zeros(2, 3))
    assert close(z, 0.0) and z.requires_grad  # all masked: 0, graph kept


def test_token_mean_micro_batches_equal_global():
    # micro-batch 1: tokens 1,2,3 ; micro-batch 2: tokens 4 and 7 -> 5 tokens in the step
    l1, m1 = T([[1.0, 2.0, 3.0]]), T([[1, 1, 1]])
    l2, m2 = T([[4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]), T([[1, 0, 0], [1, 0, 0]])
    n = O.count_tokens([m1, m2])
    assert n == 5
    split = O.token_mean(l1, m1, n) + O.token_mean(l2, m2, n)  # 6/5 + 11/5 = 17/5
    whole = O.token_mean(torch.cat([l1, l2]), torch.cat([m1, m2]))
    assert close(split, 3.4) and close(whole, 3.4)
    # the naive mean of micro-batch means differs: (2 + 5.5)/2 = 3.75
    assert close((O.token_mean(l1, m1) + O.token_mean(l2, m2)) / 2, 3.75)


def test_token_mean_micro_batches_gradients_match():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g)
    mask = (torch.rand(5, 7, generator=g) > 0.4).float()
    mask[3] = 0  # an all-masked row
    a = x.clone().requires_grad_(True)
    O.token_mean(a * a, mask).backward()
    b = x.clone().requires_grad_(True)
    n = O.count_tokens([mask[:2], mask[2:]])
    for sl in (slice(0, 2), slice(2, 5)):
        O.token_mean(b[sl] * b[sl], mask[sl], n).backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_seq_mean_token_mean_by_hand():
    loss = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = T([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    # sequence means 1.5 and 4; the empty third sequence is skipped -> (1.5 + 4)/2 = 2.75
    assert close(O.seq_mean_token_mean(loss, mask), 2.75)
    assert close(O.aggregate_loss(loss, mask, "seq_mean_token_mean"), 2.75)
    assert close(O.aggregate_loss(loss, mask, "token_mean"), 7 / 3)
    # token sums 3 and 4 over the 2 non-empty sequences: 3.5
    assert close(O.seq_mean_token_sum(loss, mask), 3.5)
    assert close(O.aggregate_loss(loss, mask, "seq_mean_token_sum"), 3.5)
    # micro-batches [row 0] and [rows 1,2] with the global sequence count 2: 1.5/2 + 4/2 = 2.75
    n = O.count_sequences([mask[:1], mask[1:]])
    assert n == 2
    assert close(O.seq_mean_token_mean(loss[:1], mask[:1], n) + O.seq_mean_token_mean(loss[1:], mask[1:], n), 2.75)
    with pytest.raises(ValueError):
        O.aggregate_loss(loss, mask, "nope")


def _weights(mode: str, lengths=(10, 100), advantages=(1.0, -1.0)) -> list[float]:
    """d(aggregated PPO loss)/d logp_t of the first token of each row, on-policy (ratio 1: d loss_t/d logp_t = -A)."""
    mask = torch.zeros(len(lengths), max(lengths))
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    logp = torch.full(mask.shape, -1.0, requires_grad=True)
    loss, _ = O.ppo_clip_loss(logp, logp.detach(), T(advantages), mask)
    O.aggregate_loss(loss, mask, mode, O.step_normaliser([mask], mode)).backward()
    return [float(-logp.grad[i, 0] / a) for i, a in enumerate(advantages)]


def test_loss_aggregation_weights_by_hand():
    # two answers of 10 and 100 tokens, advantages +1 / -1. DeepSeekMath Eq. 3 (seq_mean_token_mean): each token
    # weighs 1/G * 1/|o_i| = 1/2 * 1/10 = 0.05 and 1/2 * 1/100 = 0.005; token_mean: 1/(10 + 100) = 1/110 for both;
    # seq_mean_token_sum: 1/G = 0.5 for both
    assert _weights("seq_mean_token_mean") == pytest.approx([0.05, 0.005], rel=1e-6)
    assert _weights("token_mean") == pytest.approx([1 / 110, 1 / 110], rel=1e-6)
    assert _weights("seq_mean_token_sum") == pytest.approx([0.5, 0.5], rel=1e-6)
    # the loss values: -A per token; (-1*10 + 1*100)/110, (-1 + 1)/2 = 0, (-10 + 100)/2 = 45
    mask = torch.zeros(2, 100)
    mask[0, :10], mask[1] = 1, 1
    loss = T([-1.0, 1.0])[:, None].expand(2, 100)
    assert close(O.aggregate_loss(loss, mask, "token_mean"), 90 / 110)
    assert close(O.aggregate_loss(loss, mask, "seq_mean_token_mean"), 0.0)
    assert close(O.aggregate_loss(loss, mask, "seq_mean_token_sum"), 45.0)


def test_loss_aggregation_degenerate_cases():
    loss = T([[2.0, 4.0], [6.0, 8.0]])
    empty = torch.zeros(2, 2)
    for mode in O.LOSS_AGG:  # nothing masked in: 0 (not NaN), graph kept
        x = loss.clone().requires_grad_(True)
        out = O.aggregate_loss(x, empty, mode, O.step_normaliser([empty], mode))
        assert float(out.detach()) == 0.0 and out.requires_grad
    one = T([[1, 1], [0, 0]])  # one sequence: the sequence modes are its token mean (3) and token sum (6)
    assert close(O.aggregate_loss(loss, one, "seq_mean_token_mean"), 3.0)
    assert close(O.aggregate_loss(loss, one, "seq_mean_token_sum"), 6.0)
    assert close(O.aggregate_loss(loss, one, "token_mean"), 3.0)
    # step normalisers: 3 tokens, 2 non-empty sequences over two micro-batches
    masks = [T([[1, 1]]), T([[1, 0], [0, 0]])]
    assert O.step_normaliser(masks, "token_mean") == 3.0
    assert O.step_normaliser(masks, "seq_mean_token_mean") == O.step_normaliser(masks, "seq_mean_token_sum") == 2.0
    # micro-batch losses with the step's normaliser add up to the whole batch's: token sums (6 + 6) / 2 = 6
    mask = T([[1, 1], [1, 0]])
    parts = [O.seq_mean_token_sum(loss[i:i + 1], mask[i:i + 1], 2) for i in range(2)]
    assert close(sum(parts), O.seq_mean_token_sum(loss, mask)) and close(sum(parts), 6.0)
    with pytest.raises(ValueError):
        O.step_normaliser(masks, "seq-mean-token-mean")


# ---------------------------------------------------------------- KL loss, entropy
def test_kl_loss_by_hand():
    logp, ref = T([[-1.0, -2.0]]), T([[-1.5, -1.0]])
    both = T([[1, 1]])
    # k3: (0.1065307 + 0.7182818)/2 = 0.4124062; k1: (0.5 - 1)/2 = -0.25; k2: (0.125 + 0.5)/2 = 0.3125
    assert close(O.kl_loss(logp, ref, both), 0.4124062)
    assert close(O.kl_loss(logp, ref, both, estimator="k1"), -0.25)
    assert close(O.kl_loss(logp, ref, both, estimator="k2"), 0.3125)
    assert close(O.kl_loss(logp, ref, T([[1, 0]])), 0.1065307)
    assert close(O.kl_loss(logp, ref, T([[0, 0]])), 0.0)


def test_entropy_by_hand():
    # [0, 0] -> ln 2 = 0.693147; [0, ln 3] -> p = (1/4, 3/4): 0.25*ln4 + 0.75*ln(4/3) = 0.346574 + 0.215762
    logits = T([[0.0, 0.0], [0.0, math.log(3.0)]])
    assert close(O.entropy_from_logits(logits), [0.693147, 0.562335])
    # -inf logits (filtered vocab) contribute nothing: [0, 0, -inf] -> ln 2
    assert close(O.entropy_from_logits(T([[0.0, 0.0, -math.inf]])), [0.693147])


def test_entropy_chunked_matches_unchunked():
    x = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(1))
    a = O.entropy_from_logits(x, chunk_size=3)
    b = O.entropy_from_logits(x, chunk_size=1000)
    p = torch.softmax(x, -1)
    ref = -(p * torch.log_softmax(x, -1)).sum(-1)
    assert a.shape == (2, 5) and torch.allclose(a, b, atol=1e-6) and torch.allclose(a, ref, atol=1e-5)


# ---------------------------------------------------------------- CLPO
def test_length_normalised_logprob():
    lp = T([[-1.0, -2.0, -3.0], [-4.0, -4.0, -4.0], [-1.0, -1.0, -1.0]])
    mask = T([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    # (-1-2)/2 = -1.5 ; -12/3 = -4 ; empty -> 0
    assert close(O.length_normalised_logprob(lp, mask), [-1.5, -4.0, 0.0])


def test_slate_advantages():
    # mean 0.5 -> [0.5, -0.5, -0.5, 0.5]
    assert close(O.slate_advantages(T([1.0, 0.0, 0.0, 1.0])), [0.5, -0.5, -0.5, 0.5])
    # padded 4th slot: mean over 1,0,1 = 2/3 -> [1/3, -2/3, 1/3, 0]
    assert close(O.slate_advantages(T([1.0, 0.0, 1.0, 9.0]), T([1, 1, 1, 0])), [1 / 3, -2 / 3, 1 / 3, 0.0])
    # batched slates
    assert close(O.slate_advantages(T([[1.0, 0.0], [1.0, 1.0]])), [[0.5, -0.5], [0.0, 0.0]])


def test_listmle_by_hand():
    s, r = T([1.0, 2.0, 3.0]), T([0.0, 1.0, 0.5])
    # sort by reward desc: items 1 (r=1), 2 (0.5), 0 (0) -> scores 2, 3, 1
    # lse(2,3,1) = 3 + ln(1 + e^-1 + e^-2) = 3 + ln 1.503215 = 3.407606 ; term 2 - 3.407606 = -1.407606
    # lse(3,1)   = 3 + ln(1 + e^-2) = 3.126928                           ; term 3 - 3.126928 = -0.126928
    # last term 1 - 1 = 0 ; loss = 1.407606 + 0.126928 = 1.534534
    assert close(O.listmle_loss(s, r), 1.534534)


def test_listmle_ties_are_stable():
    s, r = T([1.0, 2.0, 3.0]), T([1.0, 1.0, 0.0])
    # tie between items 0 and 1 keeps input order: scores 1, 2, 3
    # 1 - lse(1,2,3) = 1 - 3.407606 = -2.407606 ; 2 - lse(2,3) = 2 - (3 + ln(1 + e^-1)) = 2 - 3.313262 = -1.313262
    # loss = 3.720868 (the other tie order 2,1,3 would give 1.407606 + 2.126928 = 3.534534)
    assert close(O.listmle_loss(s, r), 3.720868)


def test_listmle_mask_batch_and_gradients():
    s = T([[1.0, 2.0, 3.0, 100.0], [5.0, 0.0, 0.0, 0.0]]).requires_grad_(True)
    r = T([[0.0, 1.0, 0.5, 5.0], [1.0, 0.0, 0.0, 0.0]])
    mask = T([[1, 1, 1, 0], [1, 0, 0, 0]])
    per = O.listmle_loss(s, r, mask=mask, reduction="none")
    # row 0 = the hand example above (the padded 100 is ignored); row 1 has one real item -> 0
    assert close(per, [1.534534, 0.0])
    O.listmle_loss(s, r, mask=mask, reduction="sum").backward()
    assert torch.isfinite(s.grad).all()
    assert close(s.grad[:, 3], [0.0, 0.0]) and close(s.grad[1], [0.0] * 4)
    # a correctly ordered, widely separated list costs ~0; the reversed one ~ (100-0) + (50-0)... large
    assert O.listmle_loss(T([100.0, 50.0, 0.0]), T([3.0, 2.0, 1.0])) < 1e-6
    assert O.listmle_loss(T([0.0, 50.0, 100.0]), T([3.0, 2.0, 1.0])) > 100


def test_choice_and_clpo_loss():
    lp = torch.log(T([0.5, 0.25, 0.25])).requires_grad_(True)
    adv = O.slate_advantages(T([1.0, 0.25, 0.25]))  # mean 0.5 -> [0.5, -0.25, -0.25]
    # -(0.5*ln .5 - 0.25*ln .25 - 0.25*ln .25) = -(-0.346574 + 0.693147) = -0.346574
    loss = O.choice_loss(lp, adv)
    assert close(loss, -0.346574)
    loss.backward()
    assert close(lp.grad, [-0.5, 0.25, 0.25])  # d/dlogp = -A
    # two slates, the second padded: mean of per-slate losses
    two = O.choice_loss(T([[0.0, -1.0], [-2.0, -9.0]]), T([[1.0, -1.0], [1.0, 5.0]]), mask=T([[1, 1], [1, 0]]))
    assert close(two, ((-(0.0 + 1.0)) + (-(-2.0))) / 2)  # (-1 + 2)/2 = 0.5
    # Eq. 8: 1 + 0.5*2 + 0.1*3 - 0.01*4 = 2.26
    assert close(O.clpo_loss(T(1.0), T(2.0), T(3.0), T(4.0), lambda_rank=0.5), 2.26)


# ---------------------------------------------------------------- equal rewards give exactly zero advantages
@pytest.mark.parametrize("value", [1 / 3, 0.6, 0.2, 1e6 / 3])
def test_equal_non_binary_rewards_give_exact_zero_advantages(value):
    # float32 rounding makes the mean of seven 1/3's differ from 1/3; dividing that by std + 1e-8 used to give ±0.4-0.9
    r = torch.full((7,), value, dtype=torch.float32)
    assert torch.equal(O.task_relative_advantages(r, ["solver"] * 7), torch.zeros(7))
    mask = torch.ones(7, 5)
    assert torch.equal(O.reinforce_pp_advantages(r, None, mask), torch.zeros(7, 5))
    assert torch.equal(O.group_whiten(r, None, ["a", "b"] * 3 + ["a"]), torch.zeros(7))


def test_small_spread_agrees_with_float64_whitening():
    r64 = torch.tensor([100.0, 100.001, 100.0, 100.002, 100.0, 100.0, 100.003], dtype=torch.float64)
    got = O.masked_whiten(r64.float(), torch.ones(7))
    # the float32 inputs are r64 rounded: compare with float64 whitening of exactly those inputs
    exact = r64.float().double()
    want = (exact - exact.mean()) / (exact.std(unbiased=False) + 1e-8)
    assert torch.allclose(got.double(), want, atol=1e-6)
