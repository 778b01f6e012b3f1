"""From an RDP curve to (epsilon, delta): the conversion of Canonne, Kamath, Steinke 2020,
Prop. 12 (Balle et al. 2020, Thm. 21), with the Bretagnolle-Huber total-variation cap."""

from __future__ import annotations

import math

import numpy as np

from dpforge.accounting.rdp.formulas import require_orders
from dpforge.errors import ParameterError
from dpforge.validation import require_non_negative, require_probability_open

def _conversion_inputs(orders: object, values: object) -> tuple[np.ndarray, np.ndarray]:
    alpha = require_orders(orders, maximum=math.inf)
    rho = np.atleast_1d(np.asarray(values, dtype=float))
    if rho.shape != alpha.shape:
        raise ParameterError(f"rdp values must have one entry per order ({alpha.size}), got shape {rho.shape}")
    if np.isnan(rho).any():
        raise ParameterError("rdp values must not contain NaN")
    _require_not_lost(alpha, rho)
    return alpha, rho


def _require_not_lost(alpha: np.ndarray, rho: np.ndarray) -> None:
    """Refuse curves whose small values may be rounding, not divergence: a negative value,
    or a 0 beside a positive value.  D_a = 0 at one order a > 1 means the two laws are
    equal, so D = 0 at every order (van Erven & Harremoës 2014, Thm. 8 and Thm. 3); a curve
    that is 0 at one order and positive at another has lost the 0 to rounding, and the
    Bretagnolle-Huber step would turn it into epsilon = 0 for every delta."""
    if (rho < 0).any():
        k = int(np.argmin(rho))
        raise ParameterError(f"rdp values must be >= 0, got {float(rho[k])!r} at order {float(alpha[k])!r}")
    zero, positive = rho == 0, rho > 0
    if zero.any() and positive.any():
        raise ParameterError(
            f"rdp values must be all 0 (equal laws) or all > 0: 0 at order {float(alpha[zero][0])!r} but "
            f"{float(rho[positive][0])!r} at order {float(alpha[positive][0])!r} (a value lost to rounding?)"
        )


def _tv_bound(rho: np.ndarray) -> float:
    """Bound on the total variation δ(0) >= δ(ε): Bretagnolle-Huber, TV <= sqrt(1 - e^{-KL}),
    with KL <= D_α for every α > 1 (van Erven & Harremoës 2014, Thm. 3)."""
    finite = rho[np.isfinite(rho)]
    if finite.size == 0:
        return 1.0
    return float(np.sqrt(-np.expm1(-finite.min())))


def epsilon_from_rdp(orders: object, values: object, delta: float) -> tuple[float, float]:
    """(ε, optimal order) from an RDP curve (Canonne, Kamath, Steinke 2020, Prop. 12):

    ε = min_α ρ(α) + log(1 - 1/α) - (log δ + log α)/(α - 1), clipped at 0.

    Infinite entries are skipped; if all are infinite the result is (inf, nan).  When
    δ is at least the Bretagnolle-Huber bound on the total variation, sqrt(1 - e^{-ρ(α)}),
    ε = 0 (as dp_accounting does; this also covers ρ = 0).  A curve with a negative value,
    or 0 at one order and positive at another, is refused (:func:`_require_not_lost`): it
    would give ε = 0 from a value lost to rounding.
    """
    delta = require_probability_open("delta", delta)
    alpha, rho = _conversion_inputs(orders, values)
    finite = np.isfinite(rho)
    if not finite.any():
        return math.inf, math.nan
    if delta >= _tv_bound(rho):
        return 0.0, float(alpha[finite][np.argmin(rho[finite])])
    eps = np.full_like(alpha, np.inf)
    a = alpha[finite]
    eps[finite] = rho[finite] + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    best = int(np.argmin(eps))
    return max(float(eps[best]), 0.0), float(alpha[best])


def delta_from_rdp(orders: object, values: object, epsilon: float) -> tuple[float, float]:
    """(δ, optimal order) from an RDP curve, the same inequality solved for δ
    (Canonne, Kamath, Steinke 2020, Prop. 12):

    δ = min_α exp( (α-1)(ρ(α) - ε + log(1 - 1/α)) - log α ), clipped at 1,

    and never above the Bretagnolle-Huber total-variation bound sqrt(1 - e^{-ρ(α)}).
    At the optimum it inverts :func:`epsilon_from_rdp`: δ(ε(δ)) = δ whenever ε(δ) > 0.
    """
    epsilon = require_non_negative("epsilon", epsilon)
    alpha, rho = _conversion_inputs(orders, values)
    finite = np.isfinite(rho)
    if not finite.any():
        return 1.0, math.nan
    log_delta = np.full_like(alpha, np.inf)
    a = alpha[finite]
    log_delta[finite] = (a - 1) * (rho[finite] - epsilon + np.log1p(-1.0 / a)) - np.log(a)
    best = int(np.argmin(log_delta))
    value = math.exp(min(float(log_delta[best]), 0.0))
    tv = _tv_bound(rho)
    if tv < value:
        return tv, float(alpha[finite][np.argmin(rho[finite])])
    return min(value, 1.0), float(alpha[best])
