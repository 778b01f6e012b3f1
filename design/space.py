"""The LMO search space: support patterns, shape coordinates and their decoding.

One job: say which noises the search may try.  A point of the space is a *support
pattern* (a non-empty subset of the LMO components, docs/design.md §4) and unit
coordinates ``u`` in [0, 1]^d for its shape; :func:`_decode` turns them into an
:class:`~dpforge.mechanisms.lmo.LMO` of reference scale.  The overall scale is not a
coordinate: every shape is calibrated to the target (:mod:`dpforge.design.scale`),
starting from :func:`_start_scale`.

Sources.  LMO noise: Yang, Mohammady, Wang et al. (2024), "LMO-DP".  The start scale
matches the one-step chi^2 divergence of the calibrated Gaussian, after the central
limit theorem for subsampled composition (Dong, Roth & Su 2022, "Gaussian differential
privacy", J. R. Stat. Soc. B: the subsampled Gaussian composed T times tends to
mu-GDP with mu = q sqrt(T (e^{1/sigma^2} - 1)), and e^{1/sigma^2} - 1 is the chi^2
divergence of the Gaussian pair); a heuristic, used only to start.  Mixture weights by
stick breaking.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np
from scipy import optimize

from dpforge.mechanisms.lmo import COMPONENTS, LMO

#: scale factors tried by the calibration, in units of the sensitivity (reference
#: shapes have E[eta] of order 1, i.e. noise of order 1)
_SCALE_LIMITS = (1e-4, 1e6)
#: box of the shape coordinates (natural logs)
_LOG_SHAPE_MAX = math.log(1000.0)  # Gamma shape k up to 1000 (close to Laplace)
_LOG_RATIO = math.log(100.0)  # exponential mean / uniform centre within 1/100 .. 100 of the Gamma mean
_LOG_WIDTH = (math.log(1e-3), math.log(1e3))  # uniform hi/lo - 1
_WEIGHT_FLOOR = 1e-3
#: lowest Gamma shape searched, per objective (the variance needs k > 2, E|X| needs k > 1)
_GAMMA_SHAPE_MIN = {"variance": 2.05, "abs": 1.05, "callable": 0.5}
#: Gauss-Legendre nodes and weights of the chi^2 quadrature panels
_GL = np.polynomial.legendre.leggauss(24)


def _patterns(components: Sequence[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of ``components`` (in COMPONENTS order), smallest first."""
    chosen = [c for c in COMPONENTS if c in components]
    out = []
    for mask in range(1, 2 ** len(chosen)):
        out.append(tuple(c for i, c in enumerate(chosen) if mask >> i & 1))
    return sorted(out, key=lambda p: (len(p), [COMPONENTS.index(c) for c in p]))


def _coordinates(pattern: tuple[str, ...]) -> list[str]:
    """Names of the shape coordinates of a support pattern (each mapped from [0, 1])."""
    names = []
    if "gamma" in pattern:
        names.append("gamma_shape")
    if "exponential" in pattern and "gamma" in pattern:
        names.append("exponential_mean")
    if "uniform" in pattern:
        if "gamma" in pattern or "exponential" in pattern:
            names.append("uniform_centre")
        names.append("uniform_width")
    names += [f"weight_{i}" for i in range(len(pattern) - 1)]
    return names


