"""Frozen descriptions of single noisy releases (what happened, not how to count it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.pairs import (
    Direction,
    GaussianPair,
    LaplacePair,
    MonotonePair,
    PrivacyLoss,
    RandomizedResponsePair,
)
from dpforge.validation import require_count, require_non_negative, require_positive

DIRECTIONS: tuple[Direction, ...] = ("remove", "add")


class Mechanism:
    """A single release with a dominating pair whose log-likelihood ratio is monotone."""

    #: True when the remove and add privacy-loss laws of the bare mechanism coincide
    symmetric: bool = True

    def dominating_pair(self) -> MonotonePair:  # pragma: no cover - abstract
        """The base pair (P0, Q0) with monotone log-likelihood ratio that dominates this
        release (subclasses implement it)."""
        raise NotImplementedError

    def privacy_loss_distribution(self, direction: Direction = "remove") -> PrivacyLoss:
        """Law of the privacy loss without subsampling in one neighbouring direction."""
        return PrivacyLoss(self.dominating_pair(), 1.0, direction)

    def privacy_loss(self, x: np.ndarray | float, direction: Direction = "remove") -> np.ndarray:
        """L(x) = log p(x)/q(x) at an output x of the dominating pair."""
        return self.privacy_loss_distribution(direction).privacy_loss(x)


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: noise N(0, (noise_multiplier * sensitivity)^2) on an L2-sensitivity query.

    Dominating pair N(sensitivity, std^2) vs N(0, std^2), equivalently N(1/sigma, 1) vs
    N(0, 1) with sigma = ``noise_multiplier`` (Balle & Wang 2018).
    """

    noise_multiplier: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        require_positive("noise_multiplier", self.noise_multiplier)
        require_positive("sensitivity", self.sensitivity)

    def dominating_pair(self) -> GaussianPair:
        """``GaussianPair(mu=1/noise_multiplier)``: N(1/sigma, 1) vs N(0, 1); the
        sensitivity cancels because the noise std scales with it."""
        return GaussianPair(mu=1.0 / float(self.noise_multiplier))


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace mechanism: independent noise Lap(0, scale) on each of ``dimension``
    coordinates of a query with sensitivity ``sensitivity`` in ``norm`` ("l1" or "l2").

    The scalar release has dominating pair Lap(sensitivity, scale) vs Lap(0, scale) and
    is (sensitivity/scale)-DP (Dwork, McSherry, Nissim, Smith 2006).  A vector release
    with an L2 sensitivity is not a scalar mechanism (docs/design.md §5): only the RDP
    engine accounts it, through its vector guard.
    """

    scale: float
    sensitivity: float = 1.0
    dimension: int = 1
    norm: str = "l1"

    def __post_init__(self) -> None:
        require_positive("scale", self.scale)
        require_positive("sensitivity", self.sensitivity)
        object.__setattr__(self, "dimension", require_count("dimension", self.dimension, maximum=None))
        if self.norm not in ("l1", "l2"):
            raise ParameterError(f"norm must be one of l1, l2, got {self.norm!r}")

    def dominating_pair(self) -> LaplacePair:
        """``LaplacePair(a=sensitivity/scale)``: Lap(a, 1) vs Lap(0, 1); raises
        ValueError for ``dimension != 1`` (a vector release has no scalar pair)."""
        if self.dimension != 1:
            raise UnsupportedError(
                f"Laplace with dimension={self.dimension} has no one-dimensional dominating pair: "
                "a vector release must not be accounted as a scalar one; use engine='rdp' "
                "(its vector guard bounds the worst shift over the sensitivity ball)"
            )
        return LaplacePair(a=float(self.sensitivity) / float(self.scale))


@dataclass(frozen=True)
class PureDP(Mechanism):
    """Any epsilon-DP release, represented by its dominating pair: randomised response.

    Kairouz, Oh, Viswanath (2015): binary randomised response with
    Pr(truth) = e^eps/(1+e^eps) dominates every epsilon-DP mechanism.
    """

    epsilon: float

    def __post_init__(self) -> None:
        require_non_negative("epsilon", self.epsilon)

    def dominating_pair(self) -> RandomizedResponsePair:
        """``RandomizedResponsePair(epsilon)``, which dominates every epsilon-DP
        mechanism (Kairouz, Oh, Viswanath 2015)."""
        return RandomizedResponsePair(epsilon=float(self.epsilon))


#: Randomised response is the canonical pure-DP pair; the two names are one class.
RandomizedResponse = PureDP
