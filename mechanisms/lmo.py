"""The LMO mechanism: Laplace noise whose inverse scale is drawn from a mixture.

LMO noise (Yang, Mohammady, Wang et al. 2024, "LMO-DP") is X = E / eta with E a
standard Laplace variable and eta = 1/b drawn from the mixture
w_1 Gamma(k, theta) + w_2 Exponential(lam) + w_3 Uniform(lo, hi) on eta > 0.  Its
density, tails, moments and privacy loss are exact closed forms (see
:mod:`dpforge.mechanisms.lmo_density`), so every engine accounts it without the
paper's moment-generating-function substitution.

A release adds independent LMO noise to each of ``dimension`` coordinates of a query
whose sensitivity is ``sensitivity`` in the ``norm`` ("l1" or "l2").  Only the scalar
release (``dimension == 1``) has the one-dimensional shifted pair as its dominating pair;
vector releases are accounted by the RDP engine's vector guard (docs/design.md §5).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms import lmo_density as kernels
from dpforge.mechanisms.base import Mechanism
from dpforge.mechanisms.pairs import MonotonePair, Under, _as_array
from dpforge.validation import require_count, require_positive, require_real, shown

Norm = Literal["l1", "l2"]
COMPONENTS = ("gamma", "exponential", "uniform")
NORMS = ("l1", "l2")
WEIGHT_TOLERANCE = 1e-9
#: grid of the inversion variable s (t = a * expm1(s)) and of x on [0, a], for brackets
_S_GRID = np.concatenate([np.linspace(0.0, 1.0, 2048, endpoint=False), np.geomspace(1.0, 650.0, 2048)])
_X_POINTS = 2049


def require_norm(name: str, value: object) -> str:
    """``value`` as a str when it is one of :data:`NORMS` ("l1", "l2"); otherwise a
    one-line ValueError naming ``name``."""
    if value not in NORMS:
        raise ParameterError(f"{name} must be one of {', '.join(NORMS)}, got {value!r}")
    return str(value)


def require_dimension(name: str, value: object) -> int:
    """``value`` as an int >= 1 (the number of noised coordinates), via ``require_count``;
    no upper bound: a dimension enters the accounting as a real number (d g(C / sqrt d)),
    and the vector guard is checked at d = 1e18."""
    return require_count(name, value, maximum=None)


def _require_not_nan(name: str, values: np.ndarray) -> np.ndarray:
    if np.isnan(values).any():
        raise ParameterError(f"{name} must not be NaN")
    return values


def _require_weights(weights: object) -> tuple[float, float, float]:
    # a string is iterable too: '100' must not pass as (1, 0, 0)
    if isinstance(weights, (str, bytes)):
        raise ParameterError(f"weights must be three non-negative numbers summing to 1, got {shown(weights)}")
    try:
        items = tuple(weights)  # type: ignore[arg-type]
    except TypeError:
        raise ParameterError(f"weights must be three non-negative numbers summing to 1, got {shown(weights)}") from None
    if len(items) != 3:
        raise ParameterError(
            f"weights must be three numbers (gamma, exponential, uniform) summing to 1, got {len(items)}"
        )
    for name, w in zip(COMPONENTS, items):
        try:
            value = require_real(f"weights ({name})", w)
        except ParameterError:
            value = math.nan
        if not value >= 0:  # NaN included
            raise ParameterError(f"weights ({name}) must be a finite number >= 0 (three summing to 1), got {shown(w)}")
    values = tuple(float(w) for w in items)
    total = sum(values)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise ParameterError(f"weights must sum to 1 (within {WEIGHT_TOLERANCE:g}), got sum {total!r}")
    return values  # type: ignore[return-value]


@dataclass(frozen=True)
class LMO(Mechanism):
    """Laplace noise with inverse scale eta ~ w_1 Gamma(k, theta) + w_2 Exp(lam) + w_3 U(lo, hi)
    (the LMO noise of Yang et al. 2024, "LMO-DP", with eta drawn from a mixture).

    ``weights`` are (gamma, exponential, uniform), non-negative and summing to 1 (a zero
    drops the component).  ``gamma_shape`` k and ``gamma_scale`` theta parametrise the
    Gamma law of eta (mean k theta); ``exponential_rate`` lam (mean 1/lam);
    ``uniform_low`` < ``uniform_high`` bound the uniform law of eta.  Conditionally on
    eta the noise is Laplace with scale 1/eta, in the units of the query.
    """

    weights: tuple[float, float, float] = (1.0, 0.0, 0.0)
    gamma_shape: float = 1.0
    gamma_scale: float = 1.0
    exponential_rate: float = 1.0
    uniform_low: float = 0.5
    uniform_high: float = 1.0
    sensitivity: float = 1.0
    dimension: int = 1
    norm: Norm = "l2"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", _require_weights(self.weights))
        for name in ("gamma_shape", "gamma_scale", "exponential_rate", "uniform_low", "uniform_high", "sensitivity"):
            object.__setattr__(self, name, require_positive(name, getattr(self, name)))
        if self.uniform_low >= self.uniform_high:
            raise ParameterError(
                f"uniform_low must be < uniform_high, got uniform_low={self.uniform_low!r}, "
                f"uniform_high={self.uniform_high!r}"
            )
        object.__setattr__(self, "dimension", require_dimension("dimension", self.dimension))
        object.__setattr__(self, "norm", require_norm("norm", self.norm))

    # -- the noise law ----------------------------------------------------------------
    @property
    def packed(self) -> np.ndarray:
        """The parameter array the numba kernels take (:func:`lmo_density.pack`)."""
        return kernels.pack(
            self.weights, self.gamma_shape, self.gamma_scale, self.exponential_rate, self.uniform_low, self.uniform_high
        )

    @property
    def eta_min(self) -> float:
        """Lower end of the support of eta (0 when a Gamma or Exponential part is present)."""
        return 0.0 if (self.weights[0] > 0 or self.weights[1] > 0) else float(self.uniform_low)

    def logpdf(self, x: np.ndarray | float) -> np.ndarray:
        """log density of one coordinate of the noise at x."""
        t = np.abs(_require_not_nan("x", _as_array(x)))
        return kernels.log_density_array(t.ravel(), self.packed).reshape(t.shape)

    def pdf(self, x: np.ndarray | float) -> np.ndarray:
        """Density of one coordinate of the noise at x, exp(:meth:`logpdf`)."""
        return np.exp(self.logpdf(x))

    def log_abs_sf(self, t: np.ndarray | float) -> np.ndarray:
        """log Pr(|X| > t) = log E[e^{-eta t}] (the log Laplace transform of eta)."""
        t = _as_array(t)
        if np.any(t < 0):
            raise ParameterError("t must be >= 0")
        return kernels.log_tail_array(t.ravel(), self.packed).reshape(t.shape)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        """Pr(X <= x), accurate in both tails: S(|x|)/2 below 0, 1/2 + C(x)/2 above."""
        x = _require_not_nan("x", _as_array(x))
        t = np.abs(x).ravel()
        packed = self.packed
        lower = 0.5 * np.exp(kernels.log_tail_array(t, packed))
        upper = 0.5 + 0.5 * kernels.central_array(t, packed)
        return np.where(x.ravel() < 0, lower, upper).reshape(x.shape)

    def sf(self, x: np.ndarray | float) -> np.ndarray:
        """Pr(X > x) (the law is symmetric)."""
        return self.cdf(-_as_array(x))

    def log_eta_mgf(self, t: np.ndarray | float) -> np.ndarray:
        """log E[e^{t eta}]; +inf where the Gamma or Exponential MGF diverges (t >= 1/theta or t >= lam)."""
        t = _as_array(t)
        parts = []
        w_gamma, w_exp, w_uniform = self.weights
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if w_gamma > 0:
                k, theta = self.gamma_shape, self.gamma_scale
                inside = 1.0 - theta * t
                parts.append(np.where(inside > 0, math.log(w_gamma) - k * np.log(np.where(inside > 0, inside, 1.0)), np.inf))
            if w_exp > 0:
                lam = self.exponential_rate
                inside = 1.0 - t / lam
                parts.append(np.where(inside > 0, math.log(w_exp) - np.log(np.where(inside > 0, inside, 1.0)), np.inf))
            if w_uniform > 0:
                low, high = self.uniform_low, self.uniform_high
                # log (e^{t hi} - e^{t lo}) / (t (hi - lo)), with the t -> 0 limit 1
                width_t = (high - low) * t
                safe = np.where(width_t == 0, 1.0, width_t)
                value = np.where(
                    width_t == 0,
                    t * low,
                    np.where(
                        width_t > 0,
                        t * high + np.log(-np.expm1(-safe)) - np.log(np.abs(safe)),
                        t * low + np.log(np.expm1(safe) / safe),
                    ),
                )
                parts.append(math.log(w_uniform) + value)
        return np.logaddexp.reduce(np.stack(parts), axis=0)

    def variance(self) -> float:
        """Var X = E[2 / eta^2] per coordinate; infinite when an Exponential part is present
        or the Gamma shape is <= 2 (E[eta^-2] = 1/(theta^2 (k-1)(k-2)))."""
        return 2.0 * self._inverse_moment(2)

    def mean_absolute(self) -> float:
        """E|X| = E[1 / eta]; infinite with an Exponential part or Gamma shape <= 1."""
        return self._inverse_moment(1)

    def std(self) -> float:
        """Standard deviation of one coordinate, sqrt(:meth:`variance`) (may be infinite)."""
        return math.sqrt(self.variance())

    def _inverse_moment(self, order: int) -> float:
        """E[eta^{-order}] for order 1 or 2, mixture-weighted (dropped parts contribute nothing)."""
        w_gamma, w_exp, w_uniform = self.weights
        total = 0.0
        if w_gamma > 0:
            k, theta = self.gamma_shape, self.gamma_scale
            if k <= order:
                return math.inf
            value = 1.0 / (theta * (k - 1.0)) if order == 1 else 1.0 / (theta**2 * (k - 1.0) * (k - 2.0))
            total += w_gamma * value
        if w_exp > 0:
            return math.inf
        if w_uniform > 0:
            low, high = self.uniform_low, self.uniform_high
            value = math.log(high / low) / (high - low) if order == 1 else 1.0 / (low * high)
            total += w_uniform * value
        return total

    def sample(self, size: int | tuple[int, ...], rng: np.random.Generator | int | None = None) -> np.ndarray:
        """Independent noise draws of shape ``size``: eta from the mixture, then a standard
        Laplace variable divided by eta.  Vectorised; ``rng`` is a Generator or a seed."""
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
            raise ParameterError(f"size must be a non-negative integer or a tuple of them, got {size!r}")
        count = int(np.prod(shape, dtype=np.int64))
        eta = self.sample_eta(count, rng)
        with np.errstate(divide="ignore", invalid="ignore"):  # an eta that underflowed to 0: noise of +-inf (NaN at 0/0)
            return (rng.laplace(0.0, 1.0, count) / eta).reshape(shape)

    def sample_eta(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` draws of the inverse scale eta from the mixture."""
        which = rng.choice(3, size=count, p=np.asarray(self.weights) / sum(self.weights))
        eta = np.empty(count)
        for index, draw in enumerate(
            (
                lambda n: rng.gamma(self.gamma_shape, self.gamma_scale, n),
                lambda n: rng.exponential(1.0 / self.exponential_rate, n),
                lambda n: rng.uniform(self.uniform_low, self.uniform_high, n),
            )
        ):
            mask = which == index
            if mask.any():
                eta[mask] = draw(int(mask.sum()))
        return eta

    # -- privacy ----------------------------------------------------------------------
    @property
    def max_privacy_loss(self) -> float:
        """Pure-DP epsilon of the scalar release: log f(0) / f(sensitivity)."""
        return float(self.logpdf(0.0) - self.logpdf(self.sensitivity))

    def summary(self, digits: int = 6) -> str:
        """Short text of the active components, e.g. ``0.3 Gamma(k=2, theta=1) + 0.7 Exp(rate=2)``
        (``digits`` significant digits for the uniform's ends)."""
        parts = []
        w_gamma, w_exp, w_uniform = self.weights
        if w_gamma > 0:
            parts.append(f"{w_gamma:.3g} Gamma(k={self.gamma_shape:.4g}, theta={self.gamma_scale:.4g})")
        if w_exp > 0:
            parts.append(f"{w_exp:.3g} Exp(rate={self.exponential_rate:.4g})")
        if w_uniform > 0:
            parts.append(f"{w_uniform:.3g} U({self.uniform_low:.{digits}g}, {self.uniform_high:.{digits}g})")
        return " + ".join(parts)

    def scaled(self, factor: float) -> "LMO":
        """The mechanism whose noise is ``factor`` times this one's (eta divided by factor)."""
        factor = require_positive("factor", factor)
        return LMO(
            weights=self.weights,
            gamma_shape=self.gamma_shape,
            gamma_scale=self.gamma_scale / factor,
            exponential_rate=self.exponential_rate * factor,
            uniform_low=self.uniform_low / factor,
            uniform_high=self.uniform_high / factor,
            sensitivity=self.sensitivity,
            dimension=self.dimension,
            norm=self.norm,
        )

    def dominating_pair(self) -> "LMOPair":
        """The shifted pair :class:`LMOPair` (noise + sensitivity vs noise), cached per
        mechanism; raises ValueError for ``dimension != 1``."""
        if self.dimension != 1:
            raise UnsupportedError(
                f"LMO with dimension={self.dimension} has no one-dimensional dominating pair: "
                "a vector release must not be accounted as a scalar one; use engine='rdp' "
                "(its vector guard bounds the worst shift over the sensitivity ball)"
            )
        return _cached_pair(self)

    def to_dict(self) -> dict:
        """JSON-ready dict of all fields with ``"mechanism": "lmo"`` (the one serialisation of
        :mod:`dpforge.mechanisms.serialize`); :meth:`from_dict` inverts it."""
        from dpforge.mechanisms.serialize import mechanism_to_dict

        return mechanism_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LMO":
        """Inverse of :meth:`to_dict`; the kind may be left out; unknown, missing or
        mistyped fields are a one-line :class:`~dpforge.errors.InputFileError`."""
        from dpforge.errors import InputFileError
        from dpforge.mechanisms.serialize import mechanism_from_dict

        if isinstance(data, dict) and "mechanism" not in data:
            data = {"mechanism": "lmo", **data}
        mechanism = mechanism_from_dict(data)
        if not isinstance(mechanism, cls):
            raise InputFileError(f"mechanism: must be 'lmo', got {data.get('mechanism')!r}")
        return mechanism


