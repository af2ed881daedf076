"""Optimizers (selfevo.optimizers): every registered optimizer trains only its agent's adapter on a tiny fp32 model;
zero advantages leave the weights alone; SFT skips non-positive rows; GRPO groups by prompt; Samples.from_turns and
train_agents. The objectives' arithmetic is tested in test_objectives.py."""
import math

import pytest
import torch

from selfevo.interaction import Episode, Turn
from selfevo.loop import TrainerCfg
from selfevo.optimizers import OPTIMIZERS, ClpoCfg, Optimizer, Samples, UpdateSpec, train_agents
from selfevo.optimizers import base
from selfevo.optimizers.base import gradient_rows, on_policy, score
from selfevo.optimizers.objectives import kl_estimate, masked_mean, task_relative_advantages
from selfevo.policy import SeqBatch
from selfevo.policy.packing import SHARED_PREFIX
from selfevo.types import Completion, Request, Task

PRIME = "Name a prime number larger than ten."
PROMPTS = ["What is 1+1?", "What is 1+1?", PRIME, PRIME]
ANSWERS = ["It is 2.", "Three, I think", "Eleven", "Twelve is prime, of course"]
REWARDS = [1.0, 0.0, 0.5, -0.5]


def token_rows(store, prompts=PROMPTS, answers=ANSWERS):
    tok = store.backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    return [ids(p) for p in prompts], [ids(a) for a in answers], tok.pad_token_id


def samples_of(store, rewards=REWARDS, groups=None, **kw):
    p, c, pad = token_rows(store, **kw)
    return Samples(SeqBatch.build(p, c, pad), torch.tensor(rewards, dtype=torch.float32), groups)


def snapshot(store):
    model = store.backbones["tiny-random"].model
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def delta(before, after, agent=None, lora=True):
    """Norm of the change of the parameters of ``agent``'s adapter (or of the frozen base with lora=False)."""
    sq = 0.0
    for n, p in before.items():
        is_lora = "lora_" in n
        if lora and not (is_lora and f".{agent}." in n):
            continue
        if not lora and is_lora:
            continue
        sq += float(((after[n] - p) ** 2).sum())
    return math.sqrt(sq)


AGENTS = ("a0", "a1", "a2")


@pytest.fixture(scope="module")
def _shared():
    from selfevo.policy import LoraSettings, PolicyStore, StoreSettings

    store = PolicyStore(StoreSettings(dtype="float32", lora=LoraSettings(r=8, alpha=16), lr=1e-2))  # as make_store
    for a in AGENTS:
        store.add_agent(a, "tiny-random")
    return store, snapshot(store)


def reset(store, micro_batch=8, max_grad_norm=1.0):
    """Back to the freshly built state: initial weights, no optimizer state, versions 0."""
    init = store._initial
    with torch.no_grad():
        for n, p in store.backbones["tiny-random"].model.named_parameters():
            p.copy_(init[n])
    store.adamws.clear()
    store.versions = {a: 0 for a in AGENTS}
    store.settings.micro_batch, store.settings.max_grad_norm = micro_batch, max_grad_norm
    return store


@pytest.fixture
def store(_shared):
    """One fp32 tiny-random store with agents a0, a1, a2 shared by the module, reset before every test."""
    s, init = _shared
    s._initial = init
    return reset(s)


def test_registry_has_the_documented_optimizers():
    assert set(OPTIMIZERS.names()) >= {"reinforce_pp", "task_relative", "grpo", "sft"}


@pytest.mark.parametrize("name", [n for n in OPTIMIZERS.names() if n != "none"])  # "none": no update, by design
def test_every_optimizer_trains_only_its_agents_adapter(make_store, name):
    store = make_store(agents=("a0", "a1", "a2"), micro_batch=2)
    samples = samples_of(store)
    before = snapshot(store)
    options = {"clpo": ClpoCfg(choice_form="sampled")} if name == "clpo" else {}  # plain rows: no candidate set
    stats = OPTIMIZERS.get(name)(TrainerCfg(), **options)(store, "a1", samples)
    after = snapshot(store)
    assert stats["skipped"] is False and math.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    assert delta(before, after, "a1") > 0
    assert delta(before, after, "a0") == 0 and delta(before, after, "a2") == 0
    assert delta(before, after, lora=False) == 0  # the frozen backbone never moves
    assert store.versions == {"a0": 0, "a1": 1, "a2": 0}
    assert store.adapter_params("a1") and all(p.grad is None for p in store.adapter_params("a1"))


