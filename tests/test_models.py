"""Models (selfevo.models): names resolved (embedded, local folders, the hub) with one-line errors, the embedded model
and its chat template, and ``model.device`` (where the policy store keeps backbones and adapters)."""
import pytest

from selfevo import models


def test_unknown_model_is_one_line_with_suggestion():
    with pytest.raises(models.ModelError) as e:
        models.resolve("smollm2-135m-instruc")
    assert "did you mean 'smollm2-135m-instruct'" in str(e.value) and "\n" not in str(e.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(models.ModelError, match="no config.json"):
        models.resolve(str(tmp_path))


def test_hub_id_goes_through_snapshot_download(monkeypatch, tmp_path):
    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: calls.append(repo) or str(tmp_path))
    assert models.resolve("Qwen/Qwen2.5-3B-Instruct") == str(tmp_path)
    assert calls == ["Qwen/Qwen2.5-3B-Instruct"]


def test_hub_failure_is_one_line(monkeypatch):
    import huggingface_hub

    def fail(repo, **kw):
        raise OSError("network unreachable\nmore detail")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(models.ModelError) as e:
        models.resolve("org/model")
    assert "\n" not in str(e.value) and "network unreachable" in str(e.value)


@pytest.mark.slow
def test_embedded_model_loads_with_chat_template():
    tok = models.load_tokenizer("smollm2-135m-instruct")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>assistant" in text
    model = models.load_model("smollm2-135m-instruct")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


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
    # resolving twice changes nothing (the loop resolves model.device, then the store it builds resolves again)
    assert resolve_device(resolve_device("auto")) == resolve_device("cuda:3") == "cuda:3"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda:0")


def test_half_precision_on_a_cpu_without_it_warns_once_and_float32_never(monkeypatch, caplog):
    """bfloat16 on a CPU whose oneDNN has no bf16 matmuls (AVX2 only) runs several times slower than float32: a
    warning that names the key, once per process; float32, or a CPU that has it, loads without one."""
    import torch

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert models.cpu_has_native("bfloat16") is False
    models._warn_slow_half.cache_clear()
    with caplog.at_level("WARNING", logger="selfevo.models"):
        models.load_model("tiny-random", dtype="bfloat16")
        models.load_model("tiny-random", dtype="bfloat16")
        models.load_model("tiny-random", dtype="float32")
    warned = [r.getMessage() for r in caplog.records if "without native bfloat16" in r.getMessage()]
    assert len(warned) == 1 and "model.dtype=float32" in warned[0]
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert models.cpu_has_native("bfloat16") is True


def test_auto_dtype_is_bf16_only_where_computed_natively(monkeypatch):
    """model.dtype=auto: bfloat16 on a CPU with native bf16 matmuls (AVX512-BF16/AMX) or a CUDA GPU with bf16,
    float32 elsewhere (the capability probes faked); explicit dtypes pass through unchanged."""
    import torch

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert models.resolve_dtype("auto", "cpu") == "float32"
    assert models.resolve_dtype("bfloat16", "cpu") == "bfloat16"  # asked for: kept (load_model warns)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert models.resolve_dtype("auto", "cpu") == "bfloat16"
    assert models.resolve_dtype("float32", "cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert models.resolve_dtype("auto", "cuda:0") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert models.resolve_dtype("auto", "cuda:0") == "bfloat16"


def test_auto_dtype_loads_float32_on_an_avx2_cpu_without_a_warning(monkeypatch, caplog):
    import torch

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    models._warn_slow_half.cache_clear()
    with caplog.at_level("WARNING", logger="selfevo.models"):
        model = models.load_model("tiny-random", dtype="auto")
    assert next(model.parameters()).dtype == torch.float32
    assert not [r for r in caplog.records if "without native" in r.getMessage()]
