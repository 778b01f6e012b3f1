"""Dominating pairs for the replace-one relation, for sampling without replacement, and the
lower-bound pair of a shuffled epoch (docs/design.md §2).

All three are :class:`~dpforge.mechanisms.pairs.MonotonePair` subclasses, so every engine
reads them through its generic path (a pair at sampling rate 1):

* :class:`ReplaceOneGaussianPair` -- Poisson-subsampled Gaussian under replace-one:
  P0 = (1-q) N(0,1) + q N(mu,1) vs Q0 = (1-q) N(0,1) + q N(-mu,1), mu = 1/noise_multiplier:
  the record is sampled with probability q and its clipped contribution (norm <= 1, in units
  of the clipping norm) is +e before and -e after the replacement.  This is the pair of
  dp-accounting's ``GaussianPrivacyLoss`` with ``AdjacencyType.REPLACE`` (mu_upper / mu_lower,
  privacy_loss_mechanism.py) and the tight pair of Schuchardt et al. 2024 (Unified
  mechanism-specific amplification by subsampling, substitution relation).  The pair is
  symmetric (x -> -x swaps P0 and Q0), so it dominates both orders of a neighbouring pair.
* :class:`SymmetrisedPair` -- sampling without replacement (batch B of n, q = B/n) under
  replace-one, for any mechanism whose replace-one pair (P, Q) is symmetric (Dong, Roth, Su
  2019, Thm. 4.2: the subsampled mechanism is C_q(f)-DP, f = T(P, Q); Zhu, Dong, Wang 2022,
  Thm. 10: H_a'(M(D) || M(D')) <= H_a'((1-q) Q + q P || Q) for a' >= 1).  The remove-type
  mixture (1-q) Q + q P vs Q alone is *not* a dominating pair for a composition (its profile
  at a < 1 is not the reverse order's), so the pair used is the symmetrisation C_q(f): with R
  the privacy loss of the mixture pair, the law of L under A is

      R under (1-q)Q+qP on (0, inf),  -R under Q on R > 0 (mirrored),  an atom at 0 with the rest,

  and B = e^{-L} A.  Its profile equals the mixture's for eps >= 0 and it dominates both
  orders for every order a >= 0, so compositions of it are certified.  The same pair serves
  Poisson sampling under replace-one for non-Gaussian mechanisms (joint convexity: the
  unsampled, added and replaced outputs are pairwise within the replace-one pair).
* :class:`ShuffleMaxPair` -- the pair of a test on one shuffled epoch of T steps: outputs of
  T Gaussian sums where the differing record lands in one unknown step, seen through the
  statistic max_j X_j: Q_max(t) = Phi(t)^T (record absent or replaced by a zero
  contribution) vs P_max(t) = Phi(t - mu) Phi(t)^(T-1) (record present, whichever step
  holds it).  By data processing its profile is a certified *lower* bound on the shuffled
  epoch's (Chua et al. 2024, How private are DP-SGD implementations?; Annamalai et al.
  2024): it is never an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy import special

from dpforge.mechanisms.pairs import MonotonePair, PrivacyLoss, Under

#: points of the monotone table from which the inverse of r is bisected
_TABLE_POINTS = 4097
_BISECTIONS = 48


def _invert_increasing(function: Callable[[np.ndarray], np.ndarray], values: np.ndarray, low: float, high: float) -> np.ndarray:
    """x with function(x) = value for an increasing ``function``, by a table bracket then
    bisection (to about 1e-14 of the bracket); values outside the table's range map to
    its ends (where every distribution function is already 0 or 1)."""
    values = np.asarray(values, dtype=float)
    grid = np.linspace(low, high, _TABLE_POINTS)
    table = function(grid)
    index = np.clip(np.searchsorted(table, values), 1, _TABLE_POINTS - 1)
    left, right = grid[index - 1], grid[index]
    for _ in range(_BISECTIONS):
        middle = 0.5 * (left + right)
        below = function(middle) < values
        left = np.where(below, middle, left)
        right = np.where(below, right, middle)
    x = 0.5 * (left + right)
    x = np.where(values <= table[0], low, x)
    return np.where(values >= table[-1], high, x)


@dataclass(frozen=True)
class ReplaceOneGaussianPair(MonotonePair):
    """P0 = (1-q) N(0,1) + q N(mu,1) vs Q0 = (1-q) N(0,1) + q N(-mu,1) (see the module
    docstring), r(x) = log(1 - q + q e^{mu x - mu^2/2}) - log(1 - q + q e^{-mu x - mu^2/2}),
    increasing in x; 0 < q < 1."""

    mu: float
    q: float

    r_min = -np.inf
    r_max = np.inf

    def log_likelihood_ratio(self, x):
        """r(x), each log(1 - q + q e^s) computed as logaddexp(log(1-q), log q + s)."""
        x = np.asarray(x, dtype=float)
        a, b = np.log1p(-self.q), np.log(self.q)
        half = 0.5 * self.mu**2
        return np.logaddexp(a, b + self.mu * x - half) - np.logaddexp(a, b - self.mu * x - half)

    def _x_of(self, c) -> np.ndarray:
        span = 40.0 + 1000.0 / self.mu
        return _invert_increasing(self.log_likelihood_ratio, np.asarray(c, dtype=float), -span, span)

    def _cdf_x(self, x: np.ndarray, under: Under) -> np.ndarray:
        shift = self.mu if under == "P" else -self.mu
        return (1.0 - self.q) * special.ndtr(x) + self.q * special.ndtr(x - shift)

    def _sf_x(self, x: np.ndarray, under: Under) -> np.ndarray:
        shift = self.mu if under == "P" else -self.mu
        return (1.0 - self.q) * special.ndtr(-x) + self.q * special.ndtr(shift - x)

    def r_cdf(self, c, under, inclusive=True):
        """Pr(r <= c) = Pr(X <= x(c)) under the mixture (r is continuous)."""
        return self._cdf_x(self._x_of(c), under)

    def r_sf(self, c, under, inclusive=False):
        """Pr(r > c) = Pr(X > x(c)), computed from the survival functions (upper tail)."""
        return self._sf_x(self._x_of(c), under)


@dataclass(frozen=True)
class SymmetrisedPair(MonotonePair):
    """The symmetrisation C_q(f) of a remove-type mixture law (module docstring); outputs
    are privacy-loss values, so r(x) = x.  ``loss`` must be a remove-direction
    :class:`PrivacyLoss` of a symmetric base pair."""

    loss: PrivacyLoss
    zero_mass: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.loss.direction != "remove":
            raise ValueError("SymmetrisedPair needs the remove-direction law")  # internal misuse
        mass = 1.0 - float(self.loss.sf(0.0, "P")) - float(self.loss.sf(0.0, "Q"))
        if mass < -1e-12:  # pragma: no cover - impossible for a symmetric base pair (see docs)
            raise ValueError(f"the symmetrised law would have a negative mass {mass} at 0")
        object.__setattr__(self, "zero_mass", max(mass, 0.0))

    @property
    def r_max(self) -> float:  # type: ignore[override]
        """The largest loss of the mixture law (may be infinite)."""
        return float(self.loss.support[1])

    @property
    def r_min(self) -> float:  # type: ignore[override]
        """Minus :attr:`r_max` (the law is symmetric)."""
        return -self.r_max

    @property
    def atoms(self) -> tuple[float, ...]:
        """The mixture law's positive atoms, mirrored, and 0."""
        positive = [a for a in self.loss.atoms if a > 0]
        return tuple(sorted({0.0, *positive, *(-a for a in positive)}))

    def log_likelihood_ratio(self, x):
        """r(x) = x: an output is its own privacy loss."""
        return np.asarray(x, dtype=float)

    def _a_cdf(self, c: np.ndarray, inclusive: bool) -> np.ndarray:
        """A(L <= c) (inclusive) or A(L < c)."""
        loss = self.loss
        if inclusive:  # c < 0: Q(R >= -c);  c >= 0: 1 - P'(R > c)
            negative = loss.sf(-np.minimum(c, 0.0), "Q", inclusive=True)
            positive = 1.0 - loss.sf(np.maximum(c, 0.0), "P", inclusive=False)
            return np.where(c < 0.0, negative, positive)
        negative = loss.sf(-np.minimum(c, 0.0), "Q", inclusive=False)  # c <= 0: Q(R > -c)
        positive = 1.0 - loss.sf(np.maximum(c, 0.0), "P", inclusive=True)  # c > 0: 1 - P'(R >= c)
        return np.where(c <= 0.0, negative, positive)

    def _a_sf(self, c: np.ndarray, inclusive: bool) -> np.ndarray:
        """A(L > c) or, inclusive, A(L >= c)."""
        loss = self.loss
        if inclusive:  # c > 0: P'(R >= c);  c <= 0: 1 - Q(R > -c)
            positive = loss.sf(np.maximum(c, 0.0), "P", inclusive=True)
            negative = 1.0 - loss.sf(-np.minimum(c, 0.0), "Q", inclusive=False)
            return np.where(c > 0.0, positive, negative)
        positive = loss.sf(np.maximum(c, 0.0), "P", inclusive=False)  # c >= 0: P'(R > c)
        negative = 1.0 - loss.sf(-np.minimum(c, 0.0), "Q", inclusive=True)  # c < 0: 1 - Q(R >= -c)
        return np.where(c >= 0.0, positive, negative)

    def r_cdf(self, c, under, inclusive=True):
        """A(L <= c); under B the law of L is that of -L under A: B(L <= c) = A(L >= -c)."""
        c = np.asarray(c, dtype=float)
        return self._a_cdf(c, inclusive) if under == "P" else self._a_sf(-c, inclusive)

    def r_sf(self, c, under, inclusive=False):
        """A(L > c); B(L > c) = A(L < -c)."""
        c = np.asarray(c, dtype=float)
        return self._a_sf(c, inclusive) if under == "P" else self._a_cdf(-c, inclusive)