@pytest.mark.parametrize("name,cfg", [("reinforce_pp", TrainerCfg(kl_coef=0.1)),
                                      ("reinforce_pp", TrainerCfg(kl_coef=0.1, kl_in_reward=False, kl_estimator="k3")),
                                      ("grpo", TrainerCfg(kl_coef=0.1, kl_in_reward=False, kl_estimator="k2")),
                                      ("task_relative", TrainerCfg(kl_coef=0.1, kl_in_reward=False))])
def test_kl_variants_train_and_measure_kl(store, name, cfg):
    opt = OPTIMIZERS.get(name)(cfg)
    before = snapshot(store)
    first = opt(store, "a0", samples_of(store))
    assert abs(first["kl"]) < 1e-6  # a fresh adapter (B = 0) is the reference policy
    second = opt(store, "a0", samples_of(store))
    assert second["kl"] != 0.0  # the adapter moved away from the reference
    after = snapshot(store)
    assert math.isfinite(second["loss"]) and delta(before, after, "a0") > 0 and delta(before, after, "a1") == 0


@pytest.mark.parametrize("name", ["grpo", "task_relative", "reinforce_pp"])
def test_kl_as_a_loss_term_is_measured_in_the_training_forward(store, name, monkeypatch):
    """With the KL as a loss term only the reference is scored before the update (one pass, not two), and the
    reported ``kl`` is the estimator's token mean at the policy that was trained: the same number as scoring the
    current policy separately (on-policy, no dropout)."""
    import selfevo.optimizers.base as base
    cfg = TrainerCfg(kl_coef=0.1, kl_in_reward=False, kl_estimator="k3")
    opt = OPTIMIZERS.get(name)(cfg)
    opt(store, "a0", samples_of(store))  # move the adapter off the reference
    samples = samples_of(store)
    cur, ref = score(store, "a0", samples.batch), score(store, None, samples.batch, store.agent_backbone["a0"])
    expected = float(masked_mean(kl_estimate(cur, ref, "k3"), samples.batch.loss_mask))
    calls = []
    real = base.score
    monkeypatch.setattr(base, "score", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    stats = opt(store, "a0", samples)
    assert calls == [None]  # the reference only (the backbone, adapter disabled)
    assert expected > 1e-6 and stats["kl"] == pytest.approx(expected, rel=1e-3, abs=1e-7)


def test_micro_batch_size_does_not_change_the_gradient(store):
    """The step's token-mean normaliser makes micro-batching exact: with plain SGD (lr 1, no clipping) the update is
    minus the gradient, the same for micro-batches of 1, 3 and 8 rows."""
    deltas = []
    for mb in (1, 3, 8):
        reset(store, micro_batch=mb, max_grad_norm=1e9)
        store.adamws["a0"] = torch.optim.SGD(store.adapter_params("a0"), lr=1.0)
        before = snapshot(store)
        OPTIMIZERS.get("reinforce_pp")(TrainerCfg())(store, "a0", samples_of(store))
        after = snapshot(store)
        deltas.append({n: after[n] - before[n] for n in before if "lora_" in n})
    norm = math.sqrt(sum(float((d ** 2).sum()) for d in deltas[0].values()))
    assert norm > 0
    for other in deltas[1:]:  # equal up to float summation order (relative to the whole gradient)
        diff = math.sqrt(sum(float(((other[n] - d) ** 2).sum()) for n, d in deltas[0].items()))
        assert diff < 1e-4 * norm


@pytest.mark.parametrize("train_batch,epochs,steps", [(0, 1, 1), (2, 1, 2), (3, 1, 2), (0, 2, 2), (2, 2, 4)])
def test_train_batch_and_epochs_count_parameter_updates(store, train_batch, epochs, steps):
    before = snapshot(store)
    cfg = TrainerCfg(train_batch=train_batch, epochs=epochs)
    stats = OPTIMIZERS.get("reinforce_pp")(cfg)(store, "a1", samples_of(store))
    assert stats["parameter_updates"] == steps and store.versions["a1"] == steps and stats["skipped"] is False
    assert delta(before, snapshot(store), "a1") > 0 and delta(before, snapshot(store), "a0") == 0
    if on_policy(cfg):
        assert stats["kl_rollout"] == 0.0 and stats["clip_frac"] == 0.0


# ---- zero advantages -------------------------------------------------------------------------------------------
def test_task_relative_equal_rewards_in_every_group_is_a_no_op(store):
    rewards, groups = [1.0, 1.0, 0.0, 0.0], ["x", "x", "y", "y"]
    assert torch.equal(task_relative_advantages(torch.tensor(rewards), groups), torch.zeros(4))
    before = snapshot(store)
    stats = OPTIMIZERS.get("task_relative")(TrainerCfg())(store, "a0", samples_of(store, rewards, groups))
    assert stats["loss"] == 0.0 and stats["grad_norm"] == 0.0 and stats["clip_frac"] == 0.0
    assert delta(before, snapshot(store), "a0") == 0


@pytest.mark.parametrize("name", ["task_relative", "grpo", "reinforce_pp"])
def test_constant_rewards_give_no_update(store, name):
    before = snapshot(store)
    stats = OPTIMIZERS.get(name)(TrainerCfg())(store, "a0", samples_of(store, [0.7] * 4))
    assert stats["loss"] == 0.0 and stats["grad_norm"] == 0.0
    assert delta(before, snapshot(store), "a0") == 0


# ---- SFT ---------------------------------------------------------------------------------------------------------
def test_sft_keeps_only_positive_rows(store):
    before = snapshot(store)
    stats = OPTIMIZERS.get("sft")(TrainerCfg())(store, "a0", samples_of(store, [1.0, 0.0, -1.0, 2.0]))
    assert stats["rows"] == 2 and stats["skipped"] is False and stats["loss"] > 0
    assert delta(before, snapshot(store), "a0") > 0 and delta(before, snapshot(store), "a1") == 0


def test_sft_all_non_positive_is_skipped(store):
    before = snapshot(store)
    stats = OPTIMIZERS.get("sft")(TrainerCfg())(store, "a0", samples_of(store, [0.0, -1.0, 0.0, -0.1]))
    assert stats == {"loss": 0.0, "grad_norm": 0.0, "skipped": True, "rows": 0}
    assert delta(before, snapshot(store), "a0") == 0 and store.versions["a0"] == 0


# ---- what the optimizers hand to the store (a capturing stand-in) ------------------------------------------------
class CaptureStore:
    """Stands in for PolicyStore.update: records the batch (and its advantages) the optimizer built."""

    micro_batch = 8

    def __init__(self):
        self.batches = []
        self.versions = {"a": 0}

    def update(self, agent, batch, loss_fn):
        self.batches.append(batch)
        logp = torch.zeros(batch.input_ids.shape, requires_grad=True)
        return {"loss": float(loss_fn(logp, batch).detach()), "grad_norm": 0.0, "skipped": False}


def _sequence_adv(batch):
    """Per-row advantage (constant over the row's completion tokens)."""
    adv, mask = batch.extras["adv"], batch.loss_mask
    out = []
    for i in range(adv.shape[0]):
        vals = adv[i][mask[i] > 0]
        assert torch.allclose(vals, vals[0].expand_as(vals))
        assert torch.all(adv[i][mask[i] == 0] == 0)
        out.append(float(vals[0]))
    return out


def _fake_samples(prompts, rewards, groups=None):
    completions = [[50 + i] * (2 + i) for i in range(len(prompts))]
    return Samples(SeqBatch.build(prompts, completions, 0), torch.tensor(rewards), groups)


@pytest.fixture
def every_row(monkeypatch):
    """The store is handed every row (rows whose advantage is 0 are normally not run): for tests that read the
    advantages of all rows from what the store receives."""
    monkeypatch.setattr(base, "gradient_rows", lambda batch: batch)


@pytest.mark.usefixtures("every_row")
def test_grpo_groups_by_prompt_by_default():
    prompts = [[5, 6, 7], [5, 6, 7], [8, 9], [8, 9]]
    store = CaptureStore()
    OPTIMIZERS.get("grpo")(TrainerCfg())(store, "a", _fake_samples(prompts, [1.0, 1.0, 1.0, 0.0]))
    assert _sequence_adv(store.batches[0]) == pytest.approx([0.0, 0.0, 1.0, -1.0], abs=1e-6)
    # task_relative without groups normalises the whole batch as one group: rows 0, 1 get a signal
    store = CaptureStore()
    OPTIMIZERS.get("task_relative")(TrainerCfg())(store, "a", _fake_samples(prompts, [1.0, 1.0, 1.0, 0.0]))
    s = math.sqrt(0.1875)
    assert _sequence_adv(store.batches[0]) == pytest.approx([0.25 / s] * 3 + [-0.75 / s], abs=1e-5)


@pytest.mark.usefixtures("every_row")
def test_grpo_explicit_groups_override_prompt_groups():
    prompts = [[5, 6, 7], [5, 6, 7], [8, 9], [8, 9]]
    store = CaptureStore()
    OPTIMIZERS.get("grpo")(TrainerCfg())(store, "a", _fake_samples(prompts, [1.0, 0.0, 1.0, 0.0], ["g", "h", "g", "h"]))
    assert _sequence_adv(store.batches[0]) == pytest.approx([0.0] * 4, abs=1e-6)


def _adv_batch(adv_rows, **extras):
    """3 rows of 2 prompt + 3 completion tokens with the given per-row advantages on the completion tokens."""
    batch = SeqBatch.build([[1, 2]] * len(adv_rows), [[3, 4, 5]] * len(adv_rows), 0)
    return batch.with_extras(adv=torch.tensor(adv_rows)[:, None] * batch.loss_mask, **extras)


def test_gradient_rows_leaves_out_rows_whose_advantage_is_zero():
    batch = _adv_batch([0.0, 1.5, 0.0])
    live = gradient_rows(batch)
    assert live.input_ids.shape[0] == 1 and float(live.extras["adv"].sum()) == 4.5
    everything = _adv_batch([0.5, -1.0, 2.0])
    assert gradient_rows(everything) is everything
    assert gradient_rows(_adv_batch([0.0, 0.0, 0.0])) is None  # no row has a gradient
    assert gradient_rows(_adv_batch([1e-30, 0.0, 0.0])).input_ids.shape[0] == 1  # only an exact 0 is left out
    # off-policy (old log-probs) or with a KL loss term (ref) a zero-advantage row still has a loss: all rows run
    for key in ("old", "ref"):
        zeros = _adv_batch([0.0, 1.0, 0.0], **{key: torch.zeros(3, 5)})
        assert gradient_rows(zeros) is zeros


def adam_rounding_bound(lr, betas, eps, g, h):
    """Norm of the largest change of two AdamW steps from zero moments (gradient g, then none) when g turns into h:
    step 1 moves a weight by lr g / (|g| + eps), step 2 by lr c1 g / (c2 |g| + eps) (bias-corrected moments, c1 =
    b1 / (1 + b1), c2 = sqrt(b2 / (1 + b2))). Their slopes, eps / (|g| + eps)^2 and c1 eps / (c2 |g| + eps)^2, are
    largest at the smaller |g| between g and h (at 0 where the sign flips): near |g| ~ eps a rounding of g moves
    the weight by up to lr / eps times it."""
    b1, b2 = betas
    c1, c2 = b1 / (1 + b1), math.sqrt(b2 / (1 + b2))
    a = torch.where(g * h > 0, torch.minimum(g.abs(), h.abs()), torch.zeros_like(g))
    slope = eps / (a + eps) ** 2 + c1 * eps / (c2 * a + eps) ** 2
    return float((lr * slope * (g - h).abs()).norm())


def test_zero_advantage_rows_left_out_give_the_same_update(make_store, monkeypatch):
    """GRPO over two prompt groups: a step whose first group scored alike (advantage 0: its rows are not run), then a
    step where both did (no row runs; AdamW's moments still move the weights). The gradient, the adapter and the
    statistics are those every row gives, up to float rounding (other micro-batches, other packing).

    Its own store, its LoRA A drawn under a fixed seed: PEFT draws it from the global RNG, which earlier tests
    (the goldens seed it) leave anywhere, and the initialisation decides how many gradient entries fall near AdamW's
    eps, where a rounding is magnified (the weights of a shared store differed by 1e-7 to 2e-4 of the update
    depending on what ran before; the gradients by 1e-7 at one thread, 2e-6 at two, whatever ran)."""
    with torch.random.fork_rng():  # the RNG of later tests is left as it was
        torch.manual_seed(0)
        store = make_store(agents=("a1",), micro_batch=2)
    initial = snapshot(store)

    def two_steps():
        with torch.no_grad():
            for n, p in store.backbones["tiny-random"].model.named_parameters():
                p.copy_(initial[n])
        store.adamws.clear()
        stats = [OPTIMIZERS.get("grpo")(TrainerCfg())(store, "a1", samples_of(store, rewards=r))
                 for r in ([1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0])]
        adamw = store.adamws["a1"]  # after a gradient g, then none: exp_avg = b1 (1 - b1) g
        b1 = adamw.param_groups[0]["betas"][0]
        grad = torch.cat([adamw.state[p]["exp_avg"].flatten() for p in store.adapter_params("a1")]) / (b1 * (1 - b1))
        return stats, snapshot(store), grad

    stats, left_out, g = two_steps()
    monkeypatch.setattr(base, "gradient_rows", lambda batch: batch)
    every_stats, every, g_every = two_steps()
    # float32: each gradient entry sums products over the rows' tokens and the model's width, here in another order
    # (2 rows in 1 micro-batch against 4 in 2): a few unit roundoffs (6e-8) times those terms, 1e-7 to 2e-6 of it
    assert float(g.norm()) > 0 and float((g - g_every).norm()) < 1e-5 * float(g_every.norm())
    moved = delta(initial, every, "a1")
    group = store.adamws["a1"].param_groups[0]
    bound = adam_rounding_bound(group["lr"], group["betas"], group["eps"], g_every, g)
    assert moved > 0 and delta(every, left_out, "a1") <= bound + 1e-6 * moved  # + the weights' own float32 sums
    assert stats[1]["grad_norm"] == every_stats[1]["grad_norm"] == 0.0
    assert [s.pop("rows_left_out") for s in stats] == [2, 4]
    assert [s.pop("rows_left_out") for s in every_stats] == [0, 0]
    for a, b in zip(stats, every_stats):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)


