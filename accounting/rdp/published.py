"""LMO Rényi-DP accounting AS PUBLISHED (PUBLIC CODE) -- NOT CERTIFIED, for reproduction only.

Nothing in dpforge calls this module: no engine, no calibrator, no search.  It exists so
that numbers reported for LMO-DP can be reproduced and set beside the sound ones of
:mod:`dpforge.accounting.rdp.lmo` (``lmo_rdp_exact``, ``lmo_rdp_mgf_bound``,
``lmo_pure_cap``).  See docs/design.md §5 ("Known traps").

Source.  Q. Yang, M. Mohammady, H. Wang, A. Payani, A. Kundu, K. Shu, Y. Yan, Y. Hong,
"LMO-DP: Optimizing the Randomization Mechanism for Differentially Private Fine-Tuning
(Large) Language Models", arXiv:2405.18776 (2024).  The text of the paper's Theorem 4.2
and Algorithm 3 could NOT be obtained, so this module is NOT verified against them.  It
re-implements, from the mathematics, the formula of the public code that matches the
paper's experimental setting: repository ``rayhanul/lmo-dp``, file
``experiments/check_privacy_and_statistics.py`` (commit f556e54f, functions
``compute_privacy_lmo_alpha`` and ``compute_privacy_lmo``; a near-identical copy is
``takko0234/lmo-dp``, ``check_privacy_and_statistics.py``).  No code is copied.

What the public code computes.  With coefficients a1, a3, a4, a Gamma(k, theta) law
(shape, scale), an Exponential law of rate lam and a Uniform[a, b] law,

    M(t) = (1 - a1 t theta)^(-k) * lam / (lam - a3 t) * (e^{a4 t b} - e^{a4 t a}) / (a4 t (b - a)),
    RDP(alpha) = 1/(alpha - 1) * log[ (alpha M(alpha - 1) + (alpha - 1) M(-alpha)) / (2 alpha - 1) ].

M is the moment-generating function of the weighted SUM eta = a1 G + a3 E + a4 U (its
sampler, ``experiments/lmo_noise_generator.py``, draws exactly that sum), and RDP(alpha)
is the joint-convexity bound on the Rényi divergence of Laplace noise with inverse
scale eta at shift 1 (Mironov 2017, Prop. 6, averaged over eta).  Consequently:

* It IGNORES THE SENSITIVITY (shift fixed at 1).  For sensitivity above 1 it
  under-reports, far below the exact divergence (unsound); at sensitivity <= 1 it is
  an upper bound, but only at orders where M is finite.
* Given an :class:`~dpforge.mechanisms.lmo.LMO`, the coefficients a1, a3, a4 are the
  LMO's weights, BUT the public code treats them as coefficients of a SUM of the three
  eta variables, whereas dpforge's LMO draws eta from a MIXTURE with those weights.
  The published number therefore describes a different noise from the LMO passed in,
  except when only one component has non-zero weight.  ``dimension`` and ``norm`` are
  ignored too.
* Past a pole (a1 theta (alpha - 1) >= 1 or a3 (alpha - 1) >= lam) M diverges and the
  formula is meaningless; evaluated anyway it gives NaN, negative values, or (for an
  even integer Gamma shape, or when two negative factors multiply) FINITE POSITIVE
  numbers, which the public order loop accepts.

Numerical conventions of this re-implementation (numpy float64):

* a negative base to a non-integer power gives NaN (pure-Python floats, as in the
  public code, give a complex number there, which its loop turns into +inf through
  its bare ``except``; the loop outcome is the same);
* for a4 = 0 the Uniform factor is taken at its limit 1 (``zero_uniform="limit"``,
  default).  The public expression is then 0/0: ``zero_uniform="literal"`` gives NaN
  as it does, so the public loop reports +inf at every order for any mechanism
  without a Uniform part.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from dpforge.errors import ParameterError
from dpforge.accounting.rdp.formulas import require_orders
from dpforge.mechanisms.lmo import LMO

__all__ = [
    "FORMULAS",
    "PUBLIC_CODE_DELTA",
    "PUBLIC_CODE_ORDERS",
    "PUBLIC_CODE_SOURCE",
    "PublishedEpsilon",
    "PublishedParameters",
    "lmo_epsilon_as_published",
    "lmo_rdp_as_published",
    "published_parameters",
]

FORMULAS = ("public_code", "public_code_loop")
ZERO_UNIFORM = ("limit", "literal")
#: the order grid of the public code (2, 3, ..., 128)
PUBLIC_CODE_ORDERS = np.arange(2.0, 129.0)
#: the public code's default delta
PUBLIC_CODE_DELTA = 1e-10
PUBLIC_CODE_SOURCE = (
    "https://github.com/rayhanul/lmo-dp/blob/f556e54f8cdc5b0aa227cb19c5ff06134a3e92bf/"
    "experiments/check_privacy_and_statistics.py"
)

_OUR_KEYS = ("a1", "a3", "a4", "k", "theta", "lam", "a", "b")
#: the public code's JSON keys, mapped to ours
_PUBLIC_KEYS = {"a1": "a1", "a3": "a3", "a4": "a4", "G_k": "k", "G_theta": "theta",
                "E_lambda": "lam", "U_a": "a", "U_b": "b"}


class PublishedParameters(NamedTuple):
    """Parameters of the public formula: eta = a1 Gamma(k, theta) + a3 Exp(lam) + a4 U[a, b] (a SUM)."""

    a1: float
    a3: float
    a4: float
    k: float
    theta: float
    lam: float
    a: float
    b: float


class PublishedEpsilon(NamedTuple):
    """(epsilon, order, rdp) as the public code reports them -- NOT CERTIFIED."""

    epsilon: float
    order: float
    rdp: np.ndarray


def _number(name: str, value: object) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(x):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    return x


def published_parameters(mechanism_or_params: object = None, **params: float) -> PublishedParameters:
    """The public formula's parameters from an LMO, a mapping, or keywords.

    An :class:`LMO` maps to a1, a3, a4 = its weights (mixture weights reused as SUM
    coefficients -- a different noise unless one weight is 1), k, theta = gamma shape and
    scale, lam = exponential rate, a, b = uniform bounds; its sensitivity, dimension and
    norm are ignored, as the public code has no such inputs.  A mapping (or keywords)
    uses the keys a1, a3, a4, k, theta, lam, a, b, or the public code's JSON keys
    a1, a3, a4, G_k, G_theta, E_lambda, U_a, U_b.
    """
    if isinstance(mechanism_or_params, LMO):
        if params:
            raise ParameterError("give either an LMO or keyword parameters, not both")
        m = mechanism_or_params
        return PublishedParameters(*(float(w) for w in m.weights), float(m.gamma_shape), float(m.gamma_scale),
                                   float(m.exponential_rate), float(m.uniform_low), float(m.uniform_high))
    if isinstance(mechanism_or_params, PublishedParameters):
        source: Mapping = mechanism_or_params._asdict()
    elif isinstance(mechanism_or_params, Mapping):
        source = mechanism_or_params
    elif mechanism_or_params is None:
        source = {}
    else:
        raise ParameterError(
            f"expected an LMO, a mapping of parameters or keywords, got {type(mechanism_or_params).__name__}"
        )
    if source and params:
        raise ParameterError("give either a mapping or keyword parameters, not both")
    raw = dict(source or params)
    values: dict[str, float] = {}
    for key, value in raw.items():
        name = key if key in _OUR_KEYS else _PUBLIC_KEYS.get(key)
        if name is None:
            raise ParameterError(f"unknown LMO parameter {key!r}; expected {', '.join(_OUR_KEYS)}")
        if name in values:
            raise ParameterError(f"LMO parameter {name!r} given twice")
        values[name] = _number(name, value)
    missing = [key for key in _OUR_KEYS if key not in values]
    if missing:
        raise ParameterError(f"missing LMO parameter(s): {', '.join(missing)}")
    for key in ("a1", "a3", "a4"):
        if values[key] < 0:
            raise ParameterError(f"{key} must be >= 0, got {values[key]!r}")
    for key in ("k", "theta", "lam"):
        if values[key] <= 0:
            raise ParameterError(f"{key} must be > 0, got {values[key]!r}")
    if values["a"] >= values["b"]:
        raise ParameterError(f"a must be < b, got a={values['a']!r}, b={values['b']!r}")
    return PublishedParameters(**values)


def _mgf(p: PublishedParameters, t: np.ndarray, zero_uniform: str) -> np.ndarray:
    """M(t) of the public code, evaluated literally in float64 (no pole handling)."""
    gamma = np.power(1.0 - p.a1 * t * p.theta, -p.k)
    exponential = p.lam / (p.lam - p.a3 * t)
    u = p.a4 * t
    uniform = (np.exp(u * p.b) - np.exp(u * p.a)) / (u * (p.b - p.a))
    if zero_uniform == "limit":
        uniform = np.where(u == 0, 1.0, uniform)
    return gamma * exponential * uniform


def _raw(p: PublishedParameters, alpha: np.ndarray, zero_uniform: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        inner = (alpha * _mgf(p, alpha - 1.0, zero_uniform) + (alpha - 1.0) * _mgf(p, -alpha, zero_uniform))
        return np.log(inner / (2.0 * alpha - 1.0)) / (alpha - 1.0)


def _public_pole_check(p: PublishedParameters, alpha: np.ndarray) -> bool:
    """The public code's only guard: M(alpha - 1) at the SMALLEST order and M(-alpha) at the
    LARGEST (the latter always holds for non-negative coefficients)."""
    lo, hi = float(alpha.min()), float(alpha.max())
    return bool(p.a1 * (lo - 1) < 1 / p.theta and p.a1 * (-hi) < 1 / p.theta
                and p.a3 * (lo - 1) < p.lam and p.a3 * (-hi) < p.lam)


def lmo_rdp_as_published(
    mechanism_or_params: object = None,
    orders: object = PUBLIC_CODE_ORDERS,
    formula: str = "public_code",
    *,
    zero_uniform: str = "limit",
    **params: float,
) -> np.ndarray:
    """LMO RDP AS PUBLISHED (PUBLIC CODE) -- NOT CERTIFIED; for reproduction only.

    No dpforge engine calls this.  NOT verified against Theorem 4.2 / Algorithm 3 of Yang
    et al. 2024 (arXiv:2405.18776), whose text we could not obtain; it re-implements the
    formula of the public code ``rayhanul/lmo-dp``, ``experiments/check_privacy_and_statistics.py``
    (see the module docstring for the formula and its failures).

    ``mechanism_or_params``: an LMO (weights become the SUM coefficients a1, a3, a4 -- a
    different noise from the LMO's mixture unless a single weight is 1 -- and the
    SENSITIVITY IS IGNORED, i.e. taken as 1), a mapping, or keywords a1, a3, a4, k, theta,
    lam, a, b.  ``formula``:

    * "public_code": the raw formula per order, NaN / negative / inf exactly as float64
      evaluation produces them, never clamped;
    * "public_code_loop": the public order loop: if the pole check (smallest and largest
      order only) fails, the public code returns no curve -- here every order is +inf;
      otherwise each value that is not > 0 (NaN, negative, zero) becomes +inf and every
      positive value is kept, including finite values at orders past a pole.
    """
    if formula not in FORMULAS:
        raise ParameterError(f"formula must be one of {', '.join(FORMULAS)}, got {formula!r}")
    if zero_uniform not in ZERO_UNIFORM:
        raise ParameterError(f"zero_uniform must be one of {', '.join(ZERO_UNIFORM)}, got {zero_uniform!r}")
    alpha = require_orders(orders)
    p = published_parameters(mechanism_or_params, **params)
    raw = _raw(p, alpha, zero_uniform)
    if formula == "public_code":
        return raw
    if not _public_pole_check(p, alpha):
        return np.full_like(alpha, np.inf)
    return np.where(raw > 0, raw, np.inf)


def lmo_epsilon_as_published(
    mechanism_or_params: object = None,
    delta: float = PUBLIC_CODE_DELTA,
    orders: object = PUBLIC_CODE_ORDERS,
    steps: int = 1,
    *,
    zero_uniform: str = "limit",
    **params: float,
) -> PublishedEpsilon:
    """(epsilon, order, rdp) AS PUBLISHED (PUBLIC CODE) -- NOT CERTIFIED; reproduction only.

    The "public_code_loop" RDP curve times ``steps``, converted as the public code's
    ``get_privacy_spent`` does (Balle et al. 2020 / Canonne, Kamath, Steinke 2020):
    per order eps = 0 if delta^2 + expm1(-rdp) >= 0, else rdp + log(1 - 1/alpha)
    - log(delta alpha)/(alpha - 1) for alpha > 1.01 (+inf otherwise); the minimum over
    orders, clipped at 0.  Where the public pole check fails the public code returns no
    result; here epsilon is +inf and order NaN.  Inherits every failure of
    :func:`lmo_rdp_as_published` (sensitivity ignored, SUM not mixture, finite values
    past poles).  No dpforge engine calls this; NOT verified against the paper's
    Theorem 4.2 / Algorithm 3.
    """
    delta = _number("delta", delta)
    if not 0 < delta < 1:
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ParameterError(f"steps must be an integer >= 1, got {steps!r}")
    alpha = require_orders(orders)
    p = published_parameters(mechanism_or_params, **params)
    rdp = lmo_rdp_as_published(p, alpha, "public_code_loop", zero_uniform=zero_uniform) * steps
    if not _public_pole_check(p, alpha):
        return PublishedEpsilon(math.inf, math.nan, rdp)
    eps = np.full_like(alpha, np.inf)
    with np.errstate(all="ignore"):
        zero = delta**2 + np.expm1(-rdp) >= 0
        usable = ~zero & (alpha > 1.01)
        eps[zero] = 0.0
        a = alpha[usable]
        eps[usable] = rdp[usable] + np.log1p(-1.0 / a) - np.log(delta * a) / (a - 1.0)
    best = int(np.argmin(eps))
    return PublishedEpsilon(max(0.0, float(eps[best])), float(alpha[best]), rdp)