@dataclass(frozen=True)
class ShuffleMaxPair(MonotonePair):
    """P = law of max_j X_j with the record in one of ``steps`` steps, Q = without it
    (module docstring): F_P(t) = Phi(t - mu) Phi(t)^(T-1), F_Q(t) = Phi(t)^T, and
    r(t) = log[(e^{mu t - mu^2/2} + (T-1) Phi(t-mu)/Phi(t)) / T], increasing in t
    (Phi(t - mu)/Phi(t) increases because Phi is log-concave)."""

    mu: float
    steps: int

    r_min = -np.inf
    r_max = np.inf

    def log_likelihood_ratio(self, x):
        """r(t) as logaddexp(mu t - mu^2/2, log(T-1) + log Phi(t-mu) - log Phi(t)) - log T."""
        t = np.asarray(x, dtype=float)
        first = self.mu * t - 0.5 * self.mu**2
        if self.steps == 1:
            return first
        rest = np.log(self.steps - 1.0) + special.log_ndtr(t - self.mu) - special.log_ndtr(t)
        return np.logaddexp(first, rest) - np.log(self.steps)

    def _t_of(self, c) -> np.ndarray:
        span = 40.0 + 1000.0 / self.mu
        return _invert_increasing(self.log_likelihood_ratio, np.asarray(c, dtype=float), -span, span)

    def _log_cdf_t(self, t: np.ndarray, under: Under) -> np.ndarray:
        if under == "P":
            return special.log_ndtr(t - self.mu) + (self.steps - 1) * special.log_ndtr(t)
        return self.steps * special.log_ndtr(t)

    def r_cdf(self, c, under, inclusive=True):
        """Pr(max <= t(c)) = exp(log F(t)) (continuous)."""
        return np.exp(self._log_cdf_t(self._t_of(c), under))

    def r_sf(self, c, under, inclusive=False):
        """Pr(max > t(c)) = -expm1(log F(t)), accurate in the upper tail."""
        return -np.expm1(self._log_cdf_t(self._t_of(c), under))

    def sample(self, under: Under, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` draws of the max statistic, by drawing the T Gaussian outputs."""
        outputs = rng.standard_normal((size, self.steps))
        if under == "P":
            outputs[:, 0] += self.mu
        return outputs.max(axis=1)
