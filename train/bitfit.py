"""DP-BiTFiT (Bu, Wang, Zha, Karypis 2022): fine-tune only the bias terms.

Freezing every non-bias parameter shrinks what DP-SGD clips and noises (and what DP-ZO
perturbs) to a tiny fraction of the model; the privacy accounting is unchanged (the
noise step sees fewer coordinates, not a different mechanism).
"""

from __future__ import annotations

from dpforge.errors import ParameterError

from typing import Iterable

import torch

__all__ = ["freeze_all_but_bias", "is_bias"]


def is_bias(name: str) -> bool:
    """True for parameters named ``bias`` or ``<module>.bias``."""
    return name == "bias" or name.endswith(".bias")


def freeze_all_but_bias(model: torch.nn.Module, keep: Iterable[str] = ()) -> float:
    """Set ``requires_grad`` to True for bias parameters (and the names in ``keep``, e.g. a
    new classifier head) and to False for every other parameter, as DP-BiTFiT does (Bu,
    Wang, Zha, Karypis 2022); return the trainable fraction (trainable elements / all
    elements).

    Raises ValueError when a name in ``keep`` is not a parameter or nothing would be
    trainable (a model without biases).
    """
    if not isinstance(model, torch.nn.Module):
        raise ParameterError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    named = list(model.named_parameters())
    keep = set(keep)
    unknown = keep - {name for name, _ in named}
    if unknown:
        raise ParameterError(f"keep names parameters the model does not have: {', '.join(sorted(unknown))}")
    trainable = {name for name, _ in named if is_bias(name) or name in keep}
    if not trainable:
        raise ParameterError("the model has no bias parameters (and keep is empty): nothing would be trainable")
    total = trained = 0
    for name, parameter in named:
        train = name in trainable
        parameter.requires_grad_(train)
        total += parameter.numel()
        trained += parameter.numel() if train else 0
    return trained / total
