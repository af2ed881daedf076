"""model.device: where the policy store keeps backbones and adapters."""
import pytest


def test_devices_resolve_and_refuse_what_is_not_there(monkeypatch):
    """``model.device``: cpu is cpu; auto is this rank's GPU when CUDA is available, else cpu; cuda without CUDA
    is a one-line error (and a config key, range-checked before any work)."""
    import torch

    from selfevo.models import resolve_device

    assert resolve_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="one of auto, cpu, cuda"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("auto") == resolve_device("cuda") == "cuda:3"  # torchrun: each rank its own GPU
    assert resolve_device("cpu") == "cpu"
