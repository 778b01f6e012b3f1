"""Rényi divergences of Laplace-type noise: Laplace and LMO, scalar and vector releases.

* Laplace, shift v, scale b (Mironov 2017, Prop. 6):
  D_a = 1/(a-1) log( a/(2a-1) e^{(a-1) v/b} + (a-1)/(2a-1) e^{-a v/b} ).
* LMO, shift v: D_a = 1/(a-1) log I_a with I_a = integral of f(x - v)^a f(x)^{1-a} dx,
  by composite Gauss-Legendre quadrature on panels graded geometrically towards the
  peak of the integrand and out to 1e30 noise scales; the mass beyond is bounded by
  e^{(a-1) h(t_max)} S(t_max)/2 and added, so truncation only raises the value.
* LMO, joint-convexity bound: I_a is jointly convex in (p, q) for a > 1 and both laws
  are eta-mixtures of Laplace laws with the same mixing, so
  I_a <= E_eta[ a/(2a-1) e^{(a-1) eta v} + (a-1)/(2a-1) e^{-a eta v} ]
       = a/(2a-1) M((a-1) v) + (a-1)/(2a-1) M(-a v),   M the MGF of eta.
  It is infinite where M diverges (Gamma: (a-1) v >= 1/theta; Exponential: >= lam).
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

import numpy as np
from scipy.special import logsumexp

from dpforge.accounting.rdp.formulas import laplace_rdp, randomized_response_rdp, require_orders
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms import lmo_density as kernels
from dpforge.mechanisms.base import Laplace
from dpforge.mechanisms.lmo import LMO
from dpforge.validation import require_non_negative

Method = Literal["exact", "mgf"]
METHODS = ("exact", "mgf")
#: points of the shift grid used to check concavity/convexity of the scalar divergence
SHAPE_CHECK_POINTS = 48

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


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


def lmo_rdp_exact(mechanism: LMO, orders, shift: float | None = None) -> np.ndarray:
    """Exact Rényi divergence D_a(f(. - v) || f) of scalar LMO noise at shift v
    (default: the mechanism's sensitivity), by quadrature; one value per order."""
    alpha = require_orders(orders)
    v = _shift(mechanism, shift)
    if v == 0:
        return np.zeros_like(alpha)
    packed = mechanism.packed
    scale = max(_noise_scale(mechanism), v)
    t_min, t_max = 1e-13 * min(scale, v), 1e30 * scale

    def g(t: np.ndarray) -> np.ndarray:
        return kernels.log_density_array(np.ascontiguousarray(t, dtype=float), packed)

    # right piece x = v + t and left piece x = -t, t >= 0
    t, log_w = _gauss_legendre(_panels(t_min, t_max))
    g_t, g_tv = g(t), g(t + v)
    h = g_t - g_tv  # log f(t)/f(t+v) >= 0, decreasing
    right = log_w[None, :] + g_t[None, :] + (alpha[:, None] - 1) * h[None, :]
    left = log_w[None, :] + g_tv[None, :] - (alpha[:, None] - 1) * h[None, :]
    # middle piece x in [0, v], graded towards x = v (u = v - x -> 0)
    u_breaks = _panels(t_min, 0.5 * v)
    u_breaks = np.concatenate([u_breaks[u_breaks < 0.5 * v], np.linspace(0.5 * v, v, 9)])
    u, log_wu = _gauss_legendre(u_breaks)
    middle = log_wu[None, :] + alpha[:, None] * g(u)[None, :] + (1 - alpha[:, None]) * g(v - u)[None, :]
    # beyond t_max: f(t) e^{(a-1) h(t)} <= f(t) e^{(a-1) h(t_max)}, integral S(t_max)/2
    h_max = float(g(np.array([t_max]))[0] - g(np.array([t_max + v]))[0])
    beyond = (alpha - 1) * h_max + float(mechanism.log_abs_sf(t_max)) - math.log(2.0)
    total = logsumexp(np.concatenate([right, left, middle], axis=1), axis=1)
    total = np.logaddexp(total, beyond)
    return np.maximum(total / (alpha - 1), 0.0)


def lmo_rdp_mgf_bound(mechanism: LMO, orders, shift: float | None = None) -> np.ndarray:
    """Joint-convexity upper bound via the MGF M of eta (+inf where it diverges):
    D_a <= 1/(a-1) log( a/(2a-1) M((a-1) v) + (a-1)/(2a-1) M(-a v) ), the Laplace RDP of
    Mironov 2017, Prop. 6, averaged over eta (module docstring)."""
    alpha = require_orders(orders)
    v = _shift(mechanism, shift)
    with np.errstate(over="ignore", invalid="ignore"):
        value = np.logaddexp(
            np.log(alpha / (2 * alpha - 1)) + mechanism.log_eta_mgf((alpha - 1) * v),
            np.log((alpha - 1) / (2 * alpha - 1)) + mechanism.log_eta_mgf(-alpha * v),
        )
    return value / (alpha - 1)


def lmo_pure_cap(mechanism: LMO, orders, shift: float | None = None) -> np.ndarray:
    """The randomised-response bound at eps0 = log f(0)/f(v): LMO is eps0-DP and RR(eps0)
    dominates every eps0-DP pair (Kairouz, Oh, Viswanath 2015); see
    :func:`~dpforge.accounting.rdp.randomized_response_rdp`."""
    v = _shift(mechanism, shift)
    eps0 = float(mechanism.logpdf(0.0) - mechanism.logpdf(v))
    return randomized_response_rdp(eps0, require_orders(orders))


def _scalar_rdp(mechanism: Laplace | LMO, orders: np.ndarray, shift: float, method: Method) -> np.ndarray:
    if isinstance(mechanism, Laplace):
        return laplace_rdp_at_shift(shift / float(mechanism.scale), orders)
    if method == "exact":
        return lmo_rdp_exact(mechanism, orders, shift)
    return np.minimum(lmo_rdp_mgf_bound(mechanism, orders, shift), lmo_pure_cap(mechanism, orders, shift))


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
        return _scalar_rdp(mechanism, alpha, c, method), f"{family}: {how}"
    if mechanism.norm == "l2":
        squares = np.linspace(0.0, c * c, SHAPE_CHECK_POINTS)
        grid = np.stack([_scalar_rdp(mechanism, alpha, math.sqrt(s), method) for s in squares[1:]], axis=1)
        grid = np.concatenate([np.zeros((alpha.size, 1)), grid], axis=1)
        ok = _shape_ok(grid, concave=True)
        worst = d * _scalar_rdp(mechanism, alpha, c / math.sqrt(d), method)
        rule = f"vector guard l2: d={d}, worst shift C/sqrt(d) per coordinate, g(sqrt(s)) concave"
    else:
        shifts = np.linspace(0.0, c, SHAPE_CHECK_POINTS)
        grid = np.stack([_scalar_rdp(mechanism, alpha, v, method) for v in shifts[1:]], axis=1)
        grid = np.concatenate([np.zeros((alpha.size, 1)), grid], axis=1)
        ok = _shape_ok(grid, concave=False)
        worst = _scalar_rdp(mechanism, alpha, c, method)
        rule = f"vector guard l1: d={d}, g convex so the worst shift is one coordinate at C"
    if not ok.any():
        raise UnsupportedError(
            f"cannot bound the {family} vector release (dimension={d}, norm={mechanism.norm}): "
            "the shape condition of the vector guard fails at every order"
        )
    values = np.where(ok, worst, np.inf)
    failed = int((~ok).sum())
    note = f"; shape check failed at {failed} orders (reported as inf)" if failed else "; shape checked numerically"
    return values, f"{family}: {how}; {rule}{note}"
