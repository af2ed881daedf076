"""CompactAdamW: torch's AdamW equations with the moments stored in bf16 between steps."""
import copy

import pytest
import torch

from selfevo.policy.adamw import CompactAdamW


def _run(opt_cls, steps=5, **kw):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(64, 32))
    opt = opt_cls([p], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, **kw)
    for i in range(steps):
        g = torch.Generator().manual_seed(i)
        p.grad = torch.randn(p.shape, generator=g) * (i + 1)
        opt.step()
    return p.detach().clone(), opt


def test_fp32_state_is_torch_adamw():
    want, _ = _run(torch.optim.AdamW)
    got, _ = _run(CompactAdamW, state_dtype=torch.float32)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_bf16_state_is_close_to_torch_adamw_and_half_the_memory():
    want, ref = _run(torch.optim.AdamW)
    got, opt = _run(CompactAdamW)
    assert (got - want).abs().max() < 1e-3  # 5 steps of ≤ lr = 1e-2 each; bf16 moments move it by < 10%
    state = next(iter(opt.state.values()))
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16
    ref_bytes = sum(t.numel() * t.element_size() for s in ref.state.values() for t in s.values() if t.dim())
    own_bytes = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if t.dim())
    assert own_bytes * 2 == ref_bytes


def test_first_step_by_hand():
    """Step 1 of AdamW: m = (1-b1) g, v = (1-b2) g², update = lr · m̂ / (√v̂ + eps) = lr · sign(g) (eps aside)."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = CompactAdamW([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.0)
    p.grad = torch.tensor([0.5, -4.0, 0.0])
    opt.step()
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, -1.9, 0.5]), atol=1e-6, rtol=0)
    assert float(opt.state[p]["exp_avg"][1]) == pytest.approx(-0.4, rel=2 ** -8)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="invalid AdamW"):
        CompactAdamW([torch.nn.Parameter(torch.zeros(1))], betas=(1.0, 0.9))


def test_state_dict_roundtrip_keeps_bf16_moments_and_continues_identically():
    _, opt = _run(CompactAdamW, steps=3)
    p = opt.param_groups[0]["params"][0]
    saved, start = copy.deepcopy(opt.state_dict()), p.detach().clone()  # as a checkpoint file would
    q = torch.nn.Parameter(start.clone())
    fresh = CompactAdamW([q], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    fresh.load_state_dict(saved)
    assert fresh.state[q]["exp_avg"].dtype == torch.bfloat16
    for o, x in ((opt, p), (fresh, q)):
        x.grad = torch.ones_like(x)
        o.step()
    torch.testing.assert_close(q.detach(), p.detach(), atol=0, rtol=0)
