"""Which sampling scheme a PyTorch ``DataLoader`` uses, and the description to account it.

A trainer should account the sampling it actually does: a shuffled ``DataLoader`` is not
Poisson sampling, and the Poisson number is not an upper bound for it
(:mod:`dpforge.accounting.shuffled`).  :func:`sampling_scheme` reads the loader's
(batch) sampler by class name, so neither torch nor Opacus is imported here:

=====================================================  ===================
loader                                                  scheme
=====================================================  ===================
Opacus ``UniformWithReplacementSampler`` (DPDataLoader),  ``"poisson"``
its distributed variant, dpforge's ``PoissonBatchSampler``
``shuffle=True`` (``RandomSampler``, no replacement)      ``"shuffled"``
``shuffle=False`` (``SequentialSampler``)                 ``"sequential"``
``RandomSampler(replacement=True)``                       ``"with-replacement"``
anything else                                             ``"unknown"``
=====================================================  ===================

:func:`loader_description` turns a loader and a mechanism into the description to account
(Poisson steps, or shuffled epochs that get a certified lower bound only) and refuses,
in one line, the loaders no dpforge engine can account.
"""

from __future__ import annotations

import math
from typing import Any

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms import Composed, Mechanism, PoissonSampled, Shuffled, WithRelation
from dpforge.mechanisms.sampling import require_relation
from dpforge.validation import require_count

_POISSON = ("UniformWithReplacementSampler", "DistributedUniformWithReplacementSampler", "PoissonBatchSampler")


def _rate(batch_sampler: Any) -> float:
    for name in ("sample_rate", "sampling_rate"):
        if hasattr(batch_sampler, name):
            return float(getattr(batch_sampler, name))
    raise UnsupportedError(f"{type(batch_sampler).__name__} does not state its sampling rate")


def sampling_scheme(loader: Any) -> str:
    """The scheme of ``loader`` (module table), from its ``batch_sampler``/``sampler``."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if type(batch_sampler).__name__ in _POISSON:
        return "poisson"
    sampler = getattr(batch_sampler, "sampler", None) or getattr(loader, "sampler", None)
    name = type(sampler).__name__
    if name == "RandomSampler":
        return "with-replacement" if getattr(sampler, "replacement", False) else "shuffled"
    if name == "SequentialSampler":
        return "sequential"
    return "unknown"


def loader_description(mechanism: Mechanism, loader: Any, epochs: int, relation: str = "add-remove") -> Any:
    """The description of ``epochs`` passes of ``loader``, each step releasing
    ``mechanism``: Poisson loaders give ``PoissonSampled`` steps (``len(loader)`` per
    epoch), shuffled loaders ``Shuffled`` epochs (``drop_last=False`` only: the lower
    bound's construction needs every record in a batch).  Other loaders raise
    UnsupportedError naming the scheme."""
    epochs = require_count("epochs", epochs)
    relation = require_relation(relation)
    scheme = sampling_scheme(loader)
    if scheme == "poisson":
        steps = len(loader) * epochs
        description: Any = Composed([(PoissonSampled(mechanism, _rate(loader.batch_sampler)), steps)])
    elif scheme == "shuffled":
        if getattr(loader, "drop_last", False):
            raise UnsupportedError("a shuffled DataLoader with drop_last=True is not accounted; use drop_last=False")
        batch = getattr(loader, "batch_size", None)
        if batch is None:
            raise ParameterError("the shuffled DataLoader has no batch_size")
        size = len(loader.dataset)
        if math.ceil(size / batch) != len(loader):  # pragma: no cover - torch keeps these equal
            raise UnsupportedError("the DataLoader's batches are not ceil(len(dataset) / batch_size)")
        description = Composed([(Shuffled(mechanism, int(batch), int(size)), epochs)])
    else:
        raise UnsupportedError(
            f"a {scheme} DataLoader has no certified accounting in dpforge: use Poisson sampling "
            "(Opacus DPDataLoader / dpforge's PoissonBatchSampler) or shuffle=True"
        )
    return description if relation == "add-remove" else WithRelation(description, relation)
