"""Rényi divergences of Laplace-type noise: Laplace and LMO, scalar and vector releases.

* Laplace, shift v, scale b (Mironov 2017, Prop. 6):
  D_a = 1/(a-1) log( a/(2a-1) e^{(a-1) v/b} + (a-1)/(2a-1) e^{-a v/b} ).
* LMO, shift v: D_a = 1/(a-1) log I_a with I_a = integral of f(x - v)^a f(x)^{1-a} dx,
  by composite Gauss-Legendre quadrature on panels graded geometrically towards the
  peak of the integrand and out to 1e30 noise scales; the mass beyond is bounded by
  e^{(a-1) h(t_max)} S(t_max)/2 and added, so truncation only raises the value.
  Tiny divergences (vector releases at d ~ 1e8 put ~1e-12 on each coordinate) are kept:
  the quadrature integrates the excess I_a - 1 = int q phi_a(log p/q), phi_a >= 0, and
  returns log1p of it, each log-ratio moved outwards by its rounding allowance; where that
  allowance is not small against the value, the MGF/pure-DP bound is used instead
  (:func:`lmo_rdp_exact` says which route is used when).
* LMO, joint-convexity bound: I_a is jointly convex in (p, q) for a > 1 and both laws
  are eta-mixtures of Laplace laws with the same mixing, so
  I_a <= E_eta[ a/(2a-1) e^{(a-1) eta v} + (a-1)/(2a-1) e^{-a eta v} ]
       = a/(2a-1) M((a-1) v) + (a-1)/(2a-1) M(-a v),   M the MGF of eta.
  It is infinite where M diverges (Gamma: (a-1) v >= 1/theta; Exponential: >= lam).
  For small shifts it is evaluated as log1p of the MGFs' second-order excess (the
  first-order terms cancel exactly), never as the log of a number near 1.
* Pure-DP cap: LMO is eps0-DP with eps0 = log f(0)/f(v), so its divergence is at most
  that of randomised response RR(eps0), which dominates every eps0-DP pair
  (Kairouz, Oh, Viswanath 2015):
  D_a <= 1/(a-1) log( (e^{a eps0} + e^{(1-a) eps0}) / (1 + e^{eps0}) ).

Vector releases (``dimension`` d > 1, independent noise per coordinate) have Rényi
divergence additive over coordinates, sum_i g(v_i) with g the scalar divergence at
shift v_i (docs/design.md §5).  The worst case over the sensitivity ball is:

* L2 ball ||v||_2 <= C: if G(s) = g(sqrt(s)) is concave and non-decreasing on [0, C^2],
  Jensen gives sum_i G(v_i^2) <= d G(C^2/d) = d g(C/sqrt(d)).
* L1 ball ||v||_1 <= C: if g is convex and non-decreasing with g(0) = 0, it is
  superadditive, so sum_i g(v_i) <= g(C).

Both conditions are checked numerically (second differences on a grid of shifts) for
the mechanism at hand, per order; an order where the check fails is reported as
+inf (no bound), and a release where every order fails is refused.
"""

from __future__ import annotations

import math
from typing import Literal

import numba
import numpy as np

from dpforge.accounting.rdp.formulas import (
    _expm1_minus_x,
    laplace_rdp,
    randomized_response_rdp,
    require_orders,
)
from dpforge.errors import LimitError, ParameterError, UnsupportedError
from dpforge.mechanisms import lmo_density as kernels
from dpforge.mechanisms.base import Laplace
from dpforge.mechanisms.lmo import LMO
from dpforge.validation import require_non_negative

Method = Literal["exact", "mgf"]
METHODS = ("exact", "mgf")
#: points of the shift grid used to check concavity/convexity of the scalar divergence
SHAPE_CHECK_POINTS = 48

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)
#: rounding allowance of one computed log density, in units in the last place of 1 + |log f|
ROUNDING_ULPS = 64.0
#: largest relative rise of I_a - 1 from the rounding allowance accepted as resolved
PRECISION = 1e-3
_SERIES_REACH = 0.5  # the series for phi_a(L) is used where a |L| <= this
_SERIES_TERMS = 20
_UNIFORM_NODES, _UNIFORM_WEIGHTS = np.polynomial.legendre.leggauss(16)
_LOG_OVERFLOW = 600.0


#: Mironov (2017), Prop. 6, at shift/scale; the RDP engine's implementation
laplace_rdp_at_shift = laplace_rdp


