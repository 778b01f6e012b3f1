"""RDP curves of mechanism descriptions: per component (exact where a closed form exists,
Zhu-Wang 2019 or joint convexity for other subsampled mechanisms) and summed over a
composition (Mironov 2017, Prop. 1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpforge.accounting.rdp.formulas import (
    DEFAULT_ORDERS,
    _is_integer,
    convexity_subsampled_rdp,
    gaussian_rdp,
    randomized_response_rdp,
    require_orders,
    subsampled_gaussian_rdp,
    wbk_without_replacement_rdp,
    zhu_wang_subsampled_rdp,
)
from dpforge.accounting.rdp.lmo import noise_rdp
from dpforge.errors import LimitError, ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.mechanisms.sampling import EffectiveMechanism, doubled
from dpforge.validation import require_sampling_rate

@dataclass(frozen=True, eq=False)
class RdpCurve:
    """An RDP curve over ``orders``: ``values[k]`` bounds D_α at α = ``orders[k]``.

    ``sources`` has one label per component saying how its curve was obtained;
    ``details`` has, per component, either None or one label per order where the
    component's curve mixes methods (e.g. "zhu-wang" / "convexity"): the bound computed at
    that order, before the curve's non-decreasing envelope may replace it with a smaller
    bound from a higher order.
    """

    orders: np.ndarray
    values: np.ndarray
    sources: tuple[str, ...]
    details: tuple[tuple[str, ...] | None, ...] = ()

    def __post_init__(self) -> None:
        for name in ("orders", "values"):
            array = np.array(getattr(self, name), dtype=float)
            array.setflags(write=False)
            object.__setattr__(self, name, array)


def _family(mechanism: Mechanism) -> str:
    return type(mechanism).__name__.lower()


def _base_rdp(mechanism: Mechanism, orders: np.ndarray, lmo_bound: str = "exact") -> tuple[np.ndarray, str]:
    """Unsubsampled RDP of one release and a short label (``lmo_bound``: "exact"
    quadrature or the "mgf" joint-convexity bound capped by the pure-DP bound)."""
    dimension = getattr(mechanism, "dimension", 1)
    noise_like = isinstance(mechanism, Laplace) or _family(mechanism) == "lmo" or dimension != 1
    if noise_like:
        values, label = noise_rdp(mechanism, orders, method=lmo_bound)
        return np.asarray(values, dtype=float), label
    if isinstance(mechanism, Gaussian):
        return gaussian_rdp(mechanism.noise_multiplier, orders), "gaussian: exact"
    if isinstance(mechanism, PureDP):
        return randomized_response_rdp(mechanism.epsilon, orders), "pure-dp: exact (randomised response)"
    raise UnsupportedError(f"the rdp engine cannot account {type(mechanism).__name__}")


def _monotone_envelope(alpha: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each bound replaced by the smallest bound at an order >= its own: sound because the
    Rényi divergence is non-decreasing in its order (van Erven & Harremoës 2014, Thm. 3)."""
    if np.isnan(values).any():
        return values
    order = np.argsort(alpha, kind="stable")
    envelope = np.minimum.accumulate(values[order][::-1])[::-1]
    out = np.empty_like(values)
    out[order] = envelope
    return out


def _effective_rdp(mechanism: EffectiveMechanism, alpha: np.ndarray, lmo_bound: str) -> tuple[np.ndarray, str]:
    """RDP of a step that is not Poisson/add-remove (:mod:`dpforge.mechanisms.sampling`),
    from the replace-one RDP ε_r of the unsampled mechanism (twice the sensitivity):

    * joint convexity, every scheme and relation: both outputs are mixtures, with weight
      1 - q on identical laws and q on replace-one neighbours (coupled batches), so
      ρ(α) <= 1/(α-1) log(1 - q + q e^{(α-1) ε_r(α)}) (van Erven & Harremoës 2014, Thm. 13);
    * sampling without replacement under replace-one: also Wang, Balle, Kasiviswanathan
      2019, Thm. 9 (:func:`wbk_without_replacement_rdp`); the smaller bound is kept.
    """
    base = doubled(mechanism.mechanism)
    q = float(mechanism.sampling_rate)
    values, base_label = _base_rdp(base, alpha, lmo_bound)
    if q >= 1.0:
        return values, f"{mechanism.relation} {base_label}"
    convex = convexity_subsampled_rdp(q, values, alpha)
    name = base_label.split(":", 1)[0]
    if mechanism.scheme == "without-replacement" and mechanism.relation == "replace-one":
        top = int(np.ceil(alpha).max())
        at_integers, _ = _base_rdp(base, np.arange(2, max(top, 2) + 1, dtype=float), lmo_bound)
        pair = base.dominating_pair()
        wbk = wbk_without_replacement_rdp(q, at_integers, max(float(pair.r_max), -float(pair.r_min)), alpha)
        return np.minimum(wbk, convex), (
            f"without replacement, replace-one, {name}: min(Wang-Balle-Kasiviswanathan 2019 Thm. 9, joint convexity); "
            f"base {base_label} at twice the sensitivity"
        )
    return convex, (
        f"{mechanism.scheme}, {mechanism.relation}, {name}: joint convexity over coupled batches "
        f"(replace-one base {base_label} at twice the sensitivity)"
    )


