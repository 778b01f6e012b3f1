"""Dominating pairs with a monotone log-likelihood ratio, and their privacy-loss laws.

A *base pair* (P0, Q0) is a pair of distributions on the real line whose
log-likelihood ratio r(x) = log p0(x)/q0(x) is non-decreasing in x.  Every quantity the
accountants need is a probability of an event {r <= c} or {r > c} under P0 or Q0, so a
base pair only has to provide those four functions, accurately in both tails.

A :class:`PrivacyLoss` is the law of the privacy loss L of a possibly Poisson-subsampled
pair in one neighbouring direction (docs/design.md §2, add-or-remove relation):

* remove:  P = (1-q) Q0 + q P0 vs Q = Q0,   L = log(1 - q + q e^r);
* add:     P = Q0 vs Q = (1-q) Q0 + q P0,   L = -log(1 - q + q e^r);

where r = r(X).  Both are monotone functions of r, so the distribution functions of L
under P and under Q follow from those of r (Balle, Barthe, Gaboardi 2018 for the
subsampled pairs; Zhu, Dong, Wang 2022 for add/remove dominating pairs).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from dpforge.errors import LimitError
from dpforge.mechanisms.subsampled_gaussian_kernel import (
    LEVEL,
    LOWER,
    UPPER,
    subsampled_gaussian_base_functions,
    subsampled_gaussian_distribution_functions,
    subsampled_gaussian_quantiles,
)
from scipy import special

Under = Literal["P", "Q"]
Direction = Literal["remove", "add"]


def _as_array(values: np.ndarray | float) -> np.ndarray:
    return np.asarray(values, dtype=float)


#: r within this many ulps of one of the base pair's atoms is that atom (PrivacyLoss._r_of_forward)
_ATOM_ULPS = 4.0

class MonotonePair(abc.ABC):
    """Base pair (P0, Q0) with non-decreasing log-likelihood ratio r."""

    #: smallest and largest value of r (may be infinite)
    r_min: float
    r_max: float

    @abc.abstractmethod
    def log_likelihood_ratio(self, x: np.ndarray | float) -> np.ndarray:
        """r(x) = log p0(x) / q0(x)."""

    @abc.abstractmethod
    def r_cdf(self, c: np.ndarray | float, under: Under, inclusive: bool = True) -> np.ndarray:
        """Pr(r <= c) (inclusive) or Pr(r < c) under P0 or Q0."""

    @abc.abstractmethod
    def r_sf(self, c: np.ndarray | float, under: Under, inclusive: bool = False) -> np.ndarray:
        """Pr(r > c), or Pr(r >= c) when ``inclusive``, under P0 or Q0."""

    @property
    def atoms(self) -> tuple[float, ...]:
        """Values of r carrying positive probability (empty for continuous r)."""
        return ()


@dataclass(frozen=True)
class GaussianPair(MonotonePair):
    """P0 = N(mu, 1) vs Q0 = N(0, 1) with mu = sensitivity / noise std = 1/noise_multiplier.

    r(x) = mu x - mu^2/2, so under P0 r ~ N(mu^2/2, mu^2) and under Q0 r ~ N(-mu^2/2, mu^2).
    """

    mu: float

    r_min = -np.inf
    r_max = np.inf

    def log_likelihood_ratio(self, x):
        """r(x) = mu x - mu^2/2 = log N(x; mu, 1) / N(x; 0, 1)."""
        return self.mu * _as_array(x) - 0.5 * self.mu**2

    def _z(self, c, under: Under) -> np.ndarray:
        c = _as_array(c)
        shift = -0.5 * self.mu if under == "P" else 0.5 * self.mu
        return c / self.mu + shift

    def r_cdf(self, c, under, inclusive=True):
        """Pr(r <= c) = Phi(c/mu -+ mu/2) under P0 (minus) or Q0 (plus); r is continuous,
        so ``inclusive`` does not matter."""
        return special.ndtr(self._z(c, under))

    def r_sf(self, c, under, inclusive=False):
        """Pr(r > c) = Phi(-(c/mu -+ mu/2)) under P0 (minus) or Q0 (plus), computed
        directly so it is accurate in the upper tail; ``inclusive`` does not matter."""
        return special.ndtr(-self._z(c, under))


@dataclass(frozen=True)
class LaplacePair(MonotonePair):
    """P0 = Lap(a, 1) vs Q0 = Lap(0, 1) in units of the scale, a = sensitivity / scale.

    r(x) = |x| - |x - a| is -a for x <= 0, 2x - a on [0, a] and a for x >= a, so r has
    atoms at -a and +a (Mironov 2017, section on the Laplace mechanism).
    """

    a: float

    @property
    def r_min(self) -> float:  # type: ignore[override]
        """Smallest value of r: -a (taken with positive probability, on x <= 0)."""
        return -self.a

    @property
    def r_max(self) -> float:  # type: ignore[override]
        """Largest value of r: +a (taken with positive probability, on x >= a)."""
        return self.a

    @property
    def atoms(self) -> tuple[float, ...]:
        """The two atoms of r, (-a, +a)."""
        return (-self.a, self.a)

    def log_likelihood_ratio(self, x):
        """r(x) = |x| - |x - a| = log Lap(x; a, 1) / Lap(x; 0, 1)."""
        x = _as_array(x)
        return np.abs(x) - np.abs(x - self.a)

    @staticmethod
    def _cdf0(y: np.ndarray) -> np.ndarray:
        """CDF of Lap(0, 1), accurate in both tails."""
        return np.where(y < 0, 0.5 * np.exp(np.minimum(y, 0.0)), -0.5 * np.expm1(-np.maximum(y, 0.0)) + 0.5)

    @staticmethod
    def _sf0(y: np.ndarray) -> np.ndarray:
        return np.where(y > 0, 0.5 * np.exp(-np.maximum(y, 0.0)), 0.5 - 0.5 * np.expm1(np.minimum(y, 0.0)))

    def _x_of(self, c: np.ndarray, under: Under) -> np.ndarray:
        x = 0.5 * (c + self.a)
        return x - self.a if under == "P" else x

    def r_cdf(self, c, under, inclusive=True):
        """Pr(r <= c) (inclusive) or Pr(r < c) under P0 or Q0: the Laplace CDF at
        x = (c + a)/2 (shifted by -a under P0), with the atoms at -a and +a counted
        according to ``inclusive``."""
        c = _as_array(c)
        inside = self._cdf0(self._x_of(np.clip(c, -self.a, self.a), under))
        if inclusive:
            return np.where(c < -self.a, 0.0, np.where(c >= self.a, 1.0, inside))
        return np.where(c <= -self.a, 0.0, np.where(c > self.a, 1.0, inside))

    def r_sf(self, c, under, inclusive=False):
        """Pr(r > c), or Pr(r >= c) when ``inclusive``, under P0 or Q0: the Laplace
        survival function at x = (c + a)/2 (shifted by -a under P0), computed directly so
        it is accurate in the upper tail."""
        c = _as_array(c)
        inside = self._sf0(self._x_of(np.clip(c, -self.a, self.a), under))
        if inclusive:
            return np.where(c <= -self.a, 1.0, np.where(c > self.a, 0.0, inside))
        return np.where(c < -self.a, 1.0, np.where(c >= self.a, 0.0, inside))


@dataclass(frozen=True)
class RandomizedResponsePair(MonotonePair):
    """The epsilon-DP dominating pair: P0 = (e^eps, 1)/(1+e^eps), Q0 = (1, e^eps)/(1+e^eps).

    Every epsilon-DP mechanism is dominated by it (Kairouz, Oh, Viswanath 2015); r takes
    the values +eps (on output 1) and -eps (on output 0).
    """

    epsilon: float

    @property
    def r_min(self) -> float:  # type: ignore[override]
        """Smallest value of r: -epsilon (output 0)."""
        return -self.epsilon

    @property
    def r_max(self) -> float:  # type: ignore[override]
        """Largest value of r: +epsilon (output 1)."""
        return self.epsilon

    @property
    def atoms(self) -> tuple[float, ...]:
        """The two values of r, (-epsilon, +epsilon); r is purely atomic."""
        return (-self.epsilon, self.epsilon)

    def log_likelihood_ratio(self, x):
        """r(x) = +epsilon for an output x >= 0.5 (read as 1), -epsilon otherwise."""
        x = _as_array(x)
        return np.where(x >= 0.5, self.epsilon, -self.epsilon)

    def _masses(self, under: Under) -> tuple[float, float]:
        """(Pr(r = -eps), Pr(r = +eps))."""
        high = float(special.expit(self.epsilon))
        low = float(special.expit(-self.epsilon))
        return (low, high) if under == "P" else (high, low)

    def r_cdf(self, c, under, inclusive=True):
        """Pr(r <= c) (inclusive) or Pr(r < c) under P0 or Q0, summed over the two atoms
        at -epsilon and +epsilon (masses e^eps/(1+e^eps) and 1/(1+e^eps))."""
        c = _as_array(c)
        low, high = self._masses(under)
        if inclusive:
            return np.where(c >= -self.epsilon, low, 0.0) + np.where(c >= self.epsilon, high, 0.0)
        return np.where(c > -self.epsilon, low, 0.0) + np.where(c > self.epsilon, high, 0.0)

    def r_sf(self, c, under, inclusive=False):
        """Pr(r > c), or Pr(r >= c) when ``inclusive``, under P0 or Q0, summed over the
        two atoms at -epsilon and +epsilon."""
        c = _as_array(c)
        low, high = self._masses(under)
        if inclusive:
            return np.where(c <= -self.epsilon, low, 0.0) + np.where(c <= self.epsilon, high, 0.0)
        return np.where(c < -self.epsilon, low, 0.0) + np.where(c < self.epsilon, high, 0.0)


def subsampled_log_ratio(r: np.ndarray | float, sampling_rate: float) -> np.ndarray:
    """log(1 - q + q e^r): the privacy loss of the remove direction of a Poisson-subsampled
    pair as a function of the base pair's log-likelihood ratio r (Balle, Barthe, Gaboardi
    2018); the add direction is its negative.  Computed as logaddexp(log(1-q), log q + r),
    finite for every r (q = 1 gives r itself).  The one implementation in dpforge outside
    the compiled Monte-Carlo kernels, which need a scalar numba version."""
    r = np.asarray(r, dtype=float)
    q = float(sampling_rate)
    if q >= 1.0:
        return r
    return np.logaddexp(np.log1p(-q), np.log(q) + r)


@dataclass(frozen=True)
class PrivacyLoss:
    """Law of the privacy loss L = log p(X)/q(X), X ~ P, of a subsampled pair in one direction.

    ``cdf(l, under)`` is Pr(L <= l) and ``sf(l, under)`` is Pr(L > l) with X drawn from P
    (``under="P"``) or from Q (``under="Q"``).  Under Q the law is the exponential
    tilt of the law under P: dQ_L = e^{-l} dP_L, which the discretisation uses to
    preserve both masses exactly.
    """

    pair: MonotonePair
    sampling_rate: float
    direction: Direction

    # -- the monotone map r -> L and its inverse -------------------------------------
    def _log1m_q(self) -> float:
        q = self.sampling_rate
        return -np.inf if q >= 1.0 else float(np.log1p(-q))

    def loss_of_r(self, r: np.ndarray | float) -> np.ndarray:
        """L as a function of the base log-likelihood ratio r: log(1 - q + q e^r) for
        "remove", its negative for "add" (Balle, Barthe, Gaboardi 2018)."""
        forward = subsampled_log_ratio(_as_array(r), self.sampling_rate)
        return forward if self.direction == "remove" else -forward

    def _r_of_forward(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Inverse of y = log(1 - q + q e^r); returns (r, valid) with valid = y > log(1-q)."""
        q = self.sampling_rate
        if q >= 1.0:
            return y, np.ones(y.shape, dtype=bool)
        valid = y > np.log1p(-q)
        with np.errstate(invalid="ignore", divide="ignore"):
            big = y > 1.0
            big_part = y + np.log1p(-(1.0 - q) * np.exp(-np.maximum(y, 1.0))) - np.log(q)
            shifted = np.where(valid & ~big, np.expm1(np.minimum(y, 1.0)), 0.0)
            # log1p(expm1(y)/q): a few ulps of r, where log(expm1(y) + q) - log q would
            # cancel log q (accounting/prv/rounding.py; as the compiled Gaussian kernel)
            small_part = np.log1p(np.maximum(shifted / q, -1.0))
            r = np.where(big, big_part, small_part)
        # an atom's image maps back onto the atom: r within 4 ulps of it is the atom
        for atom in self.pair.atoms:
            r = np.where(np.abs(r - atom) <= _ATOM_ULPS * np.finfo(float).eps * max(1.0, abs(atom)), atom, r)
        return np.where(valid, r, -np.inf), valid

    def privacy_loss(self, x: np.ndarray | float) -> np.ndarray:
        """L(x) = log p(x)/q(x) for an output x of the base mechanism."""
        return self.loss_of_r(self.pair.log_likelihood_ratio(x))

    @property
    def support(self) -> tuple[float, float]:
        """(smallest, largest) value of L, the images of r_min and r_max under
        :meth:`loss_of_r` (possibly infinite)."""
        lo, hi = float(self.loss_of_r(self.pair.r_min)), float(self.loss_of_r(self.pair.r_max))
        return (lo, hi) if self.direction == "remove" else (hi, lo)

    @property
    def atoms(self) -> tuple[float, ...]:
        """Values of L carrying positive probability: the images of the base pair's atoms."""
        return tuple(float(self.loss_of_r(a)) for a in self.pair.atoms)

    # -- distribution functions of L ---------------------------------------------------
    def _mix(self, values_p0: np.ndarray, values_q0: np.ndarray, under: Under, mixed: bool) -> np.ndarray:
        """Probability under the subsampled measure: mixture if ``mixed``, else Q0 only."""
        q = self.sampling_rate
        if not mixed:
            return values_q0
        return (1.0 - q) * values_q0 + q * values_p0

    def _prob(self, ell: np.ndarray | float, under: Under, kind: str) -> np.ndarray:
        """kind in {'le', 'lt', 'gt', 'ge'}: Pr(L <= l), Pr(L < l), Pr(L > l), Pr(L >= l)."""
        ell = _as_array(ell)
        pair = self.pair
        if type(pair) is GaussianPair:  # continuous: inclusive or not is the same
            cdf_p, sf_p, cdf_q, sf_q = self.distribution_functions(ell)
            if kind in ("le", "lt"):
                return cdf_p if under == "P" else cdf_q
            return sf_p if under == "P" else sf_q
        if self.direction == "remove":
            # P = mixture, Q = Q0; L increasing in r
            mixed = under == "P"
            r, valid = self._r_of_forward(ell)
            rr = np.where(valid, r, 0.0)
            if kind == "le":
                f = lambda u: pair.r_cdf(rr, u, inclusive=True)  # noqa: E731
                below = 0.0
            elif kind == "lt":
                f = lambda u: pair.r_cdf(rr, u, inclusive=False)  # noqa: E731
                below = 0.0
            elif kind == "gt":
                f = lambda u: pair.r_sf(rr, u, inclusive=False)  # noqa: E731
                below = 1.0
            else:
                f = lambda u: pair.r_sf(rr, u, inclusive=True)  # noqa: E731
                below = 1.0
            value = self._mix(f("P"), f("Q"), under, mixed)
            return np.where(valid, value, below)
        # add: P = Q0, Q = mixture; L = -forward(r) decreasing in r
        mixed = under == "Q"
        r, valid = self._r_of_forward(-ell)
        rr = np.where(valid, r, 0.0)
        # L <= l  <=>  r >= r*(-l);  L < l <=> r > r*;  L > l <=> r < r*;  L >= l <=> r <= r*
        if kind == "le":
            f = lambda u: pair.r_sf(rr, u, inclusive=True)  # noqa: E731
            outside = 1.0
        elif kind == "lt":
            f = lambda u: pair.r_sf(rr, u, inclusive=False)  # noqa: E731
            outside = 1.0
        elif kind == "gt":
            f = lambda u: pair.r_cdf(rr, u, inclusive=False)  # noqa: E731
            outside = 0.0
        else:
            f = lambda u: pair.r_cdf(rr, u, inclusive=True)  # noqa: E731
            outside = 0.0
        value = self._mix(f("P"), f("Q"), under, mixed)
        # invalid means -l <= log(1-q), i.e. l >= -log(1-q) >= every value of L
        return np.where(valid, value, outside)

    def distribution_functions(self, ell) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l)) in one pass.

        Each of the four is computed directly (not as one minus another), so all are
        accurate in their own tail.
        """
        pair = self.pair
        q = self.sampling_rate
        if type(pair) is GaussianPair:
            if type(ell) is np.ndarray and ell.ndim == 1 and ell.dtype == np.float64 and ell.flags.c_contiguous:
                return subsampled_gaussian_distribution_functions(ell, float(pair.mu), float(q), self.direction == "remove")
            ell = _as_array(ell)
            flat = np.ascontiguousarray(ell, dtype=float).reshape(-1)
            values = subsampled_gaussian_distribution_functions(flat, float(pair.mu), float(q), self.direction == "remove")
            return tuple(v.reshape(ell.shape) for v in values)  # type: ignore[return-value]
        ell = _as_array(ell)
        if self.direction == "remove":
            r, valid = self._r_of_forward(ell)
            rr = np.where(valid, r, 0.0)
            c_p0, c_q0 = pair.r_cdf(rr, "P", True), pair.r_cdf(rr, "Q", True)
            s_p0, s_q0 = pair.r_sf(rr, "P", False), pair.r_sf(rr, "Q", False)
            cdf_p = (1.0 - q) * c_q0 + q * c_p0
            sf_p = (1.0 - q) * s_q0 + q * s_p0
            cdf_q, sf_q = c_q0, s_q0
            return (
                np.where(valid, cdf_p, 0.0),
                np.where(valid, sf_p, 1.0),
                np.where(valid, cdf_q, 0.0),
                np.where(valid, sf_q, 1.0),
            )
        r, valid = self._r_of_forward(-ell)
        rr = np.where(valid, r, 0.0)
        # L <= l <=> r >= r*;  L > l <=> r < r*
        ge_p0, ge_q0 = pair.r_sf(rr, "P", True), pair.r_sf(rr, "Q", True)
        lt_p0, lt_q0 = pair.r_cdf(rr, "P", False), pair.r_cdf(rr, "Q", False)
        cdf_p, sf_p = ge_q0, lt_q0
        cdf_q = (1.0 - q) * ge_q0 + q * ge_p0
        sf_q = (1.0 - q) * lt_q0 + q * lt_p0
        return (
            np.where(valid, cdf_p, 1.0),
            np.where(valid, sf_p, 0.0),
            np.where(valid, cdf_q, 1.0),
            np.where(valid, sf_q, 0.0),
        )

    def base_distribution_functions(self, ell: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(Pr_C(L <= l), Pr_C(L > l), Pr_S(L <= l), Pr_S(L > l)) for the common measure
        C = Q0 and the sampled one S = P0: remove has P = (1-q) C + q S and Q = C, add has
        P = C and Q = (1-q) C + q S, so :meth:`distribution_functions` are these mixed.
        The optimistic discretisation reads a label's loss off the ratio S/C of its
        masses, whose rounding the subsampling then scales by about q."""
        pair = self.pair
        q = self.sampling_rate
        ell = np.ascontiguousarray(ell, dtype=float)
        if type(pair) is GaussianPair:
            return subsampled_gaussian_base_functions(ell, float(pair.mu), float(q), self.direction == "remove")
        if self.direction == "remove":  # L <= l <=> r <= r*
            r, valid = self._r_of_forward(ell)
            rr = np.where(valid, r, 0.0)
            values = (pair.r_cdf(rr, "Q", True), pair.r_sf(rr, "Q", False), pair.r_cdf(rr, "P", True), pair.r_sf(rr, "P", False))
            outside = (0.0, 1.0, 0.0, 1.0)
        else:  # L <= l <=> r >= r*(-l)
            r, valid = self._r_of_forward(-ell)
            rr = np.where(valid, r, 0.0)
            values = (pair.r_sf(rr, "Q", True), pair.r_cdf(rr, "Q", False), pair.r_sf(rr, "P", True), pair.r_cdf(rr, "P", False))
            outside = (1.0, 0.0, 1.0, 0.0)
        return tuple(np.where(valid, v, o) for v, o in zip(values, outside))  # type: ignore[return-value]

    def cdf(self, ell, under: Under = "P", inclusive: bool = True) -> np.ndarray:
        """Pr(L <= l) (or Pr(L < l) when not inclusive)."""
        return self._prob(ell, under, "le" if inclusive else "lt")

    def sf(self, ell, under: Under = "P", inclusive: bool = False) -> np.ndarray:
        """Pr(L > l) (or Pr(L >= l) when inclusive)."""
        return self._prob(ell, under, "ge" if inclusive else "gt")

    # -- quantiles used to choose a truncation range ---------------------------------
    def quantiles(
        self, levels: Sequence[float] = (), lower_tails: Sequence[float] = (), upper_tails: Sequence[float] = ()
    ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        """:meth:`quantile` at every level, :meth:`lower_quantile` at every lower tail and
        :meth:`upper_quantile` at every upper tail, found together.

        Every answer is bracketed on one ladder of points 0, +-2^k (k = -40..30) inside the
        support, then each bracket is cut into 32 four times; all the points of one round
        go through :meth:`distribution_functions` in one call (a handful of vectorised
        calls in all, instead of dozens per quantile).  Each answer sits on the side of
        its switch where its condition holds (Pr_P(L <= l) >= level; Pr_P(L <= l) <= tail;
        Pr_P(L > l) <= tail), within 1/32^4 of its ladder bracket.  A subsampled Gaussian
        runs the same steps compiled (:func:`subsampled_gaussian_quantiles`)."""
        lo_support, hi_support = self.support
        if type(self.pair) is GaussianPair:
            kinds = np.array([LEVEL] * len(levels) + [LOWER] * len(lower_tails) + [UPPER] * len(upper_tails), dtype=np.int64)
            values = np.array([*levels, *lower_tails, *upper_tails], dtype=float)
            found, status = subsampled_gaussian_quantiles(
                float(self.pair.mu),
                float(self.sampling_rate),
                self.direction == "remove",
                float(lo_support),
                float(hi_support),
                kinds,
                values,
                _LADDER,
                _FRACTIONS,
            )
            if status:
                raise LimitError("privacy loss tail does not decay; cannot truncate")
            out = [float(v) for v in found]
            n_levels, n_lower = len(levels), len(lower_tails)
            return tuple(out[:n_levels]), tuple(out[n_levels : n_levels + n_lower]), tuple(out[n_levels + n_lower :])
        targets: list[tuple[str, float]] = [("level", float(v)) for v in levels]
        targets += [("lower", float(v)) for v in lower_tails]
        targets += [("upper", float(v)) for v in upper_tails]
        ladder = _LADDER[(_LADDER > lo_support) & (_LADDER < hi_support)]
        ends = [v for v in (lo_support, hi_support) if np.isfinite(v)]
        points = np.unique(np.concatenate([ladder, ends]))
        cdf_p, sf_p, _, _ = self.distribution_functions(points)
        answers: list[float | None] = [None] * len(targets)
        brackets: list[tuple[int, float, float]] = []
        for index, (kind, value) in enumerate(targets):
            if kind == "lower" and np.isfinite(lo_support):
                answers[index] = float(lo_support)
                continue
            if kind == "upper" and np.isfinite(hi_support):
                answers[index] = float(hi_support)
                continue
            if kind == "lower":
                allowed = points <= min(hi_support, 0.0)
                holds = (cdf_p <= value) & allowed  # True ... True False ...
                if not holds.any():
                    raise LimitError("privacy loss tail does not decay; cannot truncate")
                last = int(np.flatnonzero(holds)[-1])
                if last + 1 >= points.size or not allowed[last + 1]:
                    answers[index] = float(points[last])
                else:
                    brackets.append((index, float(points[last]), float(points[last + 1])))
                continue
            if kind == "upper":
                allowed = points >= max(lo_support, 0.0)
                holds = (sf_p <= value) & allowed
            else:
                allowed = np.ones(points.size, dtype=bool)
                holds = cdf_p >= value
            if not holds.any():
                if kind == "upper":
                    raise LimitError("privacy loss tail does not decay; cannot truncate")
                answers[index] = float(points[-1])
                continue
            first = int(np.argmax(holds))
            if first == 0 or not allowed[first - 1]:
                answers[index] = float(points[first])
            else:
                brackets.append((index, float(points[first - 1]), float(points[first])))
        for _ in range(4):
            if not brackets:
                break
            lows = np.array([low for _, low, _ in brackets])
            highs = np.array([high for _, _, high in brackets])
            grids = lows[:, None] + (highs - lows)[:, None] * _FRACTIONS[None, :]
            grids[:, -1] = highs
            cdf_g, sf_g, _, _ = self.distribution_functions(grids.ravel())
            cdf_g, sf_g = cdf_g.reshape(grids.shape), sf_g.reshape(grids.shape)
            refined = []
            for row, (index, _, _) in enumerate(brackets):
                kind, value = targets[index]
                if kind == "lower":
                    switched = cdf_g[row] > value
                elif kind == "upper":
                    switched = sf_g[row] <= value
                else:
                    switched = cdf_g[row] >= value
                switched[-1] = True  # the bracket's top is on the switched side
                at = max(int(np.argmax(switched)), 1)
                refined.append((index, float(grids[row, at - 1]), float(grids[row, at])))
            brackets = refined
        for index, low, high in brackets:
            answers[index] = low if targets[index][0] == "lower" else high
        values = [float(a) for a in answers]  # type: ignore[arg-type]
        n_levels, n_lower = len(levels), len(lower_tails)
        return tuple(values[:n_levels]), tuple(values[n_levels : n_levels + n_lower]), tuple(values[n_levels + n_lower :])

    def quantile(self, level: float) -> float:
        """Smallest l (to within 1/32^4 of its ladder bracket) with Pr_P(L <= l) >= level."""
        return self.quantiles(levels=(level,))[0][0]

    def upper_quantile(self, tail: float) -> float:
        """Smallest l >= max(support start, 0) with Pr_P(L > l) <= tail (to within 1/32^4 of
        its ladder bracket), or the support end when finite."""
        return self.quantiles(upper_tails=(tail,))[2][0]

    def lower_quantile(self, tail: float) -> float:
        """Largest l <= min(support end, 0) with Pr_P(L <= l) <= tail (to within 1/32^4 of
        its ladder bracket), or the support start when finite."""
        return self.quantiles(lower_tails=(tail,))[1][0]


#: 33 points cutting a bracket of :meth:`PrivacyLoss.quantiles` into 32
_FRACTIONS = np.linspace(0.0, 1.0, 33)
#: bracketing points of :meth:`PrivacyLoss.quantiles`: 0 and +-2^k, k = -40..30
_LADDER = np.concatenate([-np.exp2(np.arange(30.0, -41.0, -1.0)), [0.0], np.exp2(np.arange(-40.0, 31.0))])
