"""Data parallelism over ``torch.distributed``: launched by ``torchrun`` (or ``accelerate launch``), every rank holds
the whole policy store, rolls out its share of a step's episodes and trains on its share of each agent's rows.

    torchrun --nproc_per_node 2 -m selfevo run comas output_dir=runs/c2     # 2 processes, one step = 2 shards

:func:`init` starts the process group when the launcher says so (``WORLD_SIZE`` > 1 in the environment): gloo on
CPU, ``cpu:gloo,cuda:nccl`` where CUDA is present (object collectives and CPU tensors over gloo, CUDA tensors over
NCCL). Every helper is a no-op (or the identity) in a single process, so the loop kit calls them unconditionally.
What is split and what is reduced (see ``docs/scale.md``):

* rollouts: the runner runs the episodes ``i`` with ``i % world == rank`` and gathers the finished episodes into
  the global order on every rank (:func:`gather_shards`); request seeds are keyed per episode, so the result does
  not depend on the world size;
* updates: advantages over all of an agent's rows on every rank; each parameter update's rows dealt across ranks
  (:meth:`~selfevo.policy.SeqBatch.shard`), the adapter's gradients summed (:func:`all_reduce_grads`) before
  clipping — the loss normaliser is the step's global token count, so the sum is the single-process gradient;
* files: rank 0 alone writes logs, checkpoints and adapters (:func:`is_main`); the others wait at :func:`barrier`.
"""
from __future__ import annotations

import os
from typing import Any, Sequence, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def _dist():
    return dist if dist.is_available() else None


def launched() -> bool:
    """True when a launcher (torchrun, accelerate) started this process as one of several (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    """True when a process group of more than one rank is running."""
    dist = _dist()
    return dist is not None and dist.is_initialized() and dist.get_world_size() > 1


def init() -> bool:
    """Start the process group if launched as one of several processes and not started yet; True if running.

    Rendezvous by the launcher's environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``). With
    CUDA, ``LOCAL_RANK`` picks this process's GPU.
    """
    dist = _dist()
    if not launched() or dist is None:
        return False
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            backend = "cpu:gloo,cuda:nccl"
        else:
            backend = "gloo"
        dist.init_process_group(backend=backend)
    return active()


def shutdown() -> None:
    """Leave the process group (no barrier: also safe on a rank that fails alone, which torchrun then reports and
    whose peers it stops); nothing in a single process."""
    if active():
        _dist().destroy_process_group()


def rank() -> int:
    """This process's rank (0 in a single process; the launcher's ``RANK`` before :func:`init`)."""
    if active():
        return _dist().get_rank()
    return int(os.environ.get("RANK", "0")) if launched() else 0


def world_size() -> int:
    """The number of ranks (1 in a single process; the launcher's ``WORLD_SIZE`` before :func:`init`)."""
    if active():
        return _dist().get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1")) if launched() else 1


def is_main() -> bool:
    """Rank 0: the one process that writes files and prints progress."""
    return rank() == 0


def barrier() -> None:
    if active():
        _dist().barrier()


def all_reduce_sum(value: torch.Tensor | float) -> torch.Tensor | float:
    """The sum over ranks of a tensor (in place, also returned) or of a float (a new float)."""
    if not active():
        return value
    if isinstance(value, torch.Tensor):
        _dist().all_reduce(value)
        return value
    t = torch.tensor([float(value)], dtype=torch.float64)
    _dist().all_reduce(t)
    return float(t[0])


def all_reduce_grads(params: Sequence[torch.nn.Parameter]) -> None:
    """Sum the gradients of ``params`` over ranks in one flat fp32 message (a missing gradient counts as zeros: a
    rank with no rows still takes part); afterwards every rank holds the same summed ``.grad``."""
    if not active() or not params:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float() for p in params])
    _dist().all_reduce(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).to(p.dtype).clone()
        offset += n


def all_gather_object(obj: T) -> list[T]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (pickled); ``[obj]`` in a single process."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world_size()
    _dist().all_gather_object(out, obj)
    return out


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank."""
    if not active():
        return obj
    box = [obj]
    _dist().broadcast_object_list(box, src=src)
    return box[0]


def shard(items: Sequence[T]) -> list[T]:
    """This rank's share of ``items``: those at positions ``i`` with ``i % world == rank``."""
    return list(items[rank()::world_size()])


def gather_shards(n: int, mine: list[T]) -> list[T]:
    """The global list of ``n`` items from every rank's :func:`shard` of it (``mine``), in the original order."""
    if not active():
        return list(mine)
    world = world_size()
    out: list[Any] = [None] * n
    for r, part in enumerate(all_gather_object(mine)):
        out[r::world] = part
    return out