def _is_identity(mechanism: Mechanism) -> bool:
    """Whether both neighbouring outputs have the same law (only PureDP(0) among the
    mechanisms, also behind a sampling scheme)."""
    if isinstance(mechanism, EffectiveMechanism):
        return _is_identity(mechanism.mechanism)
    return isinstance(mechanism, PureDP) and float(mechanism.epsilon) == 0.0


def _require_above_floor(mechanism: Mechanism, alpha: np.ndarray, values: np.ndarray, label: str) -> None:
    """A release that is not the identity has D_a > 0 at every order; a bound that is 0,
    negative or subnormal there was lost to rounding (it would become epsilon = 0 in the
    Bretagnolle-Huber step of the conversion), so it is refused rather than passed on."""
    if _is_identity(mechanism):
        return
    lost = ~(values >= np.finfo(float).tiny)
    if lost.any():
        k = int(np.argmax(lost))
        raise LimitError(
            f"the rdp of {type(mechanism).__name__} at order {float(alpha[k])!r} is {float(values[k])!r}, below the "
            f"floating-point floor, so it cannot be certified ({label})"
        )


def rdp_of_component(component: Component, orders: object = DEFAULT_ORDERS, lmo_bound: str = "exact") -> RdpCurve:
    """RDP curve of one flattened component: ``count`` × the RDP of one (possibly
    subsampled) release.  Subsampled Gaussian: MTZ 2019 exact; any other subsampled
    mechanism: min(Zhu-Wang 2019 Thm. 6 at integer orders, joint convexity).  Every
    curve is then made non-decreasing from above (a bound at a higher order bounds every
    lower order)."""
    alpha = require_orders(orders)
    mechanism, q, count = component.mechanism, float(component.sampling_rate), int(component.count)
    q = require_sampling_rate("sampling_rate", q)
    family = _family(mechanism)
    details: tuple[str, ...] | None = None
    if isinstance(mechanism, EffectiveMechanism):
        values, label = _effective_rdp(mechanism, alpha, lmo_bound)
    elif q >= 1.0:
        values, label = _base_rdp(mechanism, alpha, lmo_bound)
    elif isinstance(mechanism, Gaussian) and getattr(mechanism, "dimension", 1) == 1:
        values = subsampled_gaussian_rdp(q, mechanism.noise_multiplier, alpha)
        label = "subsampled gaussian: exact (Mironov-Talwar-Zhang 2019)"
    else:
        # Zhu-Wang holds at integer orders; a fractional order α takes it at ⌈α⌉, since
        # the Rényi divergence is non-decreasing in its order (van Erven & Harremoës
        # 2014, Thm. 3).  Joint convexity holds at every order; the smaller bound is kept.
        integer = _is_integer(alpha)
        ceiling = np.ceil(alpha)
        base, base_label = _base_rdp(mechanism, alpha, lmo_bound)
        top = int(ceiling.max())
        levels = np.arange(2, top + 1, dtype=float)
        at_integers, _ = _base_rdp(mechanism, levels, lmo_bound)
        zhu_wang = zhu_wang_subsampled_rdp(q, at_integers, ceiling)
        convex = convexity_subsampled_rdp(q, base, alpha)
        use_zw = zhu_wang <= convex
        values = np.where(use_zw, zhu_wang, convex)
        details = tuple(
            ("zhu-wang" if whole else "zhu-wang at ceil(order)") if z else "convexity"
            for z, whole in zip(use_zw, integer)
        )
        label = (
            f"subsampled {base_label.split(':', 1)[0]}: upper bound (Zhu-Wang 2019 at integer orders, "
            f"at the next integer order elsewhere; or joint convexity); base {base_label}"
        )
    _require_above_floor(mechanism, alpha, np.asarray(values, dtype=float), label)
    values = _monotone_envelope(alpha, np.asarray(values, dtype=float))
    values = count * np.maximum(values, 0.0)
    if np.isnan(values).any():  # pragma: no cover - defensive
        raise ParameterError(f"the rdp engine produced NaN for {family}")
    return RdpCurve(alpha, values, (label,), (details,))


def rdp_curve(description: Description, orders: object = DEFAULT_ORDERS, lmo_bound: str = "exact") -> RdpCurve:
    """RDP curve of a composed description: the sum of its components' curves
    (adaptive composition, Mironov 2017, Prop. 1), with one source label per component."""
    alpha = require_orders(orders)
    components = flatten(description)
    total = np.zeros_like(alpha)
    sources: list[str] = []
    details: list[tuple[str, ...] | None] = []
    for component in components:
        curve = rdp_of_component(component, alpha, lmo_bound)
        total = total + curve.values
        sources.extend(curve.sources)
        details.extend(curve.details)
    return RdpCurve(alpha, total, tuple(sources), tuple(details))


def rdp(description: Description, orders: object = DEFAULT_ORDERS, lmo_bound: str = "exact") -> np.ndarray:
    """RDP values of a composed description at ``orders`` (see :func:`rdp_curve`)."""
    return np.array(rdp_curve(description, orders, lmo_bound).values)
