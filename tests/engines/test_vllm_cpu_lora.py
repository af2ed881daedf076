"""The CPU multi-LoRA kernels that replace vLLM's (selfevo/engines/vllm_cpu_lora.py): the same sums as vLLM's own
for tokens with an adapter, no delta for tokens without one (vLLM's own gives them the last slot's adapter)."""
import pytest
import torch

ops = pytest.importorskip("vllm.lora.ops.torch_ops.lora_ops")

from selfevo.engines import vllm_cpu_lora as mine  # noqa: E402

IDX = torch.tensor([2, 0, 0, 1, 2, 2, 0])


def _data(four_d: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 12, generator=g)
    a = torch.randn(3, 4, 12, generator=g)  # [slots, r, in]
    b = torch.randn(3, 10, 4, generator=g)  # [slots, out, r]
    return x, (a.unsqueeze(1) if four_d else a), (b.unsqueeze(1) if four_d else b)


@pytest.mark.parametrize("four_d", [False, True])
def test_same_as_vllms_kernels_for_tokens_with_adapters(four_d):
    x, a, b = _data(four_d)
    for idx in (IDX, torch.full((7,), 1)):
        want, got = torch.zeros(7, 4), torch.zeros(7, 4)
        ops.bgmv_shrink(x, a, want, idx, 0.5)
        mine.bgmv_shrink(x, a, got, idx, 0.5)
        torch.testing.assert_close(got, want)
        base = torch.randn(7, 16)
        for add in (True, False):
            want_e, got_e = base.clone(), base.clone()
            ops.bgmv_expand(want, b, want_e, idx, add)
            mine.bgmv_expand(got, b, got_e, idx, add)
            torch.testing.assert_close(got_e, want_e)
            want_s, got_s = base.clone(), base.clone()
            ops.bgmv_expand_slice(want, b, want_s, idx, 3, 10, add)
            mine.bgmv_expand_slice(got, b, got_s, idx, 3, 10, add)
            torch.testing.assert_close(got_s, want_s)


def test_by_hand_and_no_adapter_gets_no_delta():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    a = torch.stack([torch.eye(2), 2 * torch.eye(2)])  # slot 0: identity, slot 1: doubles
    out = torch.full((3, 2), 7.0)
    mine.bgmv_shrink(x, a, out, torch.tensor([1, -1, 0]), 1.0)
    assert out.tolist() == [[2.0, 4.0], [0.0, 0.0], [5.0, 6.0]]
    out = torch.ones(3, 2)
    mine.bgmv_expand(x, a, out, torch.tensor([-1, -1, -1]), True)
    assert out.tolist() == [[1.0, 1.0]] * 3


def test_register_swaps_the_kernels_and_can_be_switched_off(monkeypatch):
    from vllm.lora.punica_wrapper import punica_cpu

    originals = {m: {n: getattr(m, n) for n in mine.KERNELS} for m in (ops, punica_cpu)}
    try:
        sentinels = {n: object() for n in mine.KERNELS}
        for m in (ops, punica_cpu):
            for n, s in sentinels.items():
                setattr(m, n, s)
        monkeypatch.setenv("SELFEVO_VLLM_CPU_LORA", "0")
        mine.register()
        assert all(getattr(m, n) is s for m in (ops, punica_cpu) for n, s in sentinels.items())
        monkeypatch.setenv("SELFEVO_VLLM_CPU_LORA", "1")
        mine.register()
        assert all(getattr(m, n) is fn for m in (ops, punica_cpu) for n, fn in mine.KERNELS.items())
    finally:
        for m, fns in originals.items():
            for n, fn in fns.items():
                setattr(m, n, fn)