def _shift(mechanism: LMO, shift: float | None) -> float:
    """The shift v: the sensitivity by default, else a finite number >= 0."""
    return float(mechanism.sensitivity) if shift is None else require_non_negative("shift", shift)


def _panels(start: float, stop: float, ratio: float = 2.0) -> np.ndarray:
    """Breakpoints from 0 through ``start`` to ``stop`` growing geometrically by ``ratio``."""
    count = max(int(math.ceil(math.log(stop / start) / math.log(ratio))), 1)
    return np.concatenate([[0.0], start * ratio ** np.arange(count + 1)])


def _gauss_legendre(breaks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and log weights of the composite 8-point rule on consecutive breakpoints."""
    lo, hi = breaks[:-1, None], breaks[1:, None]
    nodes = lo + 0.5 * (hi - lo) * (_GL_NODES[None, :] + 1.0)
    weights = 0.5 * (hi - lo) * _GL_WEIGHTS[None, :]
    return nodes.ravel(), np.log(weights.ravel())


def _noise_scale(mechanism: LMO) -> float:
    """A typical |x|: the median of |X| (by bisection on the tail)."""
    low, high = 0.0, 1.0
    while float(mechanism.log_abs_sf(high)) > math.log(0.5):
        low, high = high, 2 * high
    for _ in range(60):
        mid = 0.5 * (low + high)
        if float(mechanism.log_abs_sf(mid)) > math.log(0.5):
            low = mid
        else:
            high = mid
    return high


def _series_table(alpha: np.ndarray) -> np.ndarray:
    """Coefficients (1 - a^{1-n})/n!, n = 2.._SERIES_TERMS, one row per order: phi_a(L) is
    sum_n (a^n - a) L^n / n! = sum_n (1 - a^{1-n}) (a L)^n / n! (bounded by 1/n!, no overflow)."""
    n = np.arange(2, _SERIES_TERMS + 1, dtype=float)
    log_factorial = np.cumsum(np.log(n))  # log n! for n = 2, 3, ...
    return -np.expm1((1.0 - n[None, :]) * np.log(alpha)[:, None]) * np.exp(-log_factorial)[None, :]


@numba.njit(cache=True)
def _log_phi_one(a: float, x: float, coefficients: np.ndarray) -> float:
    """log phi_a(x) for one order a (its row of :func:`_series_table`); see :func:`_log_phi`."""
    if x == 0.0:
        return -np.inf
    y = a * x
    if abs(y) <= _SERIES_REACH:
        total = 0.0
        for k in range(coefficients.size - 1, -1, -1):
            total = coefficients[k] + y * total
        return math.log(total) + 2.0 * math.log(abs(y))
    beta = a - 1.0
    if x < 0:
        return math.log(math.exp(x) * math.expm1(beta * x) - beta * math.expm1(x))
    if beta * x > _LOG_OVERFLOW:
        return a * x + math.log1p(-math.exp(-beta * x) * (1.0 - beta * math.expm1(-x)))
    return x + math.log(math.expm1(beta * x) + beta * math.expm1(-x))  # e^L factored out


@numba.njit(cache=True)
def _log_phi_kernel(alpha: np.ndarray, ratio: np.ndarray, table: np.ndarray) -> np.ndarray:
    out = np.empty((alpha.size, ratio.size))
    for i in range(alpha.size):
        for j in range(ratio.size):
            out[i, j] = _log_phi_one(alpha[i], ratio[j], table[i])
    return out


def _log_phi(alpha: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """log phi_a(L) with phi_a(L) = e^{a L} - 1 - a (e^L - 1) >= 0 (convex in L, 0 only at
    L = 0), keeping relative precision for tiny L; one row per order in ``alpha``, one
    column per L in ``ratio``.

    * a |L| <= 1/2: the series sum_{n>=2} (a^n - a) L^n / n! (Horner in y = a L,
      _SERIES_TERMS terms), whose leading term a (a-1) L^2 / 2 is never cancelled by more
      than a factor 2;
    * elsewhere: phi = e^L expm1((a-1) L) - (a-1) expm1(L) (no cancellation of order 1
      for a near 1; at most a factor 5 at a |L| = 1/2), for L > 0 as
      e^L (expm1((a-1) L) + (a-1) expm1(-L)) in log space, and as
      e^{a L} (1 - e^{-(a-1) L} (1 + (a-1)(1 - e^{-L}))) where (a-1) L would overflow.
    """
    alpha = np.ascontiguousarray(alpha, dtype=float).reshape(-1)
    ratio = np.ascontiguousarray(ratio, dtype=float).reshape(-1)
    return _log_phi_kernel(alpha, ratio, _series_table(alpha))


@numba.njit(cache=True)
def _log_sum_kernel(alpha: np.ndarray, log_weight: np.ndarray, ratio: np.ndarray, table: np.ndarray) -> np.ndarray:
    """log sum_j e^{log_weight_j} phi_a(ratio_j) per order (two passes: max, then sum)."""
    out = np.empty(alpha.size)
    terms = np.empty(ratio.size)
    for i in range(alpha.size):
        top = -np.inf
        for j in range(ratio.size):
            terms[j] = log_weight[j] + _log_phi_one(alpha[i], ratio[j], table[i])
            top = max(top, terms[j])
        if top == -np.inf or not math.isfinite(top):
            out[i] = top
            continue
        total = 0.0
        for j in range(ratio.size):
            total += math.exp(terms[j] - top)
        out[i] = top + math.log(total)
    return out


def _log_excess(alpha: np.ndarray, log_weight: np.ndarray, log_base: np.ndarray, ratio: np.ndarray,
                allowance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log sum_i w_i q_i phi_a(L_i) per order: as computed, and with every L_i moved by its
    rounding allowance e_i away from 0: phi_a is convex with minimum 0 at L = 0 and
    phi_a(x) >= phi_a(-x) for x > 0 (odd terms of the series are positive), so its largest
    value over L_i +- e_i is at L_i + sign(L_i) e_i, or at |L_i| + e_i where |L_i| < e_i."""
    table = _series_table(alpha)
    weight = np.ascontiguousarray(log_weight + log_base, dtype=float)
    nominal = _log_sum_kernel(alpha, weight, np.ascontiguousarray(ratio, dtype=float), table)
    moved = np.where(np.abs(ratio) < allowance, np.abs(ratio) + allowance, ratio + np.sign(ratio) * allowance)
    return nominal, _log_sum_kernel(alpha, weight, np.ascontiguousarray(moved, dtype=float), table)


def _allowance(*log_densities: np.ndarray) -> np.ndarray:
    """Bound on the rounding error of a difference of computed log densities: ROUNDING_ULPS
    units in the last place of (1 + |log f|) per density (measured: under 2 against an
    80-digit mpmath evaluation of the closed forms)."""
    return ROUNDING_ULPS * np.finfo(float).eps * sum(1.0 + np.abs(g) for g in log_densities)


def _lmo_rdp_quadrature(mechanism: LMO, alpha: np.ndarray, v: float) -> tuple[np.ndarray, np.ndarray]:
    """(D_a certified against rounding, relative rounding allowance of I_a - 1) by the
    excess-integral quadrature of :func:`lmo_rdp_exact`."""
    packed = mechanism.packed
    scale = max(_noise_scale(mechanism), v)
    t_min, t_max = 1e-13 * min(scale, v), 1e30 * scale
    if not (t_min > 0 and math.isfinite(t_max)):  # e.g. gamma_shape 1e-300: a median |x| of inf
        raise LimitError(
            f"lmo_rdp_exact: the noise's median |x| ({scale:g}) at shift {v:g} puts the quadrature's range "
            f"[{t_min:g}, {t_max:g}] outside the floating-point range; the prv engine accounts such an LMO"
        )

    def g(t: np.ndarray) -> np.ndarray:
        return kernels.log_density_array(np.ascontiguousarray(t, dtype=float), packed)

    # right piece x = v + t (q = f(t + v), L = h(t)) and left piece x = -t (q = f(t), L = -h(t))
    t, log_w = _gauss_legendre(_panels(t_min, t_max))
    g_t, g_tv = g(t), g(t + v)
    h = g_t - g_tv  # log f(t)/f(t+v) >= 0, decreasing (f is log-convex on t >= 0)
    slack = _allowance(g_t, g_tv)
    # middle piece x in [0, v], graded towards x = v (u = v - x -> 0): q = f(v - u), L = g(u) - g(v - u)
    u_breaks = _panels(t_min, 0.5 * v)
    u_breaks = np.concatenate([u_breaks[u_breaks < 0.5 * v], np.linspace(0.5 * v, v, 9)])
    u, log_wu = _gauss_legendre(u_breaks)
    g_u, g_vu = g(u), g(v - u)
    # beyond t_max: phi(+-h(t)) <= phi(+-h(t_max)) (h decreasing), mass S(t_max)/2 on each side
    g_max, g_max_v = g(np.array([t_max])), g(np.array([t_max + v]))
    h_max = g_max - g_max_v
    log_half_tail = np.asarray(mechanism.log_abs_sf(t_max), dtype=float).reshape(1) - math.log(2.0)
    log_weight = np.concatenate([log_w, log_w, log_wu, [0.0, 0.0]])
    log_base = np.concatenate([g_tv, g_t, g_vu, log_half_tail, log_half_tail])
    ratio = np.concatenate([h, -h, g_u - g_vu, h_max, -h_max])
    allowance = np.concatenate([slack, slack, _allowance(g_u, g_vu), _allowance(g_max, g_max_v),
                                _allowance(g_max, g_max_v)])
    # the tail pieces already bound phi from above: take them at L +- allowance as well
    nominal, certified = _log_excess(alpha, log_weight, log_base, ratio, allowance)
    with np.errstate(over="ignore"):
        relative = np.expm1(certified - nominal)
    # I_a = 1 + J, D_a = log1p(J) / (a - 1), log1p(e^{log J}) = logaddexp(0, log J)
    return np.logaddexp(0.0, certified) / (alpha - 1), relative


def _lmo_rdp_exact_routed(mechanism: LMO, alpha: np.ndarray, v: float) -> tuple[np.ndarray, np.ndarray]:
    """(values, mask of orders that fell back to the MGF/pure-DP bound); see :func:`lmo_rdp_exact`."""
    if v == 0:
        return np.zeros_like(alpha), np.zeros(alpha.shape, dtype=bool)
    values, relative = _lmo_rdp_quadrature(mechanism, alpha, v)
    unresolved = ~(relative <= PRECISION)
    if unresolved.any():
        bound = np.minimum(lmo_rdp_mgf_bound(mechanism, alpha, v), lmo_pure_cap(mechanism, alpha, v))
        values = np.where(unresolved, np.minimum(values, bound), values)
    if np.isnan(values).any() or (values <= 0).any():  # pragma: no cover - defensive
        raise LimitError(
            f"lmo_rdp_exact: the divergence at shift {v!r} is below the floating-point floor; "
            "use lmo_bound='mgf' or a larger shift"
        )
    return values, unresolved


def lmo_rdp_exact(mechanism: LMO, orders, shift: float | None = None) -> np.ndarray:
    """Rényi divergence D_a(f(. - v) || f) of scalar LMO noise at shift v (default: the
    mechanism's sensitivity), by quadrature, certified against rounding; one value per order.

    Route: I_a = 1 + J with the excess integral
    J = integral of q phi_a(p/q) dx,  phi_a(L) = e^{a L} - 1 - a (e^L - 1) >= 0,
    L = log p/q (the first-order term integrates to int p - int q = 0).  Every term is
    non-negative, phi_a is evaluated without cancellation (:func:`_log_phi`) and
    D_a = log1p(J)/(a - 1), so divergences of 1e-20 keep their relative precision where
    log I_a (a log of a number near 1) loses them.  Each computed L = g(t) - g(t+v) is
    moved outwards by its rounding allowance (ROUNDING_ULPS ulps of each |log f|) before
    phi is applied, and the mass beyond 1e30 noise scales is bounded and added, so the
    value returned is never pushed down by rounding or truncation.

    Fallback: where that allowance raises J by more than PRECISION (relative; the shift is
    so small that L is mostly rounding), the value is min(this certified value, the
    joint-convexity MGF bound, the pure-DP cap) -- all three are upper bounds -- instead of
    an unresolved quadrature.  A value that is still not > 0 raises LimitError.
    """
    alpha = require_orders(orders)
    return _lmo_rdp_exact_routed(mechanism, alpha, _shift(mechanism, shift))[0]


def _log1p_excess(x: np.ndarray) -> np.ndarray:
    """-log(1 - x) - x >= 0 for x < 1, accurate near 0 (series sum_{n>=2} x^n / n for |x| <= 0.1)."""
    small = np.abs(x) <= 0.1
    xs = np.where(small, x, 0.0)
    series = sum(xs**n / n for n in range(2, 20))
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = -np.log1p(-np.where(small, 0.0, x)) - x
    return np.where(small, series, direct)


def _eta_mgf_excess(mechanism: LMO, s: np.ndarray) -> np.ndarray:
    """E[e^{s eta} - 1 - s eta] (the MGF of eta less its first-order part) with relative
    precision for small |s|, NaN where this form is not used (callers take log M there):

    * Gamma(k, theta) (Exp(lam) is Gamma(1, 1/lam)), x = theta s <= 1/2: with
      y = k (-log(1 - x) - x) >= 0, E = (e^{k x} - 1 - k x) + e^{k x} expm1(y), two
      non-negative terms;
    * Uniform(lo, hi), |s| (hi - lo) <= 2: 16-point Gauss-Legendre in eta of
      e^{s eta} - 1 - s eta (an entire function varying by at most e^2 over the interval).
    """
    w_gamma, w_exp, w_uniform = mechanism.weights
    total = np.zeros_like(s)
    for weight, shape, scale in ((w_gamma, mechanism.gamma_shape, mechanism.gamma_scale),
                                 (w_exp, 1.0, 1.0 / mechanism.exponential_rate)):
        if weight > 0:
            x = scale * s
            usable = np.abs(x) <= 0.5
            x = np.where(usable, x, 0.0)
            with np.errstate(over="ignore", invalid="ignore"):
                part = _expm1_minus_x(shape * x) + np.exp(shape * x) * np.expm1(shape * _log1p_excess(x))
            total = total + weight * np.where(usable, part, np.nan)
    if w_uniform > 0:
        low, high = mechanism.uniform_low, mechanism.uniform_high
        usable = np.abs(s) * (high - low) <= 2.0
        eta = low + 0.5 * (high - low) * (_UNIFORM_NODES + 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            part = (0.5 * _UNIFORM_WEIGHTS[None, :] * _expm1_minus_x(s[:, None] * eta[None, :])).sum(axis=1)
        total = total + w_uniform * np.where(usable, part, np.nan)
    return total


def lmo_rdp_mgf_bound(mechanism: LMO, orders, shift: float | None = None) -> np.ndarray:
    """Joint-convexity upper bound via the MGF M of eta (+inf where it diverges):
    D_a <= 1/(a-1) log( a/(2a-1) M((a-1) v) + (a-1)/(2a-1) M(-a v) ), the Laplace RDP of
    Mironov 2017, Prop. 6, averaged over eta (module docstring).

    The first-order terms cancel (a/(2a-1) (a-1) - (a-1)/(2a-1) a = 0), so the argument of
    the log is 1 + A with A = a/(2a-1) E[psi((a-1) v eta)] + (a-1)/(2a-1) E[psi(-a v eta)],
    psi(x) = e^x - 1 - x >= 0, and the bound is log1p(A)/(a-1) with A from
    :func:`_eta_mgf_excess` (relative precision for tiny shifts, where log of the sum of
    two MGFs near 1 loses the value to rounding); where that form is not used (large
    arguments) or overflows, the log-space sum of the MGFs themselves.
    """
    alpha = require_orders(orders)
    v = _shift(mechanism, shift)
    weight = alpha / (2 * alpha - 1)
    with np.errstate(over="ignore", invalid="ignore"):
        value = np.logaddexp(
            np.log(weight) + mechanism.log_eta_mgf((alpha - 1) * v),
            np.log1p(-weight) + mechanism.log_eta_mgf(-alpha * v),
        )
        excess = weight * _eta_mgf_excess(mechanism, (alpha - 1) * v) + (1 - weight) * _eta_mgf_excess(
            mechanism, -alpha * v
        )
        stable = np.isfinite(excess) & (excess >= 0)
        value = np.where(stable, np.log1p(np.where(stable, excess, 0.0)), value)
    return value / (alpha - 1)


def lmo_pure_cap(mechanism: LMO, orders, shift: float | None = None) -> np.ndarray:
    """The randomised-response bound at eps0 = log f(0)/f(v) (plus its rounding allowance,
    :data:`ROUNDING_ULPS`): LMO is eps0-DP and RR(eps0)
    dominates every eps0-DP pair (Kairouz, Oh, Viswanath 2015); see
    :func:`~dpforge.accounting.rdp.randomized_response_rdp`."""
    v = _shift(mechanism, shift)
    g_0, g_v = float(mechanism.logpdf(0.0)), float(mechanism.logpdf(v))
    # eps0 is a difference of computed log densities: add its rounding allowance (the RR
    # divergence increases with eps0), else at tiny shifts the cap falls below the truth
    eps0 = g_0 - g_v + float(_allowance(np.array(g_0), np.array(g_v)))
    return randomized_response_rdp(eps0, require_orders(orders))


def _scalar_rdp(mechanism: Laplace | LMO, orders: np.ndarray, shift: float, method: Method) -> np.ndarray:
    return _scalar_rdp_routed(mechanism, orders, shift, method)[0]


def _scalar_rdp_routed(
    mechanism: Laplace | LMO, orders: np.ndarray, shift: float, method: Method
) -> tuple[np.ndarray, str]:
    """The scalar divergence at ``shift`` and a note on orders where the exact quadrature
    fell back to the MGF/pure-DP bound ("" when none did)."""
    if isinstance(mechanism, Laplace):
        return laplace_rdp_at_shift(shift / float(mechanism.scale), orders), ""
    if method == "exact":
        values, fell_back = _lmo_rdp_exact_routed(mechanism, orders, shift)
        count = int(fell_back.sum())
        note = (f"; quadrature unresolved against rounding at {count} orders: min with the MGF/pure-DP bound there"
                if count else "")
        return values, note
    return np.minimum(lmo_rdp_mgf_bound(mechanism, orders, shift), lmo_pure_cap(mechanism, orders, shift)), ""


def _shape_ok(values: np.ndarray, concave: bool) -> np.ndarray:
    """Per order (rows): non-decreasing along the grid and concave (or convex) up to rounding."""
    tolerance = 1e-9 * np.maximum(np.abs(values).max(axis=1), 1e-300)
    rising = (np.diff(values, axis=1) >= -tolerance[:, None]).all(axis=1)
    second = np.diff(values, n=2, axis=1)
    curved = (second <= tolerance[:, None]).all(axis=1) if concave else (second >= -tolerance[:, None]).all(axis=1)
    return rising & curved


def noise_rdp(mechanism: Laplace | LMO, orders, method: Method = "exact") -> tuple[np.ndarray, str]:
    """RDP of a Laplace or LMO release (scalar or vector) and a label of the bound used.

    ``method`` is "exact" (quadrature for LMO) or "mgf" (the joint-convexity bound capped
    by the pure-DP bound, fast and certified).  Laplace is always exact.
    """
    alpha = require_orders(orders)
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if not isinstance(mechanism, (Laplace, LMO)):
        raise ParameterError(f"noise_rdp handles Laplace and LMO, got {type(mechanism).__name__}")
    family = "laplace" if isinstance(mechanism, Laplace) else "lmo"
    how = "exact" if family == "laplace" else (
        "exact quadrature" if method == "exact" else "joint-convexity MGF bound, capped by the pure-DP bound"
    )
    c, d = float(mechanism.sensitivity), int(mechanism.dimension)
    if d == 1:
        values, fallback = _scalar_rdp_routed(mechanism, alpha, c, method)
        return values, f"{family}: {how}{fallback}"
    if mechanism.norm == "l2":
        squares = np.linspace(0.0, c * c, SHAPE_CHECK_POINTS)
        grid = np.stack([_scalar_rdp(mechanism, alpha, math.sqrt(s), method) for s in squares[1:]], axis=1)
        grid = np.concatenate([np.zeros((alpha.size, 1)), grid], axis=1)
        ok = _shape_ok(grid, concave=True)
        worst, fallback = _scalar_rdp_routed(mechanism, alpha, c / math.sqrt(d), method)
        worst = d * worst
        rule = f"vector guard l2: d={d}, worst shift C/sqrt(d) per coordinate, g(sqrt(s)) concave"
    else:
        shifts = np.linspace(0.0, c, SHAPE_CHECK_POINTS)
        grid = np.stack([_scalar_rdp(mechanism, alpha, v, method) for v in shifts[1:]], axis=1)
        grid = np.concatenate([np.zeros((alpha.size, 1)), grid], axis=1)
        ok = _shape_ok(grid, concave=False)
        worst, fallback = _scalar_rdp_routed(mechanism, alpha, c, method)
        rule = f"vector guard l1: d={d}, g convex so the worst shift is one coordinate at C"
    if not ok.any():
        raise UnsupportedError(
            f"cannot bound the {family} vector release (dimension={d}, norm={mechanism.norm}): "
            "the shape condition of the vector guard fails at every order"
        )
    values = np.where(ok, worst, np.inf)
    failed = int((~ok).sum())
    note = f"; shape check failed at {failed} orders (reported as inf)" if failed else "; shape checked numerically"
    return values, f"{family}: {how}{fallback}; {rule}{note}"
