"""Noise exactly once per global step under ``torch.distributed``.

In data-parallel DP training every rank clips and sums its own examples; the global
release is the all-reduced sum plus **one** draw of the calibrated noise.  Adding the
full noise on every rank would multiply its variance by the world size W for nothing;
adding std/W on every rank from independent streams would divide it by W and break the
guarantee.  :func:`noisy_all_reduce_` offers three correct ways:

* ``"rank0"`` (default): rank ``src`` adds one draw of the noise to its local sum, the
  other ranks add nothing, then the sums are all-reduced.  Works for every mechanism.
* ``"shared_seed"``: every rank holds an identically seeded generator (see
  :func:`shared_generator`), draws the *same* noise and adds noise / W; the all-reduced
  sum carries W * (noise / W) = the noise (up to rounding).  Works for every mechanism,
  and every rank knows the noise, so it suits ranks that trust each other as much as
  rank 0 is trusted in the first mode.  Ranks whose generators drift apart would add
  independent draws (variance divided by W): only use generators from
  :func:`shared_generator` and call this function on every rank in the same order.
* ``"gaussian_split"`` (Gaussian only): each rank adds independent N(0, std^2 / W) from
  its own differently seeded generator; the sum is N(0, std^2).  Refused for Laplace and
  LMO, whose sums of independent parts are not Laplace or LMO.

Without an initialised process group (or with one rank) the noise is simply added.
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.distributed as dist

from dpforge.errors import ParameterError
from dpforge.mechanisms.base import Gaussian, Mechanism
from dpforge.train.noise import (
    _compute_dtype,
    _resolve_device,
    _sample,
    _tensor_list,
    add_noise_,
    check_release,
)

__all__ = ["MODES", "is_distributed", "noisy_all_reduce_", "shared_generator"]

MODES = ("rank0", "shared_seed", "gaussian_split")


def is_distributed(group=None) -> bool:
    """True when a process group is initialised with more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def shared_generator(seed: int | None = None, device: torch.device | str = "cpu", group=None, src: int = 0) -> torch.Generator:
    """A generator seeded identically on every rank: ``src`` chooses the seed (``seed`` or a
    fresh one) and broadcasts it.  Call on every rank."""
    generator = torch.Generator(device=device)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    if is_distributed(group):
        backend_device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        value = torch.tensor([seed], dtype=torch.int64, device=backend_device)
        dist.broadcast(value, src=src, group=group)
        seed = int(value.item())
    generator.manual_seed(seed)
    return generator


def noisy_all_reduce_(
    tensors: torch.Tensor | Iterable[torch.Tensor],
    mechanism: Mechanism,
    generator: torch.Generator | None = None,
    *,
    mode: str = "rank0",
    src: int = 0,
    group=None,
) -> list[torch.Tensor]:
    """Sum ``tensors`` over the ranks in place and add ``mechanism``'s noise exactly once.

    Must be called on every rank with tensors of the same shapes.  See the module
    docstring for the modes.  The release checks of :func:`add_noise_` apply (a
    Laplace/LMO mechanism must describe exactly these coordinates).
    """
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    items = _tensor_list(tensors)
    check_release(mechanism, sum(t.numel() for t in items))
    _resolve_device(generator, items[0].device)
    if mode == "gaussian_split" and not isinstance(mechanism, Gaussian):
        raise ParameterError(
            f"mode 'gaussian_split' needs a Gaussian mechanism (a sum of independent {type(mechanism).__name__} "
            "draws is not one); use 'rank0' or 'shared_seed'"
        )
    if not is_distributed(group):
        return add_noise_(items, mechanism, generator)
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    with torch.no_grad():
        if mode == "rank0":
            if rank == src:
                add_noise_(items, mechanism, generator)
        elif mode == "shared_seed":
            compute = _compute_dtype(items[0].dtype)
            for tensor in items:
                noise = _sample(mechanism, tuple(tensor.shape), generator, tensor.device, compute)
                tensor.add_(noise.div_(world))
        else:
            split = Gaussian(mechanism.noise_multiplier / world**0.5, mechanism.sensitivity)
            add_noise_(items, split, generator)
        for tensor in items:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return items
