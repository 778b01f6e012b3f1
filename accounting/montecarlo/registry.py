"""Which sampler the Monte-Carlo accountant uses for a component: the registries of step
samplers and of draw-only pairs, the lookup :func:`step_sampler`, and the registration of
the LMO pair's draws.

Built in: the exact samplers of :mod:`.samplers` (Gaussian, Laplace, randomised
response; importance sampling after Wang, Mahloujifar, Wu, Jia & Mittal 2023), and plain
draws of the replace-one, fixed-size-batch and shuffled lower-bound pairs
(:mod:`dpforge.mechanisms.replace_pairs`).  A pair
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
from dpforge.mechanisms.replace_pairs import ReplaceOneGaussianPair, ShuffleMaxPair, SymmetrisedPair

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


# -- the pairs of other sampling schemes and the replace-one relation -----------------------
def _draw_base(pair, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """Outputs of a built-in base pair's P0 (``under="P"``) or Q0."""
    if isinstance(pair, GaussianPair):
        return rng.standard_normal(size) + (pair.mu if under == "P" else 0.0)
    if isinstance(pair, LaplacePair):
        return rng.laplace(0.0, 1.0, size) + (pair.a if under == "P" else 0.0)
    if isinstance(pair, RandomizedResponsePair):
        high = 1.0 / (1.0 + np.exp(-pair.epsilon)) if under == "P" else 1.0 / (1.0 + np.exp(pair.epsilon))
        return (rng.random(size) < high).astype(float)
    for cls in type(pair).__mro__:
        if cls in _PAIR_DRAWS:
            return np.asarray(_PAIR_DRAWS[cls](pair, under, size, rng), dtype=float)
    raise UnsupportedError(f"the montecarlo engine cannot draw from {type(pair).__name__}")


def _draw_positive_loss(loss, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of the remove-mixture loss R under P' (``under="P"``) or Q, given R > 0
    (by rejection: P'(R > 0) and Q(R > 0) are the mixture's, not tail, probabilities)."""
    out: list[np.ndarray] = []
    have = 0
    while have < size:
        batch = max(2 * (size - have), 1024)
        if under == "P":
            from_p0 = rng.random(batch) < loss.sampling_rate
            x = np.where(from_p0, _draw_base(loss.pair, "P", batch, rng), _draw_base(loss.pair, "Q", batch, rng))
        else:
            x = _draw_base(loss.pair, "Q", batch, rng)
        values = np.asarray(loss.privacy_loss(x), dtype=float)
        values = values[values > 0.0]
        out.append(values)
        have += values.size
    return np.concatenate(out)[:size]


def _draw_symmetrised(pair: SymmetrisedPair, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """A: R under P' on R > 0 (mass P'(R > 0)), -R under Q on R > 0 (mass Q(R > 0)), else 0;
    B: the negated draws of A (the pair is symmetric)."""
    loss = pair.loss
    plus, minus = float(loss.sf(0.0, "P")), float(loss.sf(0.0, "Q"))
    kind = rng.choice(3, size=size, p=np.array([plus, minus, max(1.0 - plus - minus, 0.0)]) / max(plus + minus + max(1.0 - plus - minus, 0.0), 1e-300))
    x = np.zeros(size)
    n_plus, n_minus = int((kind == 0).sum()), int((kind == 1).sum())
    if n_plus:
        x[kind == 0] = _draw_positive_loss(loss, "P", n_plus, rng)
    if n_minus:
        x[kind == 1] = -_draw_positive_loss(loss, "Q", n_minus, rng)
    return x if under == "P" else -x


def _draw_replace_one_gaussian(pair: ReplaceOneGaussianPair, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """(1-q) N(0,1) + q N(+-mu,1): +mu under P0, -mu under Q0."""
    shift = pair.mu if under == "P" else -pair.mu
    return rng.standard_normal(size) + np.where(rng.random(size) < pair.q, shift, 0.0)


def _draw_shuffle_max(pair: ShuffleMaxPair, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """The max of the epoch's T outputs (:meth:`ShuffleMaxPair.sample`)."""
    return pair.sample(under, size, rng)


register_pair_sampler(SymmetrisedPair, _draw_symmetrised)
register_pair_sampler(ReplaceOneGaussianPair, _draw_replace_one_gaussian)
register_pair_sampler(ShuffleMaxPair, _draw_shuffle_max)