def test_sft_hands_only_positive_rows_to_the_store():
    prompts = [[5, 6], [7], [8, 9, 10], [11]]
    store = CaptureStore()
    stats = OPTIMIZERS.get("sft")(TrainerCfg())(store, "a", _fake_samples(prompts, [0.5, 0.0, 2.0, -3.0]))
    (batch,) = store.batches
    assert stats["rows"] == 2 and batch.input_ids.shape[0] == 2
    assert batch.input_ids[0, :2].tolist() == [5, 6] and batch.input_ids[1, :3].tolist() == [8, 9, 10]


# ---- Samples.from_turns and train_agents -------------------------------------------------------------------------
def _turn(agent, role, prompt, completion, reward):
    req = Request(agent, [{"role": "user", "content": "q"}])
    return Turn(agent, role, Completion(req, prompt, completion, [0.0] * len(completion), "x", "stop"), reward=reward)


def test_samples_from_turns_groups_and_keep_together():
    turns = [_turn("a", "solver", [1, 2], [3], 1.0), _turn("a", "scorer", [1], [4, 5], 0.0),
             _turn("a", "solver", [6], [7, 8, 9], -1.0)]
    s = Samples.from_turns(turns, pad_id=0, spec=UpdateSpec(group_by=lambda t: t.label,
                                                            keep_together=lambda t: t.completion.prompt_ids[0]))
    assert s.rewards.tolist() == [1.0, 0.0, -1.0]
    assert s.groups == ["solver", "scorer", "solver"]
    assert s.batch.groups == [1, 1, 6]
    assert s.batch.loss_mask.tolist() == [[0, 0, 1, 0], [0, 1, 1, 0], [0, 1, 1, 1]]
    plain = Samples.from_turns(turns, pad_id=0)
    assert plain.groups is None and plain.batch.groups is None
    # rows kept together share the tokens they all begin with (rows 0 and 1: token 1) where that runs fewer
    # positions (packing.group_prefixes: 5 against 6); row 2 keeps its prompt; without keep_together, no such extra
    assert s.batch.extras[SHARED_PREFIX].tolist() == [1, 1, 1] and SHARED_PREFIX not in plain.batch.extras


