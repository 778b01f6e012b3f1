"""The exponential-tilting maths of the Monte-Carlo accountant: closed forms, binomial
terms and quadratures behind the tilted one-step laws (nothing here draws samples).

Following Wang, Mahloujifar, Wu, Jia & Mittal (NeurIPS 2023), samples are drawn from the
tilted law g_lam = p e^{lam L} / M(lam), M(lam) = E_P[e^{lam L}] = exp(K(lam)); the
weight p/g = exp(K - lam L) is a function of L and every term of the estimator is
bounded:

    Y = exp(K - lam L) (1 - e^{eps - L})_+  <=  B(eps) = exp(K - lam eps) c(lam),
    c(lam) = lam^lam / (1 + lam)^(1 + lam)         (the maximum of e^{-lam u}(1 - e^{-u}), u >= 0),

:func:`log_c` is log c(lam).  The helpers the samplers build their tilted laws from:

* :func:`_binomial_terms`: the expansion (1 - q + q u)^{k+1} = sum_j C(k+1, j)
  (1-q)^{k+1-j} q^j u^j that makes the integer-tilted remove-direction law of a
  Poisson-subsampled pair, q0 (1 - q + q e^r)^{k+1}, a finite mixture of the laws
  q0 e^{j r} / c_j (for the Gaussian the expansion of Mironov, Talwar & Zhang 2019);
* :func:`_slope`: the derivative of the convex function log(1 - q + q e^r), whose
  tangents give the exponential envelopes of the add-direction rejection samplers (the
  function itself is :func:`dpforge.mechanisms.pairs.subsampled_log_ratio`, the one
  NumPy implementation in dpforge);
* :func:`_quad_log`: adaptive quadrature of exp(log f) with the quadrature's own error
  estimate added, so the add-direction normalisers M(lam) err upwards (conservative);
* :func:`_logsumexp`, :func:`_log_abs_expm1`: stable log-space arithmetic.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
from scipy import integrate, special

#: quadrature tolerance for the add-direction normalisers
_QUAD_RTOL = 1e-12


def _slope(r: float, q: float) -> float:
    """d/dr log(1 - q + q e^r) = q e^r / (1 - q + q e^r)."""
    if q >= 1.0:
        return 1.0
    return float(special.expit(r + math.log(q) - math.log1p(-q)))


def log_c(lam: float) -> float:
    """log of max_{u >= 0} e^{-lam u} (1 - e^{-u}) = lam^lam / (1 + lam)^(1 + lam)."""
    return float(special.xlogy(lam, lam) - special.xlogy(1.0 + lam, 1.0 + lam))


def _logsumexp(values) -> float:
    """log sum exp(values) as a float (-inf for no values)."""
    values = np.asarray(values, dtype=float)
    return float(special.logsumexp(values)) if values.size else -math.inf


def _binomial_terms(lam: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(j, log pi_j) with pi_j = C(k+1, j) (1-q)^{k+1-j} q^j, k = lam: the expansion of
    (1 - q + q u)^{k+1}.  For q = 1 the single term j = 1 + lam (any real lam)."""
    if q >= 1.0:
        return np.array([1.0 + lam]), np.array([0.0])
    k = int(round(lam))
    j = np.arange(k + 2, dtype=float)
    log_pi = (
        special.gammaln(k + 2.0)
        - special.gammaln(j + 1.0)
        - special.gammaln(k + 2.0 - j)
        + (k + 1.0 - j) * math.log1p(-q)
        + j * math.log(q)
    )
    return j, log_pi


def _log_abs_expm1(x: np.ndarray) -> np.ndarray:
    """log|e^x - 1| for x != 0, stable for large |x|."""
    x = np.asarray(x, dtype=float)
    big = x > 1.0
    safe = np.where(big, 1.0, x)
    return np.where(big, x + np.log1p(-np.exp(-np.where(big, x, 1.0))), np.log(np.abs(np.expm1(safe))))


def _quad_log(log_f: Callable[[float], float], low: float, high: float, points: Sequence[float]) -> float:
    """log of the integral of exp(log_f) over [low, high] (log_f <= ~0 near its maximum),
    plus the quadrature's own error estimate (so it errs upwards)."""
    inner = sorted({p for p in points if low < p < high})
    with warnings.catch_warnings():
        # a tolerance that cannot be met is reported through the error estimate, added below
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, error = integrate.quad(
            lambda x: math.exp(log_f(x)), low, high, points=inner or None, epsabs=0.0, epsrel=_QUAD_RTOL, limit=500
        )
    return math.log(value + abs(error)) if value + abs(error) > 0 else -math.inf
