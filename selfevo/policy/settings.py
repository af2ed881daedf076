"""The settings of a :class:`~selfevo.policy.store.PolicyStore`: its agents' LoRA adapters
(:class:`LoraSettings`), everything else about loading and updating them (:class:`StoreSettings`), and how packed
rows attend (:func:`ranges_attention`)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"

    @classmethod
    def of(cls, config) -> "LoraSettings":
        """The settings of an existing PEFT ``LoraConfig`` (its resolved target modules)."""
        targets = config.target_modules
        return cls(config.r, config.lora_alpha, config.lora_dropout,
                   sorted(targets) if isinstance(targets, (set, frozenset)) else targets)


PACKED_ATTENTION = ("auto", "ranges", "mask")
MASK_WIDTH = 2048  # auto on a GPU: packed rows up to this wide attend under the mask (bool, <= 4 MB per row)


def check_packed_attention(setting: str) -> str:
    """``setting`` if it names a packed attention (:data:`PACKED_ATTENTION`), else a one-line ValueError."""
    if setting not in PACKED_ATTENTION:
        raise ValueError(f"packed_attention must be one of {', '.join(PACKED_ATTENTION)}, not {setting!r}")
    return setting


def ranges_attention(setting: str, device_type: str, width: int = 0) -> bool:
    """Whether packed rows ``width`` tokens wide attend from their ranges (:func:`selfevo.attention.segmented_attention`)
    rather than under the ``L x L`` mask: ``ranges``/``mask`` as named; ``auto`` ranges on the CPU, and on a GPU
    for rows wider than :data:`MASK_WIDTH`. Ranges do the least arithmetic and build no mask, but call attention once
    per prompt and per row in every layer: one GRPO update of 64 rows (30 layers, micro-batch 8) dispatches 311k
    operations with ranges, 173k under the mask (29k with one micro-batch; benchmarks/update_ops.py). A GPU pays a
    launch for each whatever its size (an H100 spent 20-31 s on such an update of the embedded model: docs/scale.md),
    while the mask of a row up to MASK_WIDTH tokens is at most 4 MB."""
    if check_packed_attention(setting) != "auto":
        return setting == "ranges"
    return device_type == "cpu" or width > MASK_WIDTH


@dataclass
class StoreSettings:
    """How a :class:`~selfevo.policy.store.PolicyStore` loads its backbones and updates its agents
    (``build.policy_store`` makes one from ``model.*`` and ``trainer.*``); range checks give a one-line ValueError.

    ``dtype`` / ``device``: ``auto`` or a name (:func:`selfevo.models.resolve_dtype`, ``resolve_device``). ``lora``:
    every agent's adapter unless it names its own. ``lr``, ``betas``, ``weight_decay``: each agent's AdamW;
    ``optim_state_dtype`` float32 or bfloat16 (its moments: :class:`~selfevo.policy.adamw.CompactAdamW`).
    ``max_grad_norm``: the clip of a parameter update; ``micro_batch``: rows per forward. ``gradient_checkpointing``,
    ``shared_prompts``, ``logprob_temperature``: see the module doc; ``packed_attention``: :func:`ranges_attention`.
    ``heap_threshold``: the cap of glibc's mmap threshold during an update (:class:`selfevo.heap.LayerBlocks`);
    None leaves the process's malloc alone.
    """

    dtype: str = "auto"
    device: str = "cpu"
    lora: LoraSettings = field(default_factory=LoraSettings)
    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    optim_state_dtype: str = "float32"
    max_grad_norm: float = 1.0
    micro_batch: int = 8
    gradient_checkpointing: bool = False
    shared_prompts: bool = False
    packed_attention: str = "auto"
    logprob_temperature: float | None = None  # None: each row's sampling temperature (see the module doc)
    heap_threshold: int | None = None

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        check_packed_attention(self.packed_attention)
        if self.logprob_temperature is not None and not self.logprob_temperature > 0:
            raise ValueError(f"logprob_temperature must be None (each row's sampling temperature) or > 0, "
                             f"not {self.logprob_temperature!r}")
        if self.optim_state_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"optim_state_dtype must be float32 or bfloat16, not {self.optim_state_dtype!r}")
        if self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, not {self.micro_batch!r}")
        if not (self.lr >= 0 and self.weight_decay >= 0 and self.max_grad_norm > 0):
            raise ValueError(f"need lr >= 0, weight_decay >= 0 and max_grad_norm > 0, got {self.lr}, "
                             f"{self.weight_decay}, {self.max_grad_norm}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), not {self.betas!r}")
        if self.heap_threshold is not None and self.heap_threshold <= 0:
            raise ValueError(f"heap_threshold must be None or > 0 bytes, not {self.heap_threshold!r}")
