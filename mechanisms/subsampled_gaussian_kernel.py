"""Compiled distribution functions of the privacy loss of a Poisson-subsampled Gaussian.

The same quantities as :meth:`dpforge.mechanisms.pairs.PrivacyLoss.distribution_functions`
for a :class:`~dpforge.mechanisms.pairs.GaussianPair`, in one compiled pass: a ledger of
thousands of distinct steps discretises thousands of laws, and the vectorised numpy path
spends most of its time in per-call overhead on small arrays.

With y = l (remove) or -l (add), the base ratio is r = log(e^y - (1 - q)) - log q
= log1p(expm1(y)/q) for y > log(1 - q) (Balle, Barthe, Gaboardi 2018), and under N(mu, 1) vs N(0, 1) r is
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
def _ratio(y, q, subsampled):  # pragma: no cover - jitted
    """(r, expm1(y)) for the base ratio r = log(e^y - (1 - q)) - log q: r = y without
    subsampling; y + log1p(-(1 - q) e^-y) - log q for y > 1; log1p(expm1(y)/q) otherwise
    (no log q to cancel, so r keeps a few ulps of its own size:
    accounting/prv/rounding.py).  expm1(y) is nan where it is not computed; the error
    model (accounting/prv/rounding.py) reads both off this one computation."""
    if not subsampled:
        return y, math.nan
    if y > 1.0:
        return y + math.log1p(-(1.0 - q) * math.exp(-y)) - math.log(q), math.nan
    shifted = math.expm1(y)
    x = shifted / q
    return (math.log1p(x) if x > -1.0 else -math.inf), shifted


@numba.njit(cache=True)
def _base_at(l, mu, q, remove, subsampled, log1m_q):  # pragma: no cover - jitted
    """(Pr_C(L <= l), Pr_C(L > l), Pr_S(L <= l), Pr_S(L > l)) at one point, for the
    common measure C = Q0 = N(0, 1) and the sampled one S = P0 = N(mu, 1)."""
    y = l if remove else -l
    valid = (not subsampled) or y > log1m_q
    if not valid:
        # remove: l <= log(1-q), below every loss; add: l >= -log(1-q), above every loss
        if remove:
            return 0.0, 1.0, 0.0, 1.0
        return 1.0, 0.0, 1.0, 0.0
    r = _ratio(y, q, subsampled)[0]
    z_p = r / mu - 0.5 * mu
    z_q = r / mu + 0.5 * mu
    below_p0, above_p0 = _both_tails(z_p)
    below_q0, above_q0 = _both_tails(z_q)
    if remove:  # L increasing in r
        return below_q0, above_q0, below_p0, above_p0
    return above_q0, below_q0, above_p0, below_p0  # add: L decreasing in r


@numba.njit(cache=True)
def _at(l, mu, q, remove, subsampled, log1m_q):  # pragma: no cover - jitted
    """(Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l)) at one point: remove has
    P = (1-q) C + q S and Q = C, add has P = C and Q = (1-q) C + q S."""
    c_le, c_gt, s_le, s_gt = _base_at(l, mu, q, remove, subsampled, log1m_q)
    if remove:
        return (1.0 - q) * c_le + q * s_le, (1.0 - q) * c_gt + q * s_gt, c_le, c_gt
    return c_le, c_gt, (1.0 - q) * c_le + q * s_le, (1.0 - q) * c_gt + q * s_gt


@numba.njit(cache=True)
def subsampled_gaussian_base_functions(ell, mu, q, remove):  # pragma: no cover - jitted
    """(Pr_C(L <= l), Pr_C(L > l), Pr_S(L <= l), Pr_S(L > l)) at every l of ``ell``
    (:func:`_base_at`)."""
    n = ell.size
    out = np.empty((4, n))
    subsampled = q < 1.0
    log1m_q = math.log1p(-q) if subsampled else -np.inf
    for i in range(n):
        out[0, i], out[1, i], out[2, i], out[3, i] = _base_at(ell[i], mu, q, remove, subsampled, log1m_q)
    return out[0], out[1], out[2], out[3]


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
    for i in range(n):
        cdf_p[i], sf_p[i], cdf_q[i], sf_q[i] = _at(ell[i], mu, q, remove, subsampled, log1m_q)
    return cdf_p, sf_p, cdf_q, sf_q


#: quantile kinds of :func:`subsampled_gaussian_quantiles`
LEVEL, LOWER, UPPER = 0, 1, 2


@numba.njit(cache=True)
def subsampled_gaussian_quantiles(mu, q, remove, lo_support, hi_support, kinds, values, ladder, fractions):  # pragma: no cover - jitted
    """:meth:`dpforge.mechanisms.pairs.PrivacyLoss.quantiles` for a subsampled Gaussian,
    compiled: the same ladder, the same four rounds of cutting each bracket into
    ``fractions.size - 1``, the same side of every switch.  ``kinds[i]`` is LEVEL
    (smallest l with Pr_P(L <= l) >= value), LOWER (largest l <= min(support end, 0) with
    Pr_P(L <= l) <= value) or UPPER (smallest l >= max(support start, 0) with
    Pr_P(L > l) <= value).  Returns (answers, status): status 1 when a tail does not
    decay (the caller raises)."""
    subsampled = q < 1.0
    log1m_q = math.log1p(-q) if subsampled else -np.inf
    count = 0
    for v in ladder:
        if v > lo_support and v < hi_support:
            count += 1
    extra = (1 if np.isfinite(lo_support) else 0) + (1 if np.isfinite(hi_support) else 0)
    raw = np.empty(count + extra)
    j = 0
    for v in ladder:
        if v > lo_support and v < hi_support:
            raw[j] = v
            j += 1
    if np.isfinite(lo_support):
        raw[j] = lo_support
        j += 1
    if np.isfinite(hi_support):
        raw[j] = hi_support
    points = np.unique(raw)
    n = points.size
    cdf_p = np.empty(n)
    sf_p = np.empty(n)
    for i in range(n):
        a, b, _, _ = _at(points[i], mu, q, remove, subsampled, log1m_q)
        cdf_p[i] = a
        sf_p[i] = b
    targets = kinds.size
    answers = np.empty(targets)
    open_ = np.zeros(targets, dtype=np.bool_)
    lows = np.empty(targets)
    highs = np.empty(targets)
    for t in range(targets):
        kind, value = kinds[t], values[t]
        if kind == LOWER and np.isfinite(lo_support):
            answers[t] = lo_support
            continue
        if kind == UPPER and np.isfinite(hi_support):
            answers[t] = hi_support
            continue
        if kind == LOWER:
            last = -1
            for i in range(n):
                if points[i] <= min(hi_support, 0.0) and cdf_p[i] <= value:
                    last = i
            if last < 0:
                return answers, 1
            if last + 1 >= n or not points[last + 1] <= min(hi_support, 0.0):
                answers[t] = points[last]
            else:
                open_[t] = True
                lows[t], highs[t] = points[last], points[last + 1]
            continue
        first = -1
        for i in range(n):
            if kind == UPPER:
                holds = sf_p[i] <= value and points[i] >= max(lo_support, 0.0)
            else:
                holds = cdf_p[i] >= value
            if holds:
                first = i
                break
        if first < 0:
            if kind == UPPER:
                return answers, 1
            answers[t] = points[n - 1]
            continue
        allowed_before = first > 0 and (kind != UPPER or points[first - 1] >= max(lo_support, 0.0))
        if not allowed_before:
            answers[t] = points[first]
        else:
            open_[t] = True
            lows[t], highs[t] = points[first - 1], points[first]
    cuts = fractions.size
    grid = np.empty(cuts)
    for _ in range(4):
        for t in range(targets):
            if not open_[t]:
                continue
            kind, value = kinds[t], values[t]
            low, high = lows[t], highs[t]
            at = cuts - 1
            for c in range(cuts):
                grid[c] = low + (high - low) * fractions[c]
            grid[cuts - 1] = high
            for c in range(cuts - 1):
                a, b, _, _ = _at(grid[c], mu, q, remove, subsampled, log1m_q)
                if kind == LOWER:
                    switched = a > value
                elif kind == UPPER:
                    switched = b <= value
                else:
                    switched = a >= value
                if switched:
                    at = c
                    break
            at = max(at, 1)
            lows[t], highs[t] = grid[at - 1], grid[at]
    for t in range(targets):
        if open_[t]:
            answers[t] = lows[t] if kinds[t] == LOWER else highs[t]
    return answers, 0