@functools.lru_cache(maxsize=64)
def _cached_pair(mechanism: LMO) -> "LMOPair":
    """Pairs carry inversion tables; engines ask for the same pair many times."""
    return LMOPair(mechanism)


class LMOPair(MonotonePair):
    """P0 = noise + a vs Q0 = noise for scalar LMO noise, a = sensitivity.

    r(x) = log f(|x - a|) - log f(|x|) is not monotone in x (f has log-convex tails), but
    it is monotone on each of x <= 0, [0, a] and x >= a, and the engines only need the
    law of r under P0 and Q0.  Each of those probabilities is a sum of three tail
    probabilities at points found by root finding (numba, regula falsi to ~1e-15).  The
    pair is symmetric under x -> a - x, so the law of r under P0 is that of -r under Q0.
    r ranges over [-r_max, r_max] with r_max = log f(0)/f(a): LMO is r_max-DP.
    """

    def __init__(self, mechanism: LMO) -> None:
        self.mechanism = mechanism
        self.a = float(mechanism.sensitivity)
        self._packed = mechanism.packed
        self.r_max = mechanism.max_privacy_loss
        self.r_min = -self.r_max
        self.h_inf = self.a * mechanism.eta_min
        self._x_grid = np.linspace(0.0, self.a, _X_POINTS)
        self._h_table, self._m_table = kernels.inversion_tables(self.a, self._packed, _S_GRID, self._x_grid)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LMOPair) and other.mechanism == self.mechanism

    def __hash__(self) -> int:
        return hash(("LMOPair", self.mechanism))

    def log_likelihood_ratio(self, x):
        """r(x) = log f(x - a) - log f(x), f the LMO noise density."""
        x = _as_array(x)
        return self.mechanism.logpdf(x - self.a) - self.mechanism.logpdf(x)

    def _q0(self, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = np.ascontiguousarray(c, dtype=float).ravel()
        cdf, sf = kernels.r_distribution_q0(
            flat, self.a, self.r_max, self.h_inf, self._packed, _S_GRID, self._h_table, self._x_grid, self._m_table
        )
        return cdf.reshape(c.shape), sf.reshape(c.shape)

    def r_cdf(self, c, under: Under, inclusive: bool = True):
        """Pr(r <= c) under Q0, or under P0 via Pr_P0(r <= c) = Pr_Q0(r >= -c); r is
        continuous, so ``inclusive`` does not matter."""
        c = _as_array(c)
        if under == "Q":
            return self._q0(c)[0]
        return self._q0(-c)[1]  # Pr_P0(r <= c) = Pr_Q0(r >= -c); r is continuous

    def r_sf(self, c, under: Under, inclusive: bool = False):
        """Pr(r > c) under Q0, or under P0 via Pr_P0(r > c) = Pr_Q0(r < -c), each from its
        own tails; ``inclusive`` does not matter."""
        c = _as_array(c)
        if under == "Q":
            return self._q0(c)[1]
        return self._q0(-c)[0]