def test_train_agents_updates_each_rewarded_agent_only(store):
    p, c, _ = token_rows(store)
    turns = [_turn("a0", "solver", p[i], c[i], r) for i, r in enumerate(REWARDS)]
    turns += [_turn("a1", "solver", p[0], c[0], None), _turn("a1", "solver", p[1], c[1], None)]  # masked: no update
    turns += [_turn("a2", "solver", p[2], c[2], 1.0), _turn("a2", "solver", p[3], c[3], 0.0)]
    before = snapshot(store)
    stats = train_agents(store, OPTIMIZERS.get("reinforce_pp")(TrainerCfg()),
                         [Episode(Task("t", "math", "q", "1"), turns)], ["a0", "a1", "a2"])
    after = snapshot(store)
    assert set(stats) == {"a0", "a2"}
    assert all(v == round(v, 5) for s in stats.values() for v in s.values() if isinstance(v, float))
    assert delta(before, after, "a0") > 0 and delta(before, after, "a2") > 0 and delta(before, after, "a1") == 0


def test_one_update_spec_reaches_the_rows_whole(store):
    """train_agents hands the recipe's UpdateSpec to the rows as one value: ``include`` picks the turns, ``group_by``
    the groups and ``extras`` the per-row values the optimizer sees; rows are padded with the agent's tokenizer's
    pad id (``store.tokenizer(agent)``)."""
    seen = []
    p, c, _ = token_rows(store)
    turns = [_turn("a0", "solver", p[0], c[0], 1.0), _turn("a0", "scorer", p[1], c[1], 0.0),
             _turn("a0", "solver", p[2], c[2] + [c[2][-1]] * 3, -1.0)]  # a longer row: the others are padded
    spec = UpdateSpec(group_by=lambda t: t.label, include=lambda t: t.reward != 0.0,
                      extras=lambda t: {"double": 2 * t.reward})
    train_agents(store, Optimizer(lambda st, agent, samples: seen.append(samples) or {}),
                 [Episode(Task("t", "math", "q", "1"), turns)], ["a0"], spec)
    [samples] = seen
    assert samples.groups == ["solver", "solver"] and samples.rewards.tolist() == [1.0, -1.0]
    assert samples.batch.extras["double"].tolist() == [2.0, -2.0]
    padding = samples.batch.attention_mask == 0
    assert padding.any() and (samples.batch.input_ids[padding] == store.tokenizer("a0").pad_token_id).all()


