"""The RDP engine: epsilon(delta) and delta(epsilon) from the composed RDP curve.

RDP gives only upper bounds: the engine's ``lower`` is the trivial 0.
"""

from __future__ import annotations

import math

from dpforge.accounting.rdp.conversion import delta_from_rdp, epsilon_from_rdp
from dpforge.accounting.rdp.curve import RdpCurve, rdp_curve
from dpforge.accounting.rdp.formulas import DEFAULT_ORDERS
from dpforge.accounting.results import DeltaResult, EpsilonResult
from dpforge.errors import ParameterError
from dpforge.mechanisms.combinators import Description
from dpforge.mechanisms.sampling import result_labels
from dpforge.validation import require_non_negative, require_probability_open

def _require_lmo_bound(lmo_bound: object) -> None:
    if lmo_bound not in ("exact", "mgf"):
        raise ParameterError(f"lmo_bound must be one of exact, mgf, got {lmo_bound!r}")


def _reject_options(options: dict) -> None:
    if options:
        raise ParameterError(f"{sorted(options)[0]} is not an option of the rdp engine")


def _accuracy(curve: RdpCurve, optimal_order: float) -> dict:
    return {
        "orders": int(curve.orders.size),
        "optimal_order": optimal_order if math.isfinite(optimal_order) else None,
        "conversion": "Canonne-Kamath-Steinke 2020",
        "bounds": list(curve.sources),
        "lower": "trivial (RDP gives no lower bound)",
    }


def _curve(description: Description, orders: object, lmo_bound: str, options: dict) -> RdpCurve:
    """The composed RDP curve after the option checks shared by both queries."""
    _reject_options(options)
    _require_lmo_bound(lmo_bound)
    return rdp_curve(description, DEFAULT_ORDERS if orders is None else orders, lmo_bound)


def epsilon(
    description: Description, delta: float, *, orders: object = None, lmo_bound: str = "exact", **options
) -> EpsilonResult:
    """RDP-engine ε(δ): ``upper`` is the certified CKS conversion of the composed RDP
    curve, ``lower`` is 0 (RDP gives no lower bound), ``estimate`` = ``upper``."""
    delta = require_probability_open("delta", delta)
    curve = _curve(description, orders, lmo_bound, options)
    value, order = epsilon_from_rdp(curve.orders, curve.values, delta)
    return EpsilonResult(
        lower=0.0, upper=value, estimate=value, delta=delta, engine="rdp", accuracy=_accuracy(curve, order),
        **result_labels(description),
    )


def delta(
    description: Description, epsilon: float, *, orders: object = None, lmo_bound: str = "exact", **options
) -> DeltaResult:
    """RDP-engine δ(ε): ``upper`` is the certified CKS conversion, ``lower`` is 0."""
    epsilon = require_non_negative("epsilon", epsilon)
    curve = _curve(description, orders, lmo_bound, options)
    value, order = delta_from_rdp(curve.orders, curve.values, epsilon)
    return DeltaResult(
        lower=0.0, upper=value, estimate=value, epsilon=epsilon, engine="rdp", accuracy=_accuracy(curve, order),
        **result_labels(description),
    )
