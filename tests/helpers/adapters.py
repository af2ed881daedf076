"""Adapters that really differ between agents (fresh LoRA adapters are the identity)."""
import torch


def randomize_adapters(store, std=0.3, seed=0):
    """Fresh adapters are the identity (B=0); give them random B so agents really differ."""
    gen = torch.Generator().manual_seed(seed)
    for agent in store.agents():
        for name, p in store.backbones[store.agent_backbone[agent]].model.named_parameters():
            if f".{agent}." in name and "lora_B" in name:
                p.data.copy_(torch.randn(p.shape, generator=gen) * std)
        store.versions[agent] += 1