def test_task_relative_and_grpo_are_one_update_with_different_default_groups():
    """Both are policy_gradient.group_normalised; only the grouping without named groups differs."""
    from selfevo.optimizers.policy_gradient import one_group, same_prompt

    batch = SeqBatch.build([[1, 2], [1, 2], [3]], [[4], [5], [6]], 0)
    samples = Samples(batch, torch.tensor([1.0, 0.0, 1.0]))
    assert one_group(samples) == [0, 0, 0]
    assert same_prompt(samples) == [(1, 2), (1, 2), (3,)]
    assert not OPTIMIZERS.get("none")(TrainerCfg()).trains and OPTIMIZERS.get("grpo")(TrainerCfg()).trains


# ---- issue 58: the turn's sampling temperature, loss aggregation, LoRA dropout -----------------------------------
def test_samples_from_turns_record_each_turns_sampling_temperature():
    """A role's temperature (SAGE's Critic at 0.1) reaches the request and from there the row the store scores."""
    from selfevo.interaction.runner import Runner, ask
    from selfevo.policy.batch import TEMPERATURE
    from selfevo.roles.sage import SageCritic
    from selfevo.types import SamplingParams

    runner = Runner(engine=None, sampling=SamplingParams(temperature=0.6), seed=0)
    critic = ask(SageCritic(), "a", Task("t", "math", "q", "1"), subject="question")
    assert critic.temperature == 0.1
    req = runner.request(critic, "k", 0, 0)
    turns = [_turn("a", "solver", [1, 2], [3], 1.0), _turn("a", "solver", [1], [4, 5], 0.0),
             _turn("a", "critic", [6], [7], 0.5)]
    turns[0].completion.request.sampling = SamplingParams(temperature=0.6)
    turns[1].completion.request.sampling = SamplingParams(temperature=0.0)
    turns[2].completion.request = req
    s = Samples.from_turns(turns, pad_id=0)
    assert s.batch.extras[TEMPERATURE].tolist() == pytest.approx([0.6, 0.0, 0.1])


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"])
def test_policy_update_aggregates_by_loss_agg(store, mode):
    """On-policy (ratio 1) the PPO loss of a token is -A, so the step's loss is trainer.loss_agg's aggregate of -A
    over the whole batch, micro-batches of one row each included (the step's normaliser)."""
    from selfevo.optimizers.objectives import aggregate_loss

    reset(store, micro_batch=1)
    samples = samples_of(store, groups=["x", "x", "y", "y"])
    captured = CaptureStore()
    OPTIMIZERS.get("task_relative")(TrainerCfg(loss_agg=mode))(captured, "a", samples)
    adv = captured.batches[0].extras["adv"]
    want = float(aggregate_loss(-adv, samples.batch.loss_mask, mode))
    stats = OPTIMIZERS.get("task_relative")(TrainerCfg(loss_agg=mode))(store, "a0", samples)
    assert stats["loss"] == pytest.approx(want, rel=1e-5, abs=1e-7)
    assert len({round(float(a), 4) for a in adv[samples.batch.loss_mask > 0]}) > 1  # the rows differ in advantage


