"""Which sampler the Monte-Carlo accountant uses for a component: the registries of step
samplers and of draw-only pairs, the lookup :func:`step_sampler`, and the registration of
the LMO pair's draws.

Built in: the exact samplers of :mod:`.samplers` (Gaussian, Laplace, randomised
response; importance sampling after Wang, Mahloujifar, Wu, Jia & Mittal 2023).  A pair
type plugged in with :func:`register_pair_sampler` gives only draws of P0 and Q0 and is
sampled by :class:`~dpforge.accounting.montecarlo.generic.NumpyStepSampler` (tilted by
rejection when its r is bounded, plainly otherwise); :func:`register_step_sampler`
plugs in a full :class:`~dpforge.accounting.montecarlo.samplers.StepSampler`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dpforge.accounting.montecarlo.generic import NumpyStepSampler
from dpforge.accounting.montecarlo.samplers import (
    GaussianStepSampler,
    LaplaceStepSampler,
    RandomizedResponseStepSampler,
    StepSampler,
)
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.combinators import Component
from dpforge.mechanisms.pairs import Direction, GaussianPair, LaplacePair, MonotonePair, RandomizedResponsePair

_STEP_SAMPLERS: dict[type, Callable[[Component, Direction], StepSampler]] = {
    GaussianPair: GaussianStepSampler,
    LaplacePair: LaplaceStepSampler,
    RandomizedResponsePair: RandomizedResponseStepSampler,
}
_PAIR_DRAWS: dict[type, Callable] = {}


def register_pair_sampler(pair_type: type, draw: Callable) -> None:
    """Let the Monte-Carlo engine sample a new pair type plainly.

    ``draw(pair, under, size, rng)`` returns ``size`` outputs x of P0 (``under="P"``) or
    Q0 (``under="Q"``) as an array; the loss is computed with the pair's
    ``log_likelihood_ratio``.  Plain sampling (no importance sampling) can certify only
    delta of order 1 / samples or larger.
    """
    if not (isinstance(pair_type, type) and issubclass(pair_type, MonotonePair)):
        raise ParameterError(f"pair_type must be a MonotonePair subclass, got {pair_type!r}")
    _PAIR_DRAWS[pair_type] = draw


def register_step_sampler(pair_type: type, factory: Callable[[Component, Direction], StepSampler]) -> None:
    """Register a full :class:`StepSampler` (e.g. with tilted kernels) for a pair type."""
    if not (isinstance(pair_type, type) and issubclass(pair_type, MonotonePair)):
        raise ParameterError(f"pair_type must be a MonotonePair subclass, got {pair_type!r}")
    _STEP_SAMPLERS[pair_type] = factory


def step_sampler(component: Component, direction: Direction) -> StepSampler:
    """The sampler of ``component`` in ``direction`` (registered step samplers first)."""
    pair_type = type(component.mechanism.dominating_pair())
    for cls in pair_type.__mro__:
        if cls in _STEP_SAMPLERS:
            return _STEP_SAMPLERS[cls](component, direction)
    for cls in pair_type.__mro__:
        if cls in _PAIR_DRAWS:
            return NumpyStepSampler(component, direction, _PAIR_DRAWS[cls])
    raise UnsupportedError(
        f"the montecarlo engine has no sampler for {type(component.mechanism).__name__} "
        f"(pair {pair_type.__name__}); register one with register_pair_sampler"
    )


def _draw_lmo(pair, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """LMO pair: Q0 = the noise, P0 = the noise shifted by the sensitivity."""
    noise = pair.mechanism.sample(size, rng)
    return noise + pair.a if under == "P" else noise


try:  # the LMO pair is sampled through the plug-in interface (NumPy draws, bounded r)
    from dpforge.mechanisms.lmo import LMOPair
except ImportError:  # pragma: no cover - LMO not available
    pass
else:
    register_pair_sampler(LMOPair, _draw_lmo)