def _decode(pattern: tuple[str, ...], u: Sequence[float], shape_min: float, sensitivity: float) -> LMO:
    """The LMO of reference scale for unit coordinates ``u`` (see :func:`_coordinates`).

    The first component present sets the scale: a Gamma part has mean eta 1, otherwise
    an Exponential part has rate 1, otherwise the Uniform part is centred on 1.
    """
    values = dict(zip(_coordinates(pattern), (min(max(float(x), 0.0), 1.0) for x in u)))
    fields: dict[str, Any] = {"sensitivity": sensitivity}
    if "gamma" in pattern:
        low = math.log(shape_min)
        k = math.exp(low + values["gamma_shape"] * (_LOG_SHAPE_MAX - low))
        fields.update(gamma_shape=k, gamma_scale=1.0 / k)
    if "exponential" in pattern:
        mean = math.exp(_LOG_RATIO * (2.0 * values["exponential_mean"] - 1.0)) if "gamma" in pattern else 1.0
        fields["exponential_rate"] = 1.0 / mean
    if "uniform" in pattern:
        centre = math.exp(_LOG_RATIO * (2.0 * values["uniform_centre"] - 1.0)) if "uniform_centre" in values else 1.0
        ratio = 1.0 + math.exp(_LOG_WIDTH[0] + values["uniform_width"] * (_LOG_WIDTH[1] - _LOG_WIDTH[0]))
        fields.update(uniform_low=2.0 * centre / (1.0 + ratio), uniform_high=2.0 * centre * ratio / (1.0 + ratio))
    # stick breaking: w_1 = b_1, w_2 = (1 - b_1) b_2, ..., the last takes the rest
    remaining, weights = 1.0, {}
    for i, name in enumerate(pattern[:-1]):
        share = _WEIGHT_FLOOR + (1.0 - 2.0 * _WEIGHT_FLOOR) * values[f"weight_{i}"]
        weights[name] = remaining * share
        remaining -= weights[name]
    weights[pattern[-1]] = remaining
    fields["weights"] = tuple(weights.get(c, 0.0) for c in COMPONENTS)
    return LMO(**fields)


def _log_chi2(mechanism: LMO, shift: float) -> float:
    """log chi^2(noise + shift || noise), chi^2 = int (f(x - b) - f(x))^2 / f(x) dx, by
    Gauss-Legendre quadrature on [0, b] and on log-spaced panels of each tail, summed in
    log space (chi^2 spans hundreds of orders of magnitude over the scales tried)."""
    nodes, weights = _GL
    logs, log_weights = [], []
    x = 0.5 * shift * (nodes + 1.0)
    logs.append(_log_chi2_integrand(mechanism, x, shift))
    log_weights.append(np.log(0.5 * shift * weights))
    # x = b + t and x = -t, t in [1e-12 b, 1e12 max(1, b)] on log panels
    edges = np.log(np.geomspace(1e-12 * shift, 1e12 * max(1.0, shift), 49))
    for lo, hi in zip(edges[:-1], edges[1:]):
        t = np.exp(0.5 * (hi - lo) * (nodes + 1.0) + lo)
        log_w = np.log(0.5 * (hi - lo) * weights * t)
        for points in (shift + t, -t):
            logs.append(_log_chi2_integrand(mechanism, points, shift))
            log_weights.append(log_w)
    terms = np.concatenate(logs) + np.concatenate(log_weights)
    terms = terms[np.isfinite(terms)]
    if terms.size == 0:
        return -math.inf
    top = float(terms.max())
    return top + math.log(float(np.exp(terms - top).sum()))


def _log_chi2_integrand(mechanism: LMO, x: np.ndarray, shift: float) -> np.ndarray:
    """log[(f(x - b) - f(x))^2 / f(x)] = log f(x) + 2 log|expm1(log f(x - b) - log f(x))|."""
    l1 = mechanism.logpdf(x - shift)
    l2 = mechanism.logpdf(x)
    d = l1 - l2
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_abs = np.where(d > 0, d + np.log(-np.expm1(-np.abs(d))), np.log(-np.expm1(-np.abs(d))))
        return l2 + 2.0 * log_abs


def _start_scale(shape: LMO, sensitivity: float, chi2_target: float) -> float:
    """Scale whose one-step chi^2 divergence equals ``chi2_target`` (that of the calibrated
    Gaussian): by the central-limit picture of subsampled composition (mu ~ q sqrt(T chi^2))
    the two then have about the same epsilon.  Only a starting point; never a bound (a
    shape whose chi^2 never crosses the target starts at ``sensitivity``)."""
    a = sensitivity
    low, high = _SCALE_LIMITS[0] * a, _SCALE_LIMITS[1] * a
    base = dataclasses.replace(shape, sensitivity=1.0)

    def gap(log_s: float) -> float:
        # chi^2 at scale s is chi^2 of the shift a/s at scale 1
        return max(_log_chi2(base, a / math.exp(log_s)), -1e4) - math.log(chi2_target)

    try:
        return math.exp(optimize.brentq(gap, math.log(low), math.log(high), xtol=1e-3))
    except (ValueError, RuntimeError):
        return a