def test_loss_agg_changes_the_step_as_the_weights_say(store):
    """Rows of different lengths: with plain SGD (the update is minus the gradient) seq_mean_token_mean and
    token_mean move the adapter in different directions; the default is token_mean, the step before the key."""
    deltas = {}
    for mode in ("token_mean", "seq_mean_token_mean"):
        reset(store, max_grad_norm=1e9)
        store.adamws["a0"] = torch.optim.SGD(store.adapter_params("a0"), lr=1.0)
        before = snapshot(store)
        OPTIMIZERS.get("grpo")(TrainerCfg(loss_agg=mode))(store, "a0", samples_of(store))
        after = snapshot(store)
        deltas[mode] = torch.cat([(after[n] - before[n]).flatten() for n in before if "lora_" in n])
    a, b = deltas["token_mean"], deltas["seq_mean_token_mean"]
    assert TrainerCfg().loss_agg == "token_mean"
    assert a.norm() > 0 and b.norm() > 0
    assert float(torch.nn.functional.cosine_similarity(a, b, dim=0)) < 0.999  # not a rescaling of the same step


@pytest.mark.parametrize("epochs", [1, 2])
def test_first_mini_batch_ratio_is_exactly_one_with_lora_dropout(make_store, monkeypatch, epochs):
    """LoRA dropout 0.3, two parameter updates of two rows: the first step runs on the rollout policy, and its ratio is
    exactly 1 on every token (old log-probs from the same forward, the same dropout mask) — scored apart without
    dropout they differed by the dropped inputs; only the rows of later steps are scored beforehand."""
    from helpers.adapters import randomize_adapters
    from selfevo.policy import LoraSettings

    store = make_store(())
    store.add_agent("a0", "tiny-random", LoraSettings(r=8, alpha=16, dropout=0.3))
    randomize_adapters(store)  # B != 0: dropout changes the output
    ratios, scored_rows = [], []
    real_clip, real_score = base.ppo_clip_loss, base.score

    def clip(logp, old, *a, **k):
        ratios.append(torch.exp(logp.detach() - old)[a[1] > 0])
        return real_clip(logp, old, *a, **k)

    def count(store, agent, batch, *a):
        scored_rows.append((agent, batch.input_ids.shape[0]))
        return real_score(store, agent, batch, *a)

    monkeypatch.setattr(base, "ppo_clip_loss", clip)
    monkeypatch.setattr(base, "score", count)
    torch.manual_seed(0)
    stats = OPTIMIZERS.get("grpo")(TrainerCfg(train_batch=2, epochs=epochs))(store, "a0", samples_of(store))
    assert stats["parameter_updates"] == 2 * epochs
    assert scored_rows == [("a0", 2 if epochs == 1 else 4)]  # old log-probs only for the rows of later steps
    first = torch.cat(ratios[:1 if store.settings.micro_batch >= 2 else 2])
    assert first.numel() > 0 and torch.equal(first, torch.ones_like(first))
    later = torch.cat(ratios[1:])
    assert (later - 1).abs().max() > 1e-4  # later steps: the policy moved (and dropout perturbs the forward)
