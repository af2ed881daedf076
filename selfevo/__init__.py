"""selfevo: multi-agent self-evolution of LLMs on shared roles, rewards and optimizers over LoRA adapters."""
__version__ = "0.1.0"
