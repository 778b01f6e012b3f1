"""Numba kernels for the LMO noise law: log-density, tails and privacy-loss inversion.

LMO noise X is Laplace noise whose inverse scale eta = 1/b is drawn from a weighted
mixture of Gamma(k, theta), Exponential(rate lam) and Uniform(lo, hi) on eta > 0
(docs/design.md §4).  Conditionally on eta, X has density (eta/2) e^{-eta |x|}, so
with t = |x| the density is f(t) = E[(eta/2) e^{-eta t}] and the two-sided tail is
S(t) = Pr(|X| > t) = E[e^{-eta t}] (the Laplace transform of eta).  Per component:

* Gamma(k, theta):  f(t) = (k theta / 2) (1 + theta t)^{-(k+1)},  S(t) = (1 + theta t)^{-k}
  (the Lomax / Pareto II law; Gamma(1, 1/lam) is the Exponential(lam) component).
* Uniform(lo, hi):  f(t) = [(1 + lo t) e^{-lo t} - (1 + hi t) e^{-hi t}] / (2 (hi - lo) t^2),
  S(t) = (e^{-lo t} - e^{-hi t}) / ((hi - lo) t).

The closed uniform forms cancel catastrophically when (hi - lo) t is small; there the
eta-average is computed by Gauss-Legendre quadrature instead, which is exact to double
precision because e^{-eta t} varies by less than a factor e over the interval.

All quantities are computed in log space, so they stay finite for |x| up to 1e300 and
for tiny eta.  Parameters travel as one float array (see :func:`pack`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: Gauss-Legendre order for the uniform component where (hi - lo) t <= 1
_GL_ORDER = 10
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(_GL_ORDER)

# layout of the packed parameter array
_LW_GAMMA, _SHAPE, _SCALE, _LW_EXP, _RATE, _LW_UNIFORM, _LOW, _HIGH = range(8)
_NODES = 8
_LOG_GL = _NODES + _GL_ORDER
PACKED_SIZE = _LOG_GL + _GL_ORDER


def pack(
    weights: tuple[float, float, float],
    gamma_shape: float,
    gamma_scale: float,
    exponential_rate: float,
    uniform_low: float,
    uniform_high: float,
) -> np.ndarray:
    """Parameter array for the kernels: log weights (normalised, -inf for a dropped
    component), component parameters, and the Gauss-Legendre nodes on [lo, hi] with
    their log weights (normalised to sum to one, so the rule averages over eta)."""
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    packed = np.empty(PACKED_SIZE)
    packed[_LW_GAMMA], packed[_SHAPE], packed[_SCALE] = log_w[0], gamma_shape, gamma_scale
    packed[_LW_EXP], packed[_RATE] = log_w[1], exponential_rate
    packed[_LW_UNIFORM], packed[_LOW], packed[_HIGH] = log_w[2], uniform_low, uniform_high
    packed[_NODES:_LOG_GL] = uniform_low + 0.5 * (uniform_high - uniform_low) * (_GL_NODES + 1.0)
    packed[_LOG_GL:] = np.log(0.5 * _GL_WEIGHTS)
    return packed


@numba.njit(cache=True, inline="always")
def _logaddexp(a: float, b: float) -> float:
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@numba.njit(cache=True)
def _uniform_log_density(t: float, p: np.ndarray) -> float:
    low, high = p[_LOW], p[_HIGH]
    width = high - low
    if width * t > 1.0:
        # log u(lo) + log(1 - u(hi)/u(lo)) - log(2 (hi-lo) t^2), u(e) = (1 + e t) e^{-e t}
        log_u_low = math.log1p(low * t) - low * t
        z = (math.log1p(high * t) - high * t) - log_u_low
        return log_u_low + math.log(-math.expm1(z)) - math.log(2.0 * width) - 2.0 * math.log(t)
    acc = -np.inf
    for i in range(_GL_ORDER):
        eta = p[_NODES + i]
        acc = _logaddexp(acc, p[_LOG_GL + i] + math.log(eta) - eta * t)
    return acc - math.log(2.0)


@numba.njit(cache=True)
def _uniform_log_tail(t: float, p: np.ndarray) -> float:
    low, high = p[_LOW], p[_HIGH]
    width = high - low
    if width * t > 1.0:
        return -low * t + math.log(-math.expm1(-width * t)) - math.log(width * t)
    acc = -np.inf
    for i in range(_GL_ORDER):
        acc = _logaddexp(acc, p[_LOG_GL + i] - p[_NODES + i] * t)
    return acc


@numba.njit(cache=True)
def log_density(t: float, p: np.ndarray) -> float:
    """log f(t), t = |x| >= 0: the log density of the noise at x."""
    if t == np.inf:
        return -np.inf
    acc = -np.inf
    if p[_LW_GAMMA] > -np.inf:
        k, theta = p[_SHAPE], p[_SCALE]
        acc = _logaddexp(acc, p[_LW_GAMMA] + math.log(0.5 * k * theta) - (k + 1.0) * math.log1p(theta * t))
    if p[_LW_EXP] > -np.inf:
        lam = p[_RATE]
        acc = _logaddexp(acc, p[_LW_EXP] - math.log(2.0 * lam) - 2.0 * math.log1p(t / lam))
    if p[_LW_UNIFORM] > -np.inf:
        acc = _logaddexp(acc, p[_LW_UNIFORM] + _uniform_log_density(t, p))
    return acc


@numba.njit(cache=True)
def log_tail(t: float, p: np.ndarray) -> float:
    """log S(t) = log Pr(|X| > t)."""
    if t == np.inf:
        return -np.inf
    acc = -np.inf
    if p[_LW_GAMMA] > -np.inf:
        acc = _logaddexp(acc, p[_LW_GAMMA] - p[_SHAPE] * math.log1p(p[_SCALE] * t))
    if p[_LW_EXP] > -np.inf:
        acc = _logaddexp(acc, p[_LW_EXP] - math.log1p(t / p[_RATE]))
    if p[_LW_UNIFORM] > -np.inf:
        acc = _logaddexp(acc, p[_LW_UNIFORM] + _uniform_log_tail(t, p))
    return acc


@numba.njit(cache=True)
def central(t: float, p: np.ndarray) -> float:
    """C(t) = Pr(|X| <= t) = E[1 - e^{-eta t}], accurate for small t (no 1 - S cancellation)."""
    if t == np.inf:
        return 1.0
    acc = 0.0
    if p[_LW_GAMMA] > -np.inf:
        acc += math.exp(p[_LW_GAMMA]) * -math.expm1(-p[_SHAPE] * math.log1p(p[_SCALE] * t))
    if p[_LW_EXP] > -np.inf:
        acc += math.exp(p[_LW_EXP]) * -math.expm1(-math.log1p(t / p[_RATE]))
    if p[_LW_UNIFORM] > -np.inf:
        width = p[_HIGH] - p[_LOW]
        if width * t > 1.0:
            part = -math.expm1(_uniform_log_tail(t, p))
        else:
            part = 0.0
            for i in range(_GL_ORDER):
                part += math.exp(p[_LOG_GL + i]) * -math.expm1(-p[_NODES + i] * t)
        acc += math.exp(p[_LW_UNIFORM]) * part
    return min(acc, 1.0)


@numba.njit(cache=True)
def tail(t: float, p: np.ndarray) -> float:
    """S(t) = Pr(|X| > t) = E[e^{-eta t}], i.e. exp(log_tail(t, p))."""
    return math.exp(log_tail(t, p))


# -- the privacy loss of the shifted pair ------------------------------------------------
#
# P0 = noise + a vs Q0 = noise, r(x) = g(|x - a|) - g(|x|) with g = log f.  g is convex
# and decreasing on [0, inf) (f is completely monotone), so with h(t) = g(t) - g(t + a)
# (decreasing from r_max = g(0) - g(a) to h_inf = a * eta_min):
#   x <= 0 (t = -x):      r = -h(t), increasing in t, values [-r_max, -h_inf)
#   0 <= x <= a:          r = g(a - x) - g(x), increasing in x, values [-r_max, r_max]
#   x >= a (t = x - a):   r = h(t), decreasing in t, values (h_inf, r_max]


@numba.njit(cache=True)
def _h(s: float, a: float, p: np.ndarray) -> float:
    """h at t = a * expm1(s)."""
    t = a * math.expm1(s)
    return log_density(t, p) - log_density(t + a, p)


@numba.njit(cache=True)
def _m(x: float, a: float, p: np.ndarray) -> float:
    return log_density(a - x, p) - log_density(x, p)


@numba.njit(cache=True)
def _illinois(kind: int, lo: float, hi: float, f_lo: float, f_hi: float, target: float, a: float, p: np.ndarray) -> float:
    """Root of F(v) = (h(v) if kind == 0 else m(v)) - target on [lo, hi] by the Illinois
    variant of regula falsi; f_lo, f_hi are F at the ends (opposite signs, or zero)."""
    side = 0
    for _ in range(100):
        if hi - lo <= 1e-15 * max(1.0, abs(hi)):
            break
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo) if f_hi != f_lo else 0.5 * (lo + hi)
        if not (lo < mid < hi):
            mid = 0.5 * (lo + hi)
        f_mid = (_h(mid, a, p) if kind == 0 else _m(mid, a, p)) - target
        if abs(f_mid) <= 2e-16 * max(1.0, abs(target)):
            return mid
        if (f_mid > 0.0) == (f_lo > 0.0):
            lo, f_lo = mid, f_mid
            if side == 1:
                f_hi *= 0.5
            side = 1
        else:
            hi, f_hi = mid, f_mid
            if side == -1:
                f_lo *= 0.5
            side = -1
    return 0.5 * (lo + hi)


@numba.njit(cache=True)
def _solve_h(y: float, a: float, p: np.ndarray, s_grid: np.ndarray, h_table: np.ndarray) -> float:
    """t >= 0 with h(t) = y (h decreasing), bracketed from a table of h on s_grid."""
    n = s_grid.size
    if y >= h_table[0]:
        return 0.0
    if y <= h_table[n - 1]:
        return a * math.expm1(s_grid[n - 1])
    j = np.searchsorted(-h_table, -y)  # first j with h_table[j] <= y
    s = _illinois(0, s_grid[j - 1], s_grid[j], h_table[j - 1] - y, h_table[j] - y, y, a, p)
    return a * math.expm1(s)


@numba.njit(cache=True)
def _solve_m(c: float, a: float, p: np.ndarray, x_grid: np.ndarray, m_table: np.ndarray) -> float:
    """x in [0, a] with g(a - x) - g(x) = c (m increasing), bracketed from a table."""
    n = x_grid.size
    if c <= m_table[0]:
        return 0.0
    if c >= m_table[n - 1]:
        return a
    j = np.searchsorted(m_table, c)  # first j with m_table[j] >= c
    return _illinois(1, x_grid[j - 1], x_grid[j], m_table[j - 1] - c, m_table[j] - c, c, a, p)


@numba.njit(cache=True)
def inversion_tables(a: float, p: np.ndarray, s_grid: np.ndarray, x_grid: np.ndarray):
    """h on s_grid (t = a expm1(s)) and m on x_grid, made monotone against rounding noise."""
    h_table = np.empty(s_grid.size)
    for i in range(s_grid.size):
        h_table[i] = _h(s_grid[i], a, p)
        if i > 0 and h_table[i] > h_table[i - 1]:
            h_table[i] = h_table[i - 1]
    m_table = np.empty(x_grid.size)
    for i in range(x_grid.size):
        m_table[i] = _m(x_grid[i], a, p)
        if i > 0 and m_table[i] < m_table[i - 1]:
            m_table[i] = m_table[i - 1]
    return h_table, m_table


@numba.njit(cache=True, parallel=True)
def r_distribution_q0(c_values, a, r_max, h_inf, p, s_grid, h_table, x_grid, m_table):
    """(Pr(r <= c), Pr(r > c)) under Q0 for each c, each computed from its own tails."""
    n = c_values.size
    cdf = np.empty(n)
    sf = np.empty(n)
    tail_a = tail(a, p)
    for i in numba.prange(n):
        c = c_values[i]
        if c < -r_max:
            cdf[i], sf[i] = 0.0, 1.0
        elif c >= r_max:
            cdf[i], sf[i] = 1.0, 0.0
        else:
            cdf[i], sf[i] = _r_masses_q0(c, a, h_inf, tail_a, p, s_grid, h_table, x_grid, m_table)
    return cdf, sf


@numba.njit(cache=True)
def _r_masses_q0(c, a, h_inf, tail_a, p, s_grid, h_table, x_grid, m_table):
    """(Pr(r <= c), Pr(r > c)) under Q0 for one c inside (-r_max, r_max)."""
    # piece x <= 0: r = -h(t) <= c  <=>  t <= t1 with h(t1) = -c
    if c >= -h_inf:
        low_le, low_gt = 0.5, 0.0
    else:
        t1 = _solve_h(-c, a, p, s_grid, h_table)
        low_le, low_gt = 0.5 * central(t1, p), 0.5 * tail(t1, p)
    # piece 0 <= x <= a: r <= c  <=>  x <= x2
    x2 = _solve_m(c, a, p, x_grid, m_table)
    mid_le = 0.5 * central(x2, p)
    mid_gt = 0.5 * max(tail(x2, p) - tail_a, 0.0)
    # piece x >= a: r = h(t) <= c  <=>  t >= t3 with h(t3) = c
    if c <= h_inf:
        high_le, high_gt = 0.0, 0.5 * tail_a
    else:
        far = tail(a + _solve_h(c, a, p, s_grid, h_table), p)
        high_le, high_gt = 0.5 * far, 0.5 * max(tail_a - far, 0.0)
    return min(low_le + mid_le + high_le, 1.0), min(low_gt + mid_gt + high_gt, 1.0)


@numba.njit(cache=True)
def log_density_array(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """:func:`log_density` at each t = |x| of a 1-d array."""
    out = np.empty(t.size)
    for i in range(t.size):
        out[i] = log_density(t[i], p)
    return out


@numba.njit(cache=True)
def log_tail_array(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """:func:`log_tail` (log Pr(|X| > t)) at each t >= 0 of a 1-d array."""
    out = np.empty(t.size)
    for i in range(t.size):
        out[i] = log_tail(t[i], p)
    return out


@numba.njit(cache=True)
def central_array(t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """:func:`central` (Pr(|X| <= t)) at each t >= 0 of a 1-d array."""
    out = np.empty(t.size)
    for i in range(t.size):
        out[i] = central(t[i], p)
    return out
