"""PolicyStore: one model per backbone, one LoRA adapter (and AdamW) per agent, the reference policy for free.

- Agents on the same backbone share its frozen weights; each agent owns a PEFT LoRA adapter named after it.
- The reference policy is the same backbone with the adapter disabled: no second copy of the model.
- ``token_logprobs`` scores completions in micro-batches; ``update`` makes a parameter update (one AdamW step) of
  one agent only. Its settings are one :class:`StoreSettings`.
- ``logprob_temperature``: a row's tokens are scored at the temperature it was sampled at (the batch's
  :data:`~selfevo.policy.batch.TEMPERATURE` extra; greedy rows at 1), logits / T as verl and TRL score them, for the
  old log-probs, the current policy, the reference and the entropy alike; a number scores every sampled row at it.
  A batch without sampling temperatures (SFT's, a hand-built one) is scored at 1.
- ``gradient_checkpointing``: an update keeps only each decoder layer's input for the backward pass and runs the
  layer's forward again there (:func:`checkpointed_layers`): the activations of a micro-batch take one layer's
  worth instead of all layers' (one 700-token row on the 135M model: a 1.75 GiB peak without, 1.21 GiB with;
  docs/benchmarks.md), for one more forward pass per micro-batch; the same gradients (dropout masks replayed).
- ``shared_prompts``: rows that begin with the same prompt (a group's completions, a slate's candidates) are
  packed into one sequence per micro-batch, so the prompt's forward runs once (:mod:`selfevo.policy.packing`); the
  micro-batches keep a prompt's rows together (runs of at most ``micro_batch`` rows). A batch's extra
  :data:`~selfevo.policy.packing.SHARED_PREFIX` sets how much of each row is shared (default: its prompt). Same
  log-probs up to float rounding; with LoRA dropout the rows of a packed prompt share its dropout mask.
- Under ``torchrun`` every rank holds the whole store; ``update`` trains on the rank's share of the rows and sums
  the adapter's gradients over ranks (:mod:`selfevo.distributed`): every rank makes the same parameter update.
- Adapters save in PEFT format (``PeftModel.from_pretrained`` loads them) and load back.
- ``shapes`` (:class:`~selfevo.shapes.Shapes`) counts the passes run on this rank: ``train`` micro-batches (rows,
  padded width; as run, so packed ones as packed) and their rows (``row``: tokens), parameter updates (rows; the
  key ``optimizer``, as recorded runs name them), no-grad ``score`` micro-batches.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch
from safetensors.torch import load_file, save_file

from selfevo import distributed, heap, models
from selfevo.attention import segments_supported
from selfevo.policy.adamw import CompactAdamW
from selfevo.policy.batch import TEMPERATURE, SeqBatch
from selfevo.policy.lending import lent
from selfevo.policy.logprobs import chosen_entropy, chosen_logprobs, scoring_temperatures
from selfevo.policy.lora_compute import ActivationDtypeLoRA
from selfevo.policy.packing import SHARED_PREFIX, Packed, pack_shared_prompts, prompt_keys
from selfevo.policy.settings import LoraSettings, StoreSettings, ranges_attention
from selfevo.shapes import Shapes
from selfevo.types import Request

# peft is imported inside the methods that use it: it loads sympy (through torch's symbolic shapes), which the
# commands that only list or check things do not need.


@dataclass
class Backbone:
    name: str
    tokenizer: object
    model: object  # PeftModel once an agent exists, else the bare causal LM
    agents: list[str] = field(default_factory=list)

    @property
    def is_peft(self) -> bool:
        return bool(self.agents)

    @property
    def causal_lm(self):
        """The transformers causal LM (with LoRA layers injected, if any)."""
        return self.model.get_base_model() if self.is_peft else self.model


class PolicyStore:
    def __init__(self, settings: StoreSettings | None = None):
        self.settings = settings or StoreSettings()
        self.device = models.resolve_device(self.settings.device)
        self.dtype = models.resolve_dtype(self.settings.dtype, self.device)  # "auto": bf16 where native, else fp32
        self.layer_blocks = heap.LayerBlocks(self.settings.heap_threshold)  # glibc's mmap threshold in an update
        self.backbones: dict[str, Backbone] = {}
        self.agent_backbone: dict[str, str] = {}
        self.adamws: dict[str, torch.optim.Optimizer] = {}
        self.versions: dict[str, int] = {}
        self.references: dict[str, str] = {}  # agent -> its frozen reference adapter (:meth:`add_reference`)
        self.shapes = Shapes()  # the passes run (see the module doc)

    # ---- set-up -----------------------------------------------------------------------------------------------
    def backbone(self, name: str) -> Backbone:
        if name not in self.backbones:
            tok = models.load_tokenizer(name)
            self.backbones[name] = Backbone(name, tok, models.load_model(name, self.dtype, self.device))
        return self.backbones[name]

    def add_agent(self, agent: str, backbone: str = models.DEFAULT_MODEL, lora: LoraSettings | None = None) -> None:
        from peft import LoraConfig, get_peft_model

        if agent in self.agent_backbone:
            raise ValueError(f"agent '{agent}' exists already")
        bb, spec = self.backbone(backbone), lora or self.settings.lora
        cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                         target_modules=spec.target_modules, task_type="CAUSAL_LM")
        if bb.is_peft:
            bb.model.add_adapter(agent, cfg)
        else:
            bb.model = get_peft_model(bb.model, cfg, adapter_name=agent)
        bb.agents.append(agent)
        self.agent_backbone[agent] = backbone
        self.versions[agent] = 0

    def is_untrained(self, agent: str) -> bool:
        """Whether ``agent``'s adapter adds nothing to its backbone (every LoRA B matrix zero, as PEFT initialises
        it): the agent then answers as the backbone itself does."""
        bb = self.backbones[self.agent_backbone[agent]]
        key = f".lora_B.{agent}."
        return not any(key in name and bool(p.any()) for name, p in bb.model.named_parameters())

    def backbone_for(self, request: Request) -> str:
        """Which backbone serves a request: its agent's, else the named one, else the only one."""
        if request.agent is not None:
            if request.agent not in self.agent_backbone:
                raise KeyError(f"unknown agent '{request.agent}'; known: {', '.join(self.agent_backbone)}")
            return self.agent_backbone[request.agent]
        if request.backbone is not None:
            return request.backbone
        if len(self.backbones) != 1:
            raise ValueError("a request without agent must name its backbone when several are loaded")
        return next(iter(self.backbones))

    def tokenizer(self, agent: str):
        """The tokenizer of ``agent``'s backbone (what its rows are encoded and padded with)."""
        return self.backbones[self.agent_backbone[agent]].tokenizer

    def agents(self) -> list[str]:
        return list(self.agent_backbone)

    def add_reference(self, agent: str) -> str:
        """Freeze a copy of ``agent``'s adapter as it is now (adapter ``ref_<agent>``, same backbone and settings)
        and make it the agent's KL reference (:meth:`reference_of`); it is saved and restored like any adapter and
        never trained."""
        ref = f"ref_{agent}"
        bb = self.backbones[self.agent_backbone[agent]]
        self.add_agent(ref, bb.name, LoraSettings.of(bb.model.peft_config[agent]))
        params = dict(bb.model.named_parameters())
        with torch.no_grad():
            for name, p in params.items():
                if f".{agent}." in name and "lora_" in name:
                    params[name.replace(f".{agent}.", f".{ref}.")].copy_(p)
        self.references[agent] = ref
        return ref

    def reference_of(self, agent: str) -> str | None:
        """The agent's frozen reference adapter, or None: the backbone with adapters disabled."""
        return self.references.get(agent)

    def adapter_params(self, agent: str) -> list[torch.nn.Parameter]:
        model = self.backbones[self.agent_backbone[agent]].model
        return [p for n, p in model.named_parameters() if f".{agent}." in n and "lora_" in n]

    # ---- scoring ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _policy(self, agent: str | None, backbone: str) -> Iterator:
        """Activate ``agent``'s adapter (only its parameters get gradients) or, for None, the bare backbone."""
        bb = self.backbones[backbone]
        if agent is None:
            with (bb.model.disable_adapter() if bb.is_peft else contextlib.nullcontext()):
                yield bb
            return
        bb.model.set_adapter(agent)
        with ActivationDtypeLoRA(bb.model, agent):
            yield bb

    def token_logprobs(self, agent: str | None, batch: SeqBatch, backbone: str | None = None,
                       entropy: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """[B, T] log π(token_t | tokens_<t) at ``loss_mask`` positions, 0 elsewhere. Grad flows if enabled.

        ``agent=None`` scores the reference policy (adapter disabled) on ``backbone`` (default: the only one).
        ``entropy=True`` also returns [B, T] entropies of the distributions those tokens were drawn from (same
        positions; e.g. CLPO's entropy bonus), as ``(logp, entropy)``. Both at each row's scoring temperature
        (:meth:`temperatures`).
        """
        name = self.agent_backbone[agent] if agent is not None else (backbone or next(iter(self.backbones)))
        scored = batch.loss_mask[:, 1:] > 0
        packed = self._packed(batch)
        rows, width = packed.input_ids.shape if packed is not None else batch.input_ids.shape
        self.shapes.add("train" if torch.is_grad_enabled() else "score", rows, size=width)
        with self._policy(agent, name) as bb:
            lm = bb.causal_lm
            head = lm.get_output_embeddings().weight
            dev = head.device  # the batch lives on the CPU; the model where the store put it
            if torch.is_grad_enabled():  # the layer inputs kept for the backward: mapped, if the settings say so
                self.layer_blocks.fit(rows * width * lm.config.hidden_size * head.element_size())
            if packed is None:
                mask = None if batch.right_padded() else batch.attention_mask.to(dev)  # causal is enough
                hidden = lm.model(input_ids=batch.input_ids.to(dev), attention_mask=mask,
                                  use_cache=False).last_hidden_state[:, :-1][scored.to(dev)]
            else:  # token t of row i is predicted from the hidden state at its row's position t - 1
                # selfevo's attention runs the packed rows from their ranges where chosen; else the explicit mask
                use_ranges = segments_supported(lm.config) and ranges_attention(self.settings.packed_attention,
                                                                                dev.type, width)
                ranges = {"packed_segments": packed.segments} if use_ranges else {}
                hidden = lm.model(input_ids=packed.input_ids.to(dev), position_ids=packed.position_ids.to(dev),
                                  attention_mask=None if ranges else packed.mask.to(dev), use_cache=False,
                                  **ranges).last_hidden_state
                hidden = hidden.flatten(0, 1)[packed.where[:, :-1][scored].to(dev)]
            temps = self.temperatures(batch)
            temps = temps[:, None].expand(scored.shape)[scored].to(dev) if temps is not None else None
            logp = chosen_logprobs(hidden, head, batch.input_ids[:, 1:][scored].to(dev), temperature=temps)
            ent = chosen_entropy(hidden, head, temperature=temps) if entropy else None

        def grid(values: torch.Tensor) -> torch.Tensor:  # on the CPU, as the batch (a no-op on a CPU store)
            full = torch.zeros(scored.shape, dtype=torch.float32).masked_scatter(scored, values.float().cpu())
            return torch.cat([torch.zeros(batch.input_ids.shape[0], 1), full], dim=1)

        return (grid(logp), grid(ent)) if entropy else grid(logp)

    def temperatures(self, batch: SeqBatch) -> torch.Tensor | None:
        """[B] temperature each row is scored at (:func:`~selfevo.policy.logprobs.scoring_temperatures` of the
        batch's :data:`~selfevo.policy.batch.TEMPERATURE` extra and the store's ``logprob_temperature``); None when
        every row is scored at 1 (the logits as they are), as is a batch without sampling temperatures (SFT's)."""
        sampled = batch.extras.get(TEMPERATURE)
        if sampled is None:
            return None
        temps = scoring_temperatures(sampled, self.settings.logprob_temperature)
        return None if bool((temps == 1).all()) else temps

    def _packed(self, batch: SeqBatch) -> Packed | None:
        """The batch packed by shared prompt (:mod:`selfevo.policy.packing`) when that is on and saves a forward."""
        if not self.settings.shared_prompts or not batch.right_padded():
            return None
        return pack_shared_prompts(batch.input_ids, batch.attention_mask, batch.loss_mask,
                                   shared=batch.extras.get(SHARED_PREFIX))

    def micro_batches(self, batch: SeqBatch) -> list[SeqBatch]:
        """``batch`` cut into micro-batches of ``micro_batch`` rows (groups kept whole; see SeqBatch.micro_batches).
        With ``shared_prompts`` and no groups of its own, rows of one prompt go together (in runs of at most
        ``micro_batch`` rows), so that their micro-batch runs the prompt once."""
        shared = self.settings.shared_prompts
        prompts = prompt_keys(batch.input_ids, batch.attention_mask, batch.loss_mask,
                              batch.extras.get(SHARED_PREFIX)) if shared else []
        size = self.settings.micro_batch
        if batch.groups is None and len(set(prompts)) < len(prompts):
            seen: dict = {}
            keys = []
            for key in prompts:
                keys.append((key, seen.get(key, 0) // size))
                seen[key] = seen.get(key, 0) + 1
            return batch.with_groups(keys).micro_batches(size)
        return batch.micro_batches(size)

    def local_micro_batches(self, batch: SeqBatch) -> list[SeqBatch]:
        """This rank's micro-batches of a parameter update over ``batch``: in a data-parallel run its share of the
        rows (:meth:`SeqBatch.shard`, groups kept whole), else all of them."""
        mine = batch.shard(distributed.rank(), distributed.world_size())
        return self.micro_batches(mine) if mine is not None else []

    # ---- updates ----------------------------------------------------------------------------------------------
    def adamw(self, agent: str) -> torch.optim.Optimizer:
        """``agent``'s AdamW over its adapter (made on first use; checkpointed and resumed with the run)."""
        if agent not in self.adamws:
            st = self.settings
            kw = {"lr": st.lr, "betas": st.betas, "weight_decay": st.weight_decay}
            if st.optim_state_dtype == "float32":
                self.adamws[agent] = torch.optim.AdamW(self.adapter_params(agent), **kw)
            else:  # moments in bf16: half the AdamW memory of every agent (see selfevo.policy.adamw)
                self.adamws[agent] = CompactAdamW(self.adapter_params(agent), state_dtype=torch.bfloat16, **kw)
        return self.adamws[agent]

    def set_lr(self, lr: float) -> None:
        """The learning rate of every agent's AdamW from now on (a schedule calls this once per step)."""
        self.settings.lr = lr
        for opt in self.adamws.values():
            for group in opt.param_groups:
                group["lr"] = lr

    def update(self, agent: str, batch: SeqBatch | None, loss_fn: Callable[..., torch.Tensor],
               entropy: bool = False) -> dict:
        """One parameter update (an AdamW step) of ``agent`` over ``batch`` in micro-batches (``batch`` None: no row
        has a gradient, the update is made with zero gradients — AdamW still moves the weights by its moments and
        decay).

        ``loss_fn(logp [b, T], micro_batch) -> scalar`` must already be normalised for the whole update (e.g. a
        token mean with the update's total token count as normaliser), so that the gradients simply add up. With
        ``entropy=True`` it is called as ``loss_fn(logp, micro_batch, entropy [b, T])`` (see token_logprobs).

        Data-parallel (every rank calls this with the same ``batch``): each rank runs only its share of the rows,
        then the adapter's gradients and the loss are summed over ranks before clipping, so every rank makes the
        same parameter update — the single-process one, as the normaliser counts the whole update's tokens.
        """
        bb = self.backbones[self.agent_backbone[agent]]
        bb.model.train()
        opt = self.adamw(agent)
        opt.zero_grad(set_to_none=True)
        total, rows = 0.0, 0
        recompute = lambda layer: ActivationDtypeLoRA(layer, agent)  # noqa: E731  (what _policy does)
        checkpointing = self.settings.gradient_checkpointing
        with (checkpointed_layers(bb.causal_lm, recompute) if checkpointing else contextlib.nullcontext(),
              self.layer_blocks.restored()):
            for mb in self.local_micro_batches(batch) if batch is not None else []:
                self._count_rows(mb)
                rows += mb.input_ids.shape[0]
                if entropy:
                    logp, ent = self.token_logprobs(agent, mb, entropy=True)
                    loss = loss_fn(logp, mb, ent)
                else:
                    loss = loss_fn(self.token_logprobs(agent, mb), mb)
                loss.backward()
                total += float(loss.detach())
        params = self.adapter_params(agent)
        for p in params:  # a parameter no row reached has a zero gradient (AdamW skips a None one)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        distributed.all_reduce_grads(params)
        total = distributed.all_reduce_sum(total)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm))
        self.shapes.add("optimizer", size=rows)  # the key the recorded shapes (and the goldens) name updates by
        if math.isfinite(grad_norm):
            opt.step()
            self.versions[agent] += 1
        opt.zero_grad(set_to_none=True)
        bb.model.eval()
        return {"loss": total, "grad_norm": grad_norm, "skipped": not math.isfinite(grad_norm)}

    def _count_rows(self, mb: SeqBatch) -> None:
        for n in mb.attention_mask.sum(-1).tolist():
            self.shapes.add("row", size=n)

    # ---- persistence ------------------------------------------------------------------------------------------
    def save_adapter(self, agent: str, path: str | Path, zero: bool = False) -> Path:
        """Write ``agent``'s adapter as a standalone PEFT folder (``adapter_config.json`` + safetensors).

        ``zero=True`` writes an adapter of the same shape with all weights 0: the bare backbone, as a LoRA.
        """
        from peft import get_peft_model_state_dict

        model = self.backbones[self.agent_backbone[agent]].model
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = model.peft_config[agent]
        cfg.save_pretrained(str(path))
        state = get_peft_model_state_dict(model, adapter_name=agent)
        tensors = {k: (torch.zeros_like(v) if zero else v.detach()).contiguous() for k, v in state.items()}
        save_file(tensors, str(path / "adapter_model.safetensors"))
        return path

    def load_adapter(self, agent: str, path: str | Path) -> None:
        """Replace ``agent``'s adapter weights by those saved at ``path``; one-line error if they don't fit."""
        from peft import set_peft_model_state_dict

        file = Path(path) / "adapter_model.safetensors"
        if not file.exists():
            raise FileNotFoundError(f"no adapter_model.safetensors in '{path}'")
        model = self.backbones[self.agent_backbone[agent]].model
        result = set_peft_model_state_dict(model, load_file(str(file)), adapter_name=agent)
        missing = [k for k in result.missing_keys if f".{agent}." in k and "lora_" in k]
        if missing or result.unexpected_keys:
            raise ValueError(f"adapter at '{path}' does not fit agent '{agent}': "
                             f"{len(missing)} missing, {len(result.unexpected_keys)} unexpected tensors")
        self.versions[agent] += 1

    # ---- external trainers ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lend(self, agent: str) -> Iterator[tuple[object, object]]:
        """``(model, tokenizer)`` of ``agent`` for an external trainer (TRL's DPOTrainer, a hand-written loop): the
        backbone's PeftModel with the agent's adapter active, its LoRA weights the only trainable parameters, in
        train mode. Whatever trains it updates the agent's adapter in place; hand the trainer ``adamw(agent)`` to
        keep the AdamW state with the store (checkpointed and resumed with the run).

        On exit the store takes the model back as it was lent (:func:`selfevo.policy.lending.lent`) and bumps the
        agent's version (engines reload its weights).

        TRL (1.x) and the reference policy: given a PeftModel and ``ref_model=None``, DPOTrainer copies the adapter
        named ``default`` into a frozen ``ref`` adapter (the policy as it was before this training call) and fails
        when there is none; so name the agent ``default`` there, or pass a ``ref_model``. The borrower's updates are
        its own business: in a data-parallel run (torchrun) nothing here keeps the ranks' adapters in step.
        """
        bb = self.backbones[self.agent_backbone[agent]]
        try:
            with lent(bb.model, bb.causal_lm, agent, bb.agents) as model:
                yield model, bb.tokenizer
        finally:
            self.versions[agent] += 1


@contextlib.contextmanager
def checkpointed_layers(lm, recompute: Callable[[torch.nn.Module], contextlib.AbstractContextManager] | None = None
                        ) -> Iterator[int]:
    """Gradient checkpointing of ``lm``'s decoder layers (transformers' ``GradientCheckpointingLayer``s) while
    open, in train mode: a layer's forward keeps only its input, and runs again in the backward pass (non-reentrant
    ``torch.utils.checkpoint``, which replays the RNG state: the same dropout masks, the same gradients). The
    backward runs after the forward's contexts have closed, so ``recompute(layer)`` gives the context the layer's
    second forward runs in (the store's: the agent's LoRA in the activation dtype, as in the first). Yields the
    number of layers; layers already checkpointed (a borrower's setting) are left as they are."""
    from torch.utils.checkpoint import checkpoint, noop_context_fn
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in lm.modules() if isinstance(m, GradientCheckpointingLayer) and not m.gradient_checkpointing]
    for m in layers:
        contexts = (lambda m=m: (contextlib.nullcontext(), recompute(m))) if recompute else noop_context_fn
        m.gradient_checkpointing = True
        m._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=False, context_fn=contexts)
    try:
        yield len(layers)
    finally:
        for m in layers:
            for name in ("gradient_checkpointing", "_gradient_checkpointing_func"):
                vars(m).pop(name, None)
