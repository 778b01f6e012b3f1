"""The RDP engine: Rényi-DP curves of mechanism descriptions and their (ε, δ) conversion.

Formulas (α is the Rényi order, every curve is an array over a set of orders α > 1):

* Gaussian, noise multiplier σ (Mironov 2017, Prop. 7): ρ(α) = α / (2σ²).
* Laplace, a = sensitivity/scale (Mironov 2017, Prop. 6):
  ρ(α) = 1/(α-1) log( α/(2α-1) e^{(α-1)a} + (α-1)/(2α-1) e^{-αa} ).
* ε-DP randomised response, the largest RDP of any ε-DP pair by data processing
  (Kairouz, Oh, Viswanath 2015; Mironov 2017, Prop. 5 for the order → ∞ limit):
  ρ(α) = 1/(α-1) log( (e^{αε} + e^{(1-α)ε}) / (1 + e^ε) ).
* Poisson-subsampled Gaussian, add-or-remove (Mironov, Talwar, Zhang 2019, "Rényi
  Differential Privacy of the Sampled Gaussian Mechanism"): ρ(α) = log A_α / (α-1) with
  A_α = E_{μ0}[(1 - q + q μ1/μ0)^α], μ0 = N(0, σ²), μ1 = N(1, σ²); Sec. 3.2 (integer α,
  binomial expansion) and Sec. 3.3 (fractional α, two series split at
  z0 = σ² log(1/q - 1) + 1/2).  The add direction is never larger (their Theorem 5), so
  this is the exact add-or-remove RDP.
* Any other Poisson-subsampled mechanism with base RDP ε(l) (Zhu & Wang 2019, "Poisson
  Subsampled Rényi Differential Privacy", ICML, Theorem 6), integer α ≥ 2:
  ρ(α) ≤ 1/(α-1) log( (1-q)^{α-1}(αq - q + 1) + C(α,2) q² (1-q)^{α-2} e^{ε(2)}
                      + 3 Σ_{l=3}^{α} C(α,l) (1-q)^{α-l} q^l e^{(l-1)ε(l)} ),
  combined (by taking the minimum) with the joint-convexity bound valid at every order,
  ρ(α) ≤ 1/(α-1) log(1 - q + q e^{(α-1)ε(α)}) (exp((α-1)D_α) is jointly convex).
* Composition: RDP curves add (Mironov 2017, Prop. 1).
* Conversion (Canonne, Kamath, Steinke 2020, Prop. 12; Balle et al. 2020, Thm. 21):
  ε(δ) = min_α ρ(α) + log(1 - 1/α) - (log δ + log α)/(α - 1),
  δ(ε) = min_α exp( (α-1)(ρ(α) - ε + log(1 - 1/α)) - log α ),
  both also using δ(ε) <= δ(0) = TV <= sqrt(1 - e^{-KL}) <= sqrt(1 - e^{-ρ(α)})
  (Bretagnolle-Huber; KL <= D_α), which only matters for tiny ρ.

RDP gives only upper bounds: the engine's ``lower`` is the trivial 0.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, Union

import numpy as np
from scipy import special

from dpforge.errors import ParameterError
from dpforge.validation import require_non_negative, require_positive, require_sampling_rate, shown

DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [
        np.arange(1.25, 2.0, 0.25),
        np.arange(2.0, 12.0 + 0.25, 0.5),
        np.arange(13.0, 65.0),
        np.array([80.0, 96.0, 128.0, 256.0, 512.0, 1024.0]),
    ]
)
DEFAULT_ORDERS.setflags(write=False)

_MAX_SERIES_TERMS = 1 << 20

#: the largest order the formulas evaluate.  An integer order alpha sums alpha terms (and a
#: fractional one about as many), so 1e300 would ask numpy for an impossible array; past
#: 1e6 the conversion's (log(1/delta) - log alpha)/(alpha - 1) is below 7.1e-4 nats at every
#: delta this library takes (>= 2.2e-308), and rho(alpha) does not decrease, so a larger
#: order could lower an epsilon bound by at most that much.
MAX_ORDER = 1e6


BaseRdp = Union[Callable[[np.ndarray], np.ndarray], Sequence[float], np.ndarray]


def require_orders(orders: object, maximum: float = MAX_ORDER) -> np.ndarray:
    """Orders as a non-empty 1-d float array of finite numbers in (1, ``maximum``]
    (one-line ValueError).  Formulas that sum over the order keep the default
    :data:`MAX_ORDER`; a conversion of given values takes any finite order
    (``maximum=math.inf``)."""
    allowed = "finite numbers > 1" if maximum == math.inf else f"numbers in (1, {maximum:g}]"
    try:
        values = np.atleast_1d(np.asarray(orders, dtype=float))
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"orders must be {allowed}, got {shown(orders)}") from None
    if values.ndim != 1 or values.size == 0:
        raise ParameterError(f"orders must be a non-empty 1-d sequence of {allowed}")
    bad = ~np.isfinite(values) | (values <= 1.0) | (values > maximum)
    if bad.any():
        raise ParameterError(f"orders must be {allowed}, got {float(values[bad][0])!r}")
    return values


def _is_integer(alpha: np.ndarray) -> np.ndarray:
    return np.equal(np.floor(alpha), alpha)


def _log_binom(n: float, k: np.ndarray) -> np.ndarray:
    """log |C(n, k)| for real n and integer k >= 0 (generalised binomial)."""
    return special.gammaln(n + 1.0) - special.gammaln(k + 1.0) - special.gammaln(n - k + 1.0)


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x - 1) for x > 0, accurate for tiny and huge x."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(x > 1.0, x + np.log1p(-np.exp(-np.maximum(x, 1.0))), np.log(np.expm1(np.minimum(x, 1.0))))


def _expm1_minus_x(x: np.ndarray) -> np.ndarray:
    """e^x - 1 - x, accurate near 0 (series for |x| < 0.01, relative error ~1e-14)."""
    x = np.asarray(x, dtype=float)
    small = np.abs(x) < 1e-2
    xs = np.where(small, x, 0.0)
    series = 0.5 * xs * xs * (1 + xs / 3 * (1 + xs / 4 * (1 + xs / 5 * (1 + xs / 6 * (1 + xs / 7)))))
    return np.where(small, series, np.expm1(np.where(small, 0.0, x)) - x)


def gaussian_rdp(noise_multiplier: float, orders: object) -> np.ndarray:
    """RDP of the Gaussian mechanism, ρ(α) = α/(2σ²) (Mironov 2017, Prop. 7)."""
    sigma = require_positive("noise_multiplier", noise_multiplier)
    alpha = require_orders(orders)
    return alpha / (2.0 * sigma * sigma)


def laplace_rdp(a: float, orders: object) -> np.ndarray:
    """Exact RDP of Lap(a, 1) vs Lap(0, 1), a = sensitivity/scale (Mironov 2017, Prop. 6):

    ρ(α) = 1/(α-1) log( α/(2α-1) e^{(α-1)a} + (α-1)/(2α-1) e^{-αa} ).

    For α·a <= 1 the argument of the log is written 1 + w g((α-1)a) + (1-w) g(-αa) with
    w = α/(2α-1) and g(x) = e^x - 1 - x (the first-order terms cancel exactly), so tiny
    values keep full relative accuracy; otherwise log-space (finite for huge α·a).
    """
    a = require_non_negative("a", a)
    alpha = require_orders(orders)
    w = alpha / (2 * alpha - 1)
    big = np.logaddexp(np.log(w) + (alpha - 1) * a, np.log1p(-w) - alpha * a)
    near = alpha * a <= 1.0
    a_near = np.where(near, a, 0.0)
    small = np.log1p(w * _expm1_minus_x((alpha - 1) * a_near) + (1 - w) * _expm1_minus_x(-alpha * a_near))
    value = np.where(near, small, big) / (alpha - 1)
    return np.maximum(value, 0.0)


def randomized_response_rdp(epsilon: float, orders: object) -> np.ndarray:
    """Exact RDP of the ε-DP randomised-response pair, P = (p, 1-p), Q = (1-p, p),
    p = e^ε/(1+e^ε):  ρ(α) = 1/(α-1) log( p e^{(α-1)ε} + (1-p) e^{-(α-1)ε} ).

    Every ε-DP pair is a post-processing of this pair (Kairouz, Oh, Viswanath 2015), so by
    data processing this is the largest RDP of any ε-DP mechanism; it tends to ε as α → ∞
    (Mironov 2017, Prop. 5 gives ε as the order-free bound).
    """
    eps = require_non_negative("epsilon", epsilon)
    alpha = require_orders(orders)
    x = (alpha - 1) * eps
    log_p = -np.logaddexp(0.0, -eps)
    log_1mp = -np.logaddexp(0.0, eps)
    p, one_minus_p = math.exp(log_p), math.exp(log_1mp)
    xs = np.minimum(x, 1.0)
    # p expm1(x) + (1-p) expm1(-x) = tanh(ε/2) x + p g(x) + (1-p) g(-x), g(x) = e^x - 1 - x:
    # three non-negative terms, so tiny ε keeps its relative precision
    small = np.log1p(math.tanh(eps / 2) * xs + p * _expm1_minus_x(xs) + one_minus_p * _expm1_minus_x(-xs))
    big = np.logaddexp(log_p + x, log_1mp - x)
    return np.maximum(np.where(x <= 1.0, small, big) / (alpha - 1), 0.0)


def _mtz_log_a_minus_1_integer(q: float, sigma: float, alpha: int) -> float:
    """log(A_α - 1) at integer α (MTZ 2019, Sec. 3.2):

    A_α = Σ_{i=0}^{α} C(α,i) q^i (1-q)^{α-i} e^{(i²-i)/(2σ²)}; since the binomial weights
    sum to 1 and the i = 0, 1 exponents vanish,
    A_α - 1 = Σ_{i=2}^{α} C(α,i) q^i (1-q)^{α-i} (e^{(i²-i)/(2σ²)} - 1) (all terms >= 0).
    """
    i = np.arange(2, alpha + 1, dtype=float)
    logs = (
        _log_binom(float(alpha), i)
        + i * math.log(q)
        + (alpha - i) * math.log1p(-q)
        + _log_expm1((i * i - i) / (2.0 * sigma * sigma))
    )
    return float(special.logsumexp(logs))


def _mtz_log_a_fractional(q: float, sigma: float, alpha: float) -> float:
    """log A_α at fractional α by the two series of MTZ 2019, Sec. 3.3.

    Split the line at z0 = σ² log(1/q - 1) + 1/2 (where q μ1 = (1-q) μ0) and expand
    (1-q + q x)^α by the generalised binomial series on each side:
    A_α = Σ_{i>=0} C(α,i) q^i (1-q)^{α-i} e^{(i²-i)/(2σ²)} Φ((z0 - i)/σ)
        + Σ_{i>=0} C(α,i) q^{α-i} (1-q)^i e^{(j²-j)/(2σ²)} Φ((j - z0)/σ),  j = α - i.
    C(α,i) changes sign for i > α: the signs are kept (the terms then alternate with
    decreasing size, so the truncation error is below the first omitted term; the last
    term is halved, the usual averaging of two partial sums).  Summing absolute values,
    as dp_accounting 0.6.0 does, over-states A_α (by about 4% in ρ at α = 1.5, q = 0.01,
    σ = 1).
    """
    log_q, log_1mq = math.log(q), math.log1p(-q)
    z0 = sigma * sigma * (math.log1p(-q) - math.log(q)) + 0.5
    count = int(math.ceil(alpha)) + 256
    while True:
        i = np.arange(count, dtype=float)
        j = alpha - i
        log_b = _log_binom(alpha, i)
        sign = special.gammasgn(alpha - i + 1.0)  # C(α,i) has the sign of Γ(α-i+1)
        part0 = log_b + i * log_q + (alpha - i) * log_1mq + (i * i - i) / (2 * sigma**2) + special.log_ndtr((z0 - i) / sigma)
        part1 = log_b + j * log_q + i * log_1mq + (j * j - j) / (2 * sigma**2) + special.log_ndtr((j - z0) / sigma)
        logs = np.logaddexp(part0, part1)
        weights = sign.copy()
        weights[-1] *= 0.5
        total, total_sign = special.logsumexp(logs, b=weights, return_sign=True)
        if total_sign > 0 and logs[-1] < total + math.log(1e-17):
            return float(total)
        if count >= _MAX_SERIES_TERMS:
            if total_sign > 0 and logs[-1] < total + math.log(1e-9):
                return float(total)
            return math.inf  # not converged: no bound at this order
        count = min(4 * count, _MAX_SERIES_TERMS)


def subsampled_gaussian_rdp(sampling_rate: float, noise_multiplier: float, orders: object) -> np.ndarray:
    """Exact add-or-remove RDP of the Poisson-subsampled Gaussian mechanism
    (Mironov, Talwar, Zhang 2019): ρ(α) = log A_α/(α-1), A_α = E_{μ0}[(1-q+q μ1/μ0)^α].

    Integer α: binomial expansion of A_α - 1 in log space (Sec. 3.2), accurate to rounding
    even when ρ is tiny.  Fractional α: the two signed series of Sec. 3.3 (relative
    accuracy about 1e-16/(A_α - 1)).  q = 1 gives α/(2σ²).
    """
    q = require_sampling_rate("sampling_rate", sampling_rate)
    sigma = require_positive("noise_multiplier", noise_multiplier)
    alpha = require_orders(orders)
    if q == 1.0:
        return alpha / (2.0 * sigma * sigma)
    out = np.empty_like(alpha)
    for k, a in enumerate(alpha):
        if float(a).is_integer():
            out[k] = float(np.logaddexp(0.0, _mtz_log_a_minus_1_integer(q, sigma, int(a)))) / (a - 1)
        else:
            out[k] = _mtz_log_a_fractional(q, sigma, float(a)) / (a - 1)
    return np.maximum(out, 0.0)


def _base_values(base_rdp_at_integer: BaseRdp, top: int) -> np.ndarray:
    """ε(l) for l = 2..top from a callable or an array of values at l = 2, 3, ..."""
    levels = np.arange(2, top + 1, dtype=float)
    if callable(base_rdp_at_integer):
        values = np.asarray(base_rdp_at_integer(levels), dtype=float)
        if values.shape != levels.shape:
            raise ParameterError(
                f"base_rdp_at_integer must return one value per order l = 2..{top}, got shape {values.shape}"
            )
    else:
        values = np.asarray(base_rdp_at_integer, dtype=float).ravel()
        if values.size < levels.size:
            raise ParameterError(
                f"base_rdp_at_integer must hold ε(l) for l = 2..{top} ({levels.size} values), got {values.size}"
            )
        values = values[: levels.size]
    if np.isnan(values).any():
        raise ParameterError("base_rdp_at_integer must not contain NaN")
    # an RDP value is never negative: raising a (rounding-)negative value to 0 keeps it a bound
    return np.maximum(values, 0.0)


def zhu_wang_subsampled_rdp(sampling_rate: float, base_rdp_at_integer: BaseRdp, orders: object) -> np.ndarray:
    """Upper bound on the add-or-remove RDP of a Poisson-subsampled mechanism whose
    unsubsampled RDP at integer order l is ε(l) (Zhu & Wang 2019, ICML, Theorem 6):

    ρ(α) <= 1/(α-1) log( (1-q)^{α-1}(αq - q + 1) + C(α,2) q² (1-q)^{α-2} e^{ε(2)}
                        + 3 Σ_{l=3}^{α} C(α,l) (1-q)^{α-l} q^l e^{(l-1)ε(l)} ).

    Valid at integer α >= 2 only: **other orders are returned as +inf** (no bound).
    Computed as log1p of the excess over 1: the binomial weights sum to 1, so the bracket
    minus 1 is Σ_{l>=2} C(α,l) q^l (1-q)^{α-l} (c_l e^{(l-1)ε(l)} - 1), c_2 = 1, c_l = 3,
    a sum of non-negative terms (log-space, no cancellation).

    ``base_rdp_at_integer`` is a callable l ↦ ε(l) (float array in, array out) or an array
    of ε(2), ε(3), ... up to at least the largest integer order.  q = 1 returns ε(α).
    """
    q = require_sampling_rate("sampling_rate", sampling_rate)
    alpha = require_orders(orders)
    integer = _is_integer(alpha)
    out = np.full_like(alpha, np.inf)
    if not integer.any():
        return out
    top = int(alpha[integer].max())
    if top < 2:  # pragma: no cover - orders > 1 that are integers are >= 2
        return out
    eps = _base_values(base_rdp_at_integer, top)  # eps[l-2] = ε(l)
    if q == 1.0:
        out[integer] = eps[alpha[integer].astype(int) - 2]
        return out
    log_q, log_1mq = math.log(q), math.log1p(-q)
    levels = np.arange(2, top + 1, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        # log(c_l e^{(l-1)ε(l)} - 1)
        x = (levels - 1) * eps
        log_excess = np.where(levels == 2, _log_expm1(np.maximum(x, 1e-300)), math.log(3.0) + x + np.log1p(-np.exp(-x) / 3.0))
        log_excess = np.where(np.isinf(eps), np.inf, log_excess)
        log_excess = np.where((levels == 2) & (eps == 0.0), -np.inf, log_excess)
    for k in np.flatnonzero(integer):
        a = int(alpha[k])
        l = levels[: a - 1]
        logs = _log_binom(float(a), l) + l * log_q + (a - l) * log_1mq + log_excess[: a - 1]
        if np.isposinf(logs).any():
            out[k] = np.inf
            continue
        out[k] = float(np.logaddexp(0.0, special.logsumexp(logs))) / (a - 1)
    return out


def convexity_subsampled_rdp(sampling_rate: float, base_rdp: np.ndarray, orders: object) -> np.ndarray:
    """Bound valid at every order: exp((α-1) D_α(P||Q)) is jointly convex in (P, Q) for
    α > 1 (van Erven & Harremoës 2014, Thm. 13), and both subsampled pairs are mixtures
    (1-q)(Q0, Q0) + q(P0, Q0) / (1-q)(Q0, Q0) + q(Q0, P0), so (for a base pair with the same
    RDP in both directions) ρ(α) <= 1/(α-1) log(1 - q + q e^{(α-1)ε(α)})."""
    q = require_sampling_rate("sampling_rate", sampling_rate)
    alpha = require_orders(orders)
    eps = np.maximum(np.asarray(base_rdp, dtype=float), 0.0)
    with np.errstate(over="ignore"):
        log_excess = math.log(q) + _log_expm1(np.maximum((alpha - 1) * eps, 1e-300))
        value = np.logaddexp(0.0, log_excess) / (alpha - 1)
    return np.where(eps == 0.0, 0.0, np.where(np.isinf(eps), np.inf, value))


def wbk_without_replacement_rdp(
    sampling_rate: float, base_rdp_at_integer: BaseRdp, epsilon_infinity: float, orders: object
) -> np.ndarray:
    """Upper bound on the replace-one RDP of a mechanism run on a batch sampled without
    replacement (q = B/n), whose unsampled replace-one RDP at integer order l is ε(l)
    (Wang, Balle, Kasiviswanathan 2019, "Subsampled Rényi Differential Privacy and
    Analytical Moments Accountant", AISTATS, Theorem 9), integer α >= 2:

    A_α <= 1 + q² C(α,2) min{4 (e^{ε(2)} - 1), e^{ε(2)} min{2, (e^{ε(∞)} - 1)²}}
             + Σ_{j=3}^{α} q^j C(α,j) e^{(j-1) ε(j)} min{2, (e^{ε(∞)} - 1)^j},
    ρ(α) <= log(A_α) / (α - 1),

    with ε(∞) = ``epsilon_infinity`` (the pure epsilon; inf for the Gaussian).  A
    fractional order α takes the bound at ⌈α⌉ (D_α is non-decreasing in α, van Erven &
    Harremoës 2014, Thm. 3).  The strengthened Gaussian form (their Theorem 27, with
    forward differences, used by dp-accounting) is not implemented: this bound is never
    smaller than dp-accounting's."""
    q = require_sampling_rate("sampling_rate", sampling_rate)
    alpha = require_orders(orders)
    ceiling = np.ceil(alpha).astype(int)
    top = int(max(ceiling.max(), 2))
    eps = _base_values(base_rdp_at_integer, top)  # eps[l-2] = ε(l)
    if q == 1.0:
        return eps[ceiling - 2]
    levels = np.arange(2, top + 1, dtype=float)
    e_inf = float(epsilon_infinity)
    with np.errstate(over="ignore", divide="ignore"):
        log_cap = math.log(2.0) if not math.isfinite(e_inf) else np.minimum(math.log(2.0), levels * float(_log_expm1(max(e_inf, 1e-300))))
        log_cap = np.broadcast_to(np.asarray(log_cap, dtype=float), levels.shape)
        general = (levels - 1.0) * eps + log_cap
        second = min(math.log(4.0) + float(_log_expm1(max(eps[0], 1e-300))), float(general[0])) if eps[0] > 0 else -np.inf
        log_terms = np.where(levels == 2, second, general) + levels * math.log(q)
    out = np.empty_like(alpha)
    for k, a in enumerate(ceiling):
        l = levels[: a - 1]
        logs = _log_binom(float(a), l) + log_terms[: a - 1]
        out[k] = float(np.logaddexp(0.0, special.logsumexp(logs))) / (a - 1)
    return np.maximum(out, 0.0)
