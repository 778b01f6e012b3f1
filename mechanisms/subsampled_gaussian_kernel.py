"""Compiled distribution functions of the privacy loss of a Poisson-subsampled Gaussian.

The same quantities as :meth:`dpforge.mechanisms.pairs.PrivacyLoss.distribution_functions`
for a :class:`~dpforge.mechanisms.pairs.GaussianPair`, in one compiled pass: a ledger of
thousands of distinct steps discretises thousands of laws, and the vectorised numpy path
spends most of its time in per-call overhead on small arrays.

With y = l (remove) or -l (add), the base ratio is r = log(e^y - (1 - q)) - log q for
y > log(1 - q) (Balle, Barthe, Gaboardi 2018), and under N(mu, 1) vs N(0, 1) r is
N(+-mu^2/2, mu^2), so Pr(r <= c) = Phi(c/mu -+ mu/2) with Phi(z) = erfc(-z/sqrt 2)/2,
the smaller of Phi(z) and Phi(-z) computed directly and the larger (>= 1/2) as one minus
it, so that every probability is accurate in its own tail.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def _ndtr(z: float) -> float:  # pragma: no cover - jitted
    """Phi(z) = erfc(-z / sqrt 2) / 2, accurate in the lower tail."""
    return 0.5 * math.erfc(-z * 0.7071067811865476)


@numba.njit(cache=True)
def _both_tails(z: float) -> tuple[float, float]:  # pragma: no cover - jitted
    """(Phi(z), Phi(-z)): the smaller one from erfc, the other (>= 1/2) as one minus it,
    which loses nothing (an absolute error of an ulp on a value of at least 1/2)."""
    if z < 0.0:
        small = _ndtr(z)
        return small, 1.0 - small
    small = _ndtr(-z)
    return 1.0 - small, small


@numba.njit(cache=True)
def subsampled_gaussian_distribution_functions(ell, mu, q, remove):  # pragma: no cover - jitted
    """(Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l)) at every l of ``ell``."""
    n = ell.size
    cdf_p = np.empty(n)
    sf_p = np.empty(n)
    cdf_q = np.empty(n)
    sf_q = np.empty(n)
    subsampled = q < 1.0
    log1m_q = math.log1p(-q) if subsampled else -np.inf
    log_q = math.log(q)
    for i in range(n):
        y = ell[i] if remove else -ell[i]
        valid = (not subsampled) or y > log1m_q
        if not valid:
            # remove: l <= log(1-q), below every loss; add: l >= -log(1-q), above every loss
            if remove:
                cdf_p[i], sf_p[i], cdf_q[i], sf_q[i] = 0.0, 1.0, 0.0, 1.0
            else:
                cdf_p[i], sf_p[i], cdf_q[i], sf_q[i] = 1.0, 0.0, 1.0, 0.0
            continue
        if not subsampled:
            r = y
        elif y > 1.0:
            r = y + math.log1p(-(1.0 - q) * math.exp(-y)) - log_q
        else:
            r = math.log(math.expm1(y) + q) - log_q
        z_p = r / mu - 0.5 * mu
        z_q = r / mu + 0.5 * mu
        below_p0, above_p0 = _both_tails(z_p)
        below_q0, above_q0 = _both_tails(z_q)
        if remove:  # P = (1-q) Q0 + q P0, Q = Q0, L increasing in r
            cdf_p[i] = (1.0 - q) * below_q0 + q * below_p0
            sf_p[i] = (1.0 - q) * above_q0 + q * above_p0
            cdf_q[i] = below_q0
            sf_q[i] = above_q0
        else:  # P = Q0, Q = (1-q) Q0 + q P0, L decreasing in r
            cdf_p[i] = above_q0
            sf_p[i] = below_q0
            cdf_q[i] = (1.0 - q) * above_q0 + q * above_p0
            sf_q[i] = (1.0 - q) * below_q0 + q * below_p0
    return cdf_p, sf_p, cdf_q, sf_q
