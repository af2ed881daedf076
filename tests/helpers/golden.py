"""Checksums of the adapters a pinned step wrote, for the golden tests."""
from pathlib import Path

import torch
from safetensors.torch import load_file


def adapter_checksums(folder: Path) -> dict:
    """Per agent folder under ``folder``: the sum, absolute sum and sum of squares of its adapter (in float64)."""
    out = {}
    for agent in sorted(p.name for p in folder.iterdir()):
        tensors = load_file(str(folder / agent / "adapter_model.safetensors"))
        flat = torch.cat([tensors[k].double().flatten() for k in sorted(tensors)])
        out[agent] = {"sum": float(flat.sum()), "abs": float(flat.abs().sum()), "sq": float((flat ** 2).sum())}
    return out
