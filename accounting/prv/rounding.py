"""The floating-point error model of a privacy-loss law's distribution functions.

Every certified construction reads probabilities off computed distribution functions
(Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l)); a computed value F^ differs from
the exact F.  The discretisations difference F at neighbouring grid edges, so a cell's
mass carries the error of two values that may be far larger than the cell itself (a fine
cell in the middle of the law: F near 1/2, the cell's mass 1e-5 of that), and the label
losses log P_k/Q_k of the optimistic measure inherit it.

The model.  Each value is a tail probability (the smaller of F and 1 - F is computed
directly, so each is accurate in its own tail) of a standardised argument z computed
from l: the subsampling map r(l) = log(e^l - (1 - q)) - log q (Balle, Barthe, Gaboardi
2018), computed as log1p(expm1(l)/q) (a few ulps of |r|; r within 4 ulps of an atom of
the base pair is that atom, so that an atom's image maps back onto it), whose rounding
grows near the support's edge log(1 - q), where expm1(l) + q cancels; then
the base pair's standardisation (z = r/mu -+ mu/2 for a Gaussian: the 1/mu of a small
mu enlarges r's rounding).  Moving z by dz moves a Gaussian-like tail probability t by
about dz (sqrt(2 log 1/t) + 2) relatively (the Mills ratio), and each special function
adds 4 ulps of its own; the bound is that first-order estimate times ``SAFETY``,
applied to t = min(F, 1 - F) (the larger value is one minus it, or a mixture of such,
whose absolute error is the smaller one's), plus four ulps of F itself (the complement
and the subsampling mixture round it); :func:`_errors_kernel` has the terms.  It is
checked against mpmath for Gaussian and Laplace pairs from sigma = 0.3 to 1000 and q =
1e-6 to 1 (tests/accounting/prv/test_rounding.py), where the actual errors use at most
a fifth of it.  The other pairs (LMO, the replace-one pairs) use an
argument scale ``GENERIC_AMPLIFICATION`` times larger, not checked against references
(randomised response none: its functions are sums of two fixed atom masses).
The one-step closed forms (:mod:`.exact`) read a coarser model of the same kind at one
point.

A finite discrete law (:class:`.discrete_loss.DiscreteLoss`, a composed chunk) is summed
in floating point: a sum of k positive terms is within k ulps of its exact value.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpforge.mechanisms.pairs import GaussianPair, LaplacePair, PrivacyLoss, RandomizedResponsePair
from dpforge.mechanisms.subsampled_gaussian_kernel import _both_tails, _ratio

#: the unit round-off
U = 2.0**-53
#: the error model's factor over its first-order estimate
SAFETY = 8.0
#: the argument scale of pairs whose distribution functions are not checked against references
GENERIC_AMPLIFICATION = 1024.0
#: an absolute floor on every modelled error (probabilities that underflow)
FLOOR = 1e-300


def tail_factor(probability: float) -> float:
    """A bound on |d log P / d x| for a tail probability P of a standardised argument,
    Gaussian-like (Mills ratio: about sqrt(2 log(1/P)) + 1)."""
    return math.sqrt(2.0 * max(-math.log(probability), 0.0)) + 2.0 if probability > 0.0 else 0.0


def argument_scale(pair: object) -> tuple[float, float, bool]:
    """(the factor by which the base pair scales the log-likelihood ratio r into its
    standardised argument, the constant it adds, whether its tails are Gaussian):
    (1/mu, mu/2, True) for a Gaussian (z = r/mu -+ mu/2), (1/2, a, False) for Laplace
    (x = (r + a)/2, shifted by -a under P0, with exponential tails: d log t/dx = 1), (0,
    0) for randomised response (its functions are sums of two fixed atom masses), and
    ``GENERIC_AMPLIFICATION`` times (1, 1) with Gaussian tails otherwise."""
    if type(pair) is GaussianPair:
        mu = float(pair.mu)
        return 1.0 / mu, 0.5 * mu, True
    if type(pair) is LaplacePair:
        return 0.5, float(pair.a), False
    if type(pair) is RandomizedResponsePair:  # sums of two fixed atom masses: no argument
        return 0.0, 0.0, False
    return GENERIC_AMPLIFICATION, GENERIC_AMPLIFICATION, True


def argument_amplification(pair: object) -> float:
    """How much the base pair's standardisation enlarges its argument's rounding (the
    one-step closed forms' model, :mod:`.exact`): 1/mu + mu/2 for a Gaussian (at least
    1), 1 for Laplace, ``GENERIC_AMPLIFICATION`` otherwise."""
    if type(pair) is GaussianPair:
        mu = float(pair.mu)
        return max(1.0, 1.0 / mu) + 0.5 * mu
    if type(pair) is LaplacePair:
        return 1.0
    return GENERIC_AMPLIFICATION


@numba.njit(cache=True)
def _rounding_of(y, r, shifted, rate, log_rate, inverse_scale, offset, snapped):  # pragma: no cover - jitted
    """The rounding of the standardised argument at y = sign * l, given the ratio r and
    expm1(y) as :func:`.subsampled_gaussian_kernel._ratio` computed them
    (:func:`_errors_kernel`)."""
    u = 1.1102230246251565e-16
    if rate >= 1.0:
        return 2.0 * u * (abs(y) * inverse_scale + offset)
    if y <= 1.0:
        total = shifted + rate
        if total <= 0.0:  # outside the support the functions are the exact 0 and 1
            return 0.0
        # r = log1p(x), x = expm1(y)/q carrying 2 ulps: r moves by 2u |x|/(1 + x)
        # = 2u |expm1 y| / (expm1 y + q) (large near the edge), plus its own ulp
        rounding_r = 2.0 * u * (abs(shifted) / total + abs(r))
        if snapped:  # r within 4 ulps of an atom is moved onto it
            rounding_r += 8.0 * u * max(1.0, abs(r))
        return rounding_r * inverse_scale + 2.0 * u * (abs(r) * inverse_scale + offset)
    rounding_r = 2.0 * u * (abs(y) + 2.0 - log_rate + abs(r))
    return rounding_r * inverse_scale + 2.0 * u * (abs(r) * inverse_scale + offset)


@numba.njit(cache=True)
def _argument_rounding(l, rate, log_rate, sign, inverse_scale, offset, snapped):  # pragma: no cover - jitted
    """The rounding of the standardised argument at the loss l (:func:`_errors_kernel`)."""
    if not math.isfinite(l):
        return 0.0
    y = sign * l
    r, shifted = _ratio(y, rate, rate < 1.0)
    return _rounding_of(y, r, shifted, rate, log_rate, inverse_scale, offset, snapped)


@numba.njit(cache=True)
def _value_error(value, argument, gaussian_tails):  # pragma: no cover - jitted
    """The modelled error of one computed value (:func:`_errors_kernel`)."""
    u = 1.1102230246251565e-16
    tail = max(min(value, 1.0 - value), 0.0)
    error = 8.0 * u * abs(value) + FLOOR
    if tail > 0.0:
        factor = 1.0
        if gaussian_tails:
            # log 1/t <= (1 - e) log 2 for t = m 2^e, m in [1/2, 1): no logarithm
            exponent = math.frexp(tail)[1]
            factor = math.sqrt(2.0 * 0.6931471805599453 * max(1 - exponent, 0)) + 2.0
        error += SAFETY * (4.0 * u + argument * factor) * tail
    return error if not math.isnan(error) else math.inf


@numba.njit(cache=True)
def _errors_kernel(ell, v0, v1, v2, v3, rate, sign, inverse_scale, offset, gaussian_tails, snapped):  # pragma: no cover - jitted
    """The model of :func:`function_errors` for a mechanism's law, in one pass.

    With y = sign * l, r = log(e^y - (1 - q)) - log q is computed for y <= 1 as
    log1p(expm1(y)/q) (with the argument's 2 ulps r moves by 2u c, c = |expm1 y| /
    (expm1 y + q), about |r| for small r and large near the support's edge log(1 - q))
    and for y > 1 as y + log1p(-(1 - q) e^-y) - log q (2u (|y| + 2 + |log q|)); r = y
    exactly when q = 1; a law with atoms (``snapped``) moves r within 4 ulps of an atom
    onto it (8u max(1, |r|) more); each form adds 2u |r|.  The standardised argument
    z = r * inverse_scale +- offset adds 2u (|r| inverse_scale + offset).  A tail value
    t = min(F, 1 - F) then moves by about |dz| (sqrt(2 log 1/t) + 2) relatively (|dz|
    for the exponential tails of Laplace), and its special function by 4 ulps; the
    error is SAFETY times that, plus 8u F (the value's own rounding).  Outside the
    support the functions are the exact 0 and 1."""
    log_rate = math.log(rate)
    size = ell.size
    e0, e1, e2, e3 = np.empty(size), np.empty(size), np.empty(size), np.empty(size)
    for i in range(size):
        argument = _argument_rounding(ell[i], rate, log_rate, sign, inverse_scale, offset, snapped)
        e0[i] = _value_error(v0[i], argument, gaussian_tails)
        e1[i] = _value_error(v1[i], argument, gaussian_tails)
        e2[i] = _value_error(v2[i], argument, gaussian_tails)
        e3[i] = _value_error(v3[i], argument, gaussian_tails)
    return e0, e1, e2, e3


@numba.njit(cache=True)
def _gaussian_base_kernel(ell, mu, q, remove):  # pragma: no cover - jitted
    """A subsampled Gaussian's base functions (:func:`.subsampled_gaussian_kernel._base_at`)
    and their modelled errors in one pass.  The ratio r and its rounding share one
    expm1 and one log1p (or one exp and one log1p) per point
    (:func:`.subsampled_gaussian_kernel._ratio`, then :func:`_rounding_of`): the same
    numbers :func:`_argument_rounding` and ``_base_at`` give apart (they were 40 % of
    the pass)."""
    size = ell.size
    values = np.empty((4, size))
    errors = np.empty((4, size))
    subsampled = q < 1.0
    log1m_q = math.log1p(-q) if subsampled else -np.inf
    log_rate = math.log(q)
    inverse_scale, offset = 1.0 / mu, 0.5 * mu
    for i in range(size):
        l = ell[i]
        y = l if remove else -l
        r, shifted = _ratio(y, q, subsampled)
        argument = _rounding_of(y, r, shifted, q, log_rate, inverse_scale, offset, False) if math.isfinite(l) else 0.0
        if subsampled and not y > log1m_q:
            # remove: l <= log(1-q), below every loss; add: l >= -log(1-q), above every loss
            c_le, c_gt, s_le, s_gt = (0.0, 1.0, 0.0, 1.0) if remove else (1.0, 0.0, 1.0, 0.0)
        else:
            below_p0, above_p0 = _both_tails(r / mu - 0.5 * mu)
            below_q0, above_q0 = _both_tails(r / mu + 0.5 * mu)
            if remove:  # L increasing in r
                c_le, c_gt, s_le, s_gt = below_q0, above_q0, below_p0, above_p0
            else:  # add: L decreasing in r
                c_le, c_gt, s_le, s_gt = above_q0, below_q0, above_p0, below_p0
        values[0, i], values[1, i], values[2, i], values[3, i] = c_le, c_gt, s_le, s_gt
        errors[0, i] = _value_error(c_le, argument, True)
        errors[1, i] = _value_error(c_gt, argument, True)
        errors[2, i] = _value_error(s_le, argument, True)
        errors[3, i] = _value_error(s_gt, argument, True)
    return values, errors


def base_functions_and_errors(loss: PrivacyLoss, ell: np.ndarray) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """(:meth:`PrivacyLoss.base_distribution_functions` at ``ell``, their modelled
    errors), in one compiled pass for a Gaussian pair."""
    ell = np.ascontiguousarray(ell, dtype=float)
    if type(loss.pair) is GaussianPair:
        values, errors = _gaussian_base_kernel(ell, float(loss.pair.mu), float(loss.sampling_rate), loss.direction == "remove")
        return (values[0], values[1], values[2], values[3]), (errors[0], errors[1], errors[2], errors[3])
    values = tuple(np.asarray(v, dtype=float) for v in loss.base_distribution_functions(ell))
    return values, function_errors(loss, ell, values)


def function_errors(loss: object, ell: np.ndarray, values: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Modelled absolute errors of the computed distribution functions ``values`` =
    (Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l)) at ``ell`` (module docstring)."""
    ell = np.asarray(ell, dtype=float)
    if not isinstance(loss, PrivacyLoss):
        # a finite discrete law: its cumulative sums are within (atoms summed) ulps
        count = getattr(loss, "positions", np.empty(0)).size + 2
        return tuple(SAFETY * count * U * np.asarray(v, dtype=float) + FLOOR for v in values)
    sign = 1.0 if loss.direction == "remove" else -1.0
    rate = min(float(loss.sampling_rate), 1.0)
    inverse_scale, offset, gaussian_tails = argument_scale(loss.pair)
    snapped = bool(loss.pair.atoms)  # PrivacyLoss._r_of_forward snaps r onto atoms
    flat = np.ascontiguousarray(ell.ravel())
    rows = [np.ascontiguousarray(np.ravel(v), dtype=float) for v in values]
    errors = _errors_kernel(flat, rows[0], rows[1], rows[2], rows[3], rate, sign, inverse_scale, offset, gaussian_tails, snapped)
    return tuple(row.reshape(ell.shape) for row in errors)
