"""LMO Rényi-DP accounting AS PUBLISHED -- NOT CERTIFIED, for reproduction only.

Nothing in dpforge calls this module: no engine, no calibrator, no search.  It exists so
that numbers reported for LMO-DP can be reproduced and set beside the sound ones of
:mod:`dpforge.accounting.rdp.lmo` (``lmo_rdp_exact``, ``lmo_rdp_mgf_bound``,
``lmo_pure_cap``).  See docs/design.md §5 ("Known traps") and §6 ("The LMO-DP paper,
checked").

Source.  Q. Yang, M. Mohammady, H. Wang, A. Payani, A. Kundu, K. Shu, Y. Yan, Y. Hong,
"LMO-DP: Optimizing the Randomization Mechanism for Differentially Private Fine-Tuning
(Large) Language Models", arXiv:2405.18776 (2024).  Four formulas, selected by
``formula``:

* "theorem_4_2": Theorem 4.2, Eq. 4 of the paper, exactly as printed, with the MGF as
  printed in Definition 4.1 (below);
* "algorithm_3": Algorithm 3 (Appendix D), lines 13 and 17: the MGF as a weighted sum
  of the component MGFs and the Rényi formula without the sensitivity;
* "public_code" and "public_code_loop": the formula of the authors' public code, which
  matches the paper's experimental setting: repository ``rayhanul/lmo-dp``, file
  ``experiments/check_privacy_and_statistics.py`` (commit f556e54f, functions
  ``compute_privacy_lmo_alpha`` and ``compute_privacy_lmo``; a near-identical copy is
  ``takko0234/lmo-dp``, ``check_privacy_and_statistics.py``).  No code is copied.

What the paper prints, and the law each formula implies.  Write Y_1 ~ Gamma(k, theta)
(shape, scale), Y_2 ~ Exp(lam) (rate), Y_3 ~ U[a, b], with MGFs
M_G(t) = (1 - t theta)^(-k), M_E(t) = 1/(1 - t/lam), M_U(t) = (e^{tb} - e^{ta})/(t (b - a)),
and coefficients a_1, a_2, a_3 (the paper's names; here ``a1``, ``a3``, ``a4`` after the
public code, for Gamma, Exponential and Uniform).

* Definition 4.1 says the Laplace scale b "is modeled as" Y = sum_k a_k Y_k and gives
  M_LMO(t) = M_G(a_1 t) + M_E(a_2 t) + M_U(a_3 t).  That is neither the MGF of the sum
  (a product, prod_k M_k(a_k t), the paper's own Theorem A.4) nor of a mixture with
  weights a_k (sum_k a_k M_k(t)): M_LMO(0) = 3.  It is exactly 3 times the MGF of the
  EQUAL-weight (1/3 each) mixture of a_1 Y_1, a_2 Y_2, a_3 Y_3, the law built by
  :func:`definition_4_1_law`.  Eq. 4 puts M_LMO where the Laplace formula has e^{s/b},
  so Y plays the INVERSE scale 1/b (as in Theorem A.1 and Appendix E.2), not b.
* Theorem 4.2 (Eq. 4; proof in Appendix B.1, Eq. 6), with C the query's sensitivity:

      eps_alpha = 1/(alpha-1) log{ alpha/(2alpha-1) M(alpha-1) + 1/2 M(1-C-alpha)
                                   + 1/(2(1-2alpha)) M((1-2C) alpha + C - 1) }.

  Eq. 6 integrates the Laplace pair with "x - 1" where the shift is C, so Eq. 4 is the
  Laplace Rényi divergence (Mironov 2017, Prop. 6) only at C = 1, where it reduces to
  alpha/(2alpha-1) M(alpha-1) + (alpha-1)/(2alpha-1) M(-alpha).  For C != 1 it is no
  divergence at all: at C -> 0 it tends to log cosh-type values > 0 (over-reports), for
  C > 1 it stays bounded as C grows while the divergence grows without bound
  (under-reports), and the negative coefficient 1/(2(1-2alpha)) lets the argument of the
  logarithm fall below 1 (negative eps) or below 0 (NaN).  With Definition 4.1's M,
  Eq. 4 equals Eq. 4 on the equal-weight mixture plus log(3)/(alpha-1) exactly.
* Algorithm 3 (line 13) builds M_Y(t) = a_1 M_Y1(t) + a_2 M_Y1(t) + a_3 M_Y3(t): the
  MGF of the MIXTURE with weights a_k, i.e. dpforge's :class:`~dpforge.mechanisms.lmo.LMO`
  with ``weights = (a_1, a_2, a_3)``.  The second term names M_Y1 (the Gamma MGF) where
  the Exponential's is meant; "algorithm_3" implements the evident intent (M_Y2) and
  drops components whose coefficient is 0 (lines 4, 8, 12 set their MGF to 0).  Line 17
  is Eq. 4 at C = 1: for one scalar release of sensitivity <= 1 it is the
  joint-convexity bound (:func:`~dpforge.accounting.rdp.lmo.lmo_rdp_mgf_bound` at shift
  1), an upper bound wherever the MGF is finite.  Its faults are elsewhere: it has no
  sensitivity, no sampling rate and no number of steps (Algorithm 3 checks one release
  against the whole budget), and line 19 keeps S when max(eps') < eps_0, where the
  minimum over orders is meant.
* The public code multiplies the MGFs: M is the MGF of the weighted SUM
  eta = a1 G + a3 E + a4 U (Definition 4.1's Y read as the inverse scale), which its
  sampler draws.

Summary of readings: "theorem_4_2" -> 3 x equal-weight mixture of a_k Y_k (and correct
only at C = 1); "algorithm_3" -> mixture with weights a_k (dpforge's LMO); "public_code"
-> sum of a_k Y_k.  Three different noises under one name.

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
    "PAPER_FORMULAS",
    "PUBLIC_CODE_DELTA",
    "PUBLIC_CODE_ORDERS",
    "PUBLIC_CODE_SOURCE",
    "PublishedEpsilon",
    "PublishedParameters",
    "definition_4_1_law",
    "lmo_epsilon_as_published",
    "lmo_rdp_as_published",
    "published_parameters",
]

FORMULAS = ("public_code", "public_code_loop", "theorem_4_2", "algorithm_3")
#: the formulas read from the paper's text (the others from its public code)
PAPER_FORMULAS = ("theorem_4_2", "algorithm_3")
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


def _uniform_mgf(low: float, high: float, t: np.ndarray, zero_uniform: str) -> np.ndarray:
    """(e^{t b} - e^{t a}) / (t (b - a)) as printed; at t = 0 its limit 1 or, literally, 0/0."""
    value = (np.exp(t * high) - np.exp(t * low)) / (t * (high - low))
    return np.where(t == 0, 1.0, value) if zero_uniform == "limit" else value


def _mgf_definition_4_1(p: PublishedParameters, t: np.ndarray, zero_uniform: str) -> np.ndarray:
    """Definition 4.1 as printed: M_G(a_1 t) + M_E(a_2 t) + M_U(a_3 t) (M(0) = 3), float64."""
    gamma = np.power(1.0 - p.a1 * t * p.theta, -p.k)
    exponential = 1.0 / (1.0 - p.a3 * t / p.lam)
    return gamma + exponential + _uniform_mgf(p.a, p.b, p.a4 * t, zero_uniform)


def _mgf_algorithm_3(p: PublishedParameters, t: np.ndarray) -> np.ndarray:
    """Algorithm 3, line 13: a_1 M_Y1(t) + a_2 M_Y2(t) + a_3 M_Y3(t) (the printed second
    term names M_Y1; the Exponential's MGF is meant), components with a_k = 0 dropped."""
    total = np.zeros_like(t)
    if p.a1 > 0:
        total = total + p.a1 * np.power(1.0 - t * p.theta, -p.k)
    if p.a3 > 0:
        total = total + p.a3 / (1.0 - t / p.lam)
    if p.a4 > 0:
        total = total + p.a4 * _uniform_mgf(p.a, p.b, t, "literal")  # t is never 0 here
    return total


def _theorem_4_2_raw(p: PublishedParameters, alpha: np.ndarray, c: float, zero_uniform: str) -> np.ndarray:
    """Eq. 4 exactly as printed, with Definition 4.1's M (float64, never clamped)."""
    with np.errstate(all="ignore"):
        inner = (
            alpha / (2.0 * alpha - 1.0) * _mgf_definition_4_1(p, alpha - 1.0, zero_uniform)
            + 0.5 * _mgf_definition_4_1(p, 1.0 - c - alpha, zero_uniform)
            + 1.0 / (2.0 * (1.0 - 2.0 * alpha)) * _mgf_definition_4_1(p, (1.0 - 2.0 * c) * alpha + (c - 1.0), zero_uniform)
        )
        return np.log(inner) / (alpha - 1.0)


def _algorithm_3_raw(p: PublishedParameters, alpha: np.ndarray) -> np.ndarray:
    """Algorithm 3, line 17: 1/(alpha-1) log[(alpha M_Y(alpha-1) + (alpha-1) M_Y(-alpha)) / (2alpha-1)]."""
    with np.errstate(all="ignore"):
        inner = alpha * _mgf_algorithm_3(p, alpha - 1.0) + (alpha - 1.0) * _mgf_algorithm_3(p, -alpha)
        return np.log(inner / (2.0 * alpha - 1.0)) / (alpha - 1.0)


def _paper_valid_orders(p: PublishedParameters, alpha: np.ndarray, formula: str) -> np.ndarray:
    """Orders where the paper's stated conditions hold: Definition 4.1,
    a_1 (alpha-1) < 1/theta and a_2 (alpha-1) < lam; Algorithm 3, lines 2 and 6,
    (alpha-1) < 1/theta and (alpha-1) < lam for the components it uses."""
    if formula == "theorem_4_2":
        return (p.a1 * (alpha - 1.0) * p.theta < 1.0) & (p.a3 * (alpha - 1.0) < p.lam)
    ok = np.ones(alpha.shape, dtype=bool)
    if p.a1 > 0:
        ok &= (alpha - 1.0) * p.theta < 1.0
    if p.a3 > 0:
        ok &= (alpha - 1.0) < p.lam
    return ok


def definition_4_1_law(mechanism_or_params: object = None, **params: float) -> LMO:
    """The LMO whose eta-MGF is Definition 4.1's M_LMO(t) / 3: the EQUAL-weight mixture of
    a_1 Gamma(k, theta), a_2 Exp(lam) and a_3 U[a, b] (scale theta a_1, rate lam / a_2,
    bounds a_3 a, a_3 b).  A component with a_k = 0 is a point mass at 0, which no LMO
    can hold: it is refused.  ``sensitivity`` is 1 (or the given LMO's)."""
    p = published_parameters(mechanism_or_params, **params)
    if min(p.a1, p.a3, p.a4) <= 0:
        raise ParameterError(
            "definition_4_1_law needs a1, a3, a4 > 0: a zero coefficient makes a_k Y_k a point mass at 0 "
            f"(got a1={p.a1!r}, a3={p.a3!r}, a4={p.a4!r})"
        )
    if p.a <= 0:
        raise ParameterError(f"definition_4_1_law needs a > 0 (the inverse scale must be positive), got a={p.a!r}")
    sensitivity = float(mechanism_or_params.sensitivity) if isinstance(mechanism_or_params, LMO) else 1.0
    return LMO(
        weights=(1 / 3, 1 / 3, 1 / 3),
        gamma_shape=p.k,
        gamma_scale=p.theta * p.a1,
        exponential_rate=p.lam / p.a3,
        uniform_low=p.a * p.a4,
        uniform_high=p.b * p.a4,
        sensitivity=sensitivity,
    )


def _public_pole_check(p: PublishedParameters, alpha: np.ndarray) -> bool:
    """The public code's only guard: M(alpha - 1) at the SMALLEST order and M(-alpha) at the
    LARGEST (the latter always holds for non-negative coefficients)."""
    lo, hi = float(alpha.min()), float(alpha.max())
    return bool(p.a1 * (lo - 1) < 1 / p.theta and p.a1 * (-hi) < 1 / p.theta
                and p.a3 * (lo - 1) < p.lam and p.a3 * (-hi) < p.lam)


def _sensitivity(formula: str, mechanism_or_params: object, sensitivity: object) -> float:
    """C of Theorem 4.2: the keyword, else the LMO's sensitivity, else 1; the other
    formulas have no sensitivity input and refuse the keyword."""
    if formula != "theorem_4_2":
        if sensitivity is not None:
            raise ParameterError(f"sensitivity is an input of formula='theorem_4_2' only, not of {formula!r}")
        return 1.0
    if sensitivity is None:
        return float(mechanism_or_params.sensitivity) if isinstance(mechanism_or_params, LMO) else 1.0
    c = _number("sensitivity", sensitivity)
    if c <= 0:
        raise ParameterError(f"sensitivity must be > 0, got {sensitivity!r}")
    return c


def lmo_rdp_as_published(
    mechanism_or_params: object = None,
    orders: object = PUBLIC_CODE_ORDERS,
    formula: str = "public_code",
    *,
    zero_uniform: str = "limit",
    sensitivity: float | None = None,
    **params: float,
) -> np.ndarray:
    """LMO RDP AS PUBLISHED -- NOT CERTIFIED; for reproduction only.  No dpforge engine calls this.

    ``mechanism_or_params``: an LMO (its weights become the coefficients a1, a3, a4 of
    Gamma, Exponential and Uniform), a mapping, or keywords a1, a3, a4, k, theta, lam, a, b
    (module docstring).  ``formula``:

    * "public_code": the public code's raw formula per order (MGF of the SUM
      a1 G + a3 E + a4 U; the sensitivity is ignored, i.e. taken as 1), NaN / negative /
      inf exactly as float64 evaluation produces them, never clamped;
    * "public_code_loop": the public order loop: if the pole check (smallest and largest
      order only) fails, the public code returns no curve -- here every order is +inf;
      otherwise each value that is not > 0 (NaN, negative, zero) becomes +inf and every
      positive value is kept, including finite values at orders past a pole;
    * "theorem_4_2": Eq. 4 of Yang et al. 2024 exactly as printed, with Definition 4.1's
      M_LMO(t) = M_G(a1 t) + M_E(a3 t) + M_U(a4 t) and C = ``sensitivity`` (default: the
      LMO's sensitivity, or 1 for parameters); raw float64, never clamped.  Right only at
      C = 1, and then for a law that is none of the three (module docstring);
    * "algorithm_3": Algorithm 3, line 17 with line 13's mixture MGF (weights a1, a3, a4),
      no sensitivity (C = 1); raw float64.  At C = 1, before the poles, this is the
      joint-convexity bound on the LMO with those weights.

    ``sensitivity`` is accepted only with "theorem_4_2"; ``zero_uniform`` ("limit" or
    "literal") decides M_U at argument 0 for the public code and Definition 4.1.
    """
    if formula not in FORMULAS:
        raise ParameterError(f"formula must be one of {', '.join(FORMULAS)}, got {formula!r}")
    if zero_uniform not in ZERO_UNIFORM:
        raise ParameterError(f"zero_uniform must be one of {', '.join(ZERO_UNIFORM)}, got {zero_uniform!r}")
    alpha = require_orders(orders)
    c = _sensitivity(formula, mechanism_or_params, sensitivity)
    p = published_parameters(mechanism_or_params, **params)
    if formula == "theorem_4_2":
        return _theorem_4_2_raw(p, alpha, c, zero_uniform)
    if formula == "algorithm_3":
        return _algorithm_3_raw(p, alpha)
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
    formula: str = "public_code_loop",
    zero_uniform: str = "limit",
    sensitivity: float | None = None,
    **params: float,
) -> PublishedEpsilon:
    """(epsilon, order, rdp) AS PUBLISHED -- NOT CERTIFIED; reproduction only.

    The per-release RDP curve of ``formula`` times ``steps`` (Lemma 3.3 / Eq. 3 of the
    paper: no sampling rate enters), converted as the public code's ``get_privacy_spent``
    does (Balle et al. 2020 / Canonne, Kamath, Steinke 2020): per order eps = 0 if
    delta^2 + expm1(-rdp) >= 0, else rdp + log(1 - 1/alpha) - log(delta alpha)/(alpha - 1)
    for alpha > 1.01 (+inf otherwise); the minimum over orders, clipped at 0.  The paper's
    Eq. 1, min_alpha log((log(1/delta) + eps_alpha)/alpha), is a misprint (it is negative
    for any curve that is small at alpha = 128) and is not used.

    ``formula``: "public_code_loop" (default; where the public pole check fails the public
    code returns no result: epsilon +inf, order NaN), or "theorem_4_2" / "algorithm_3",
    whose orders count only where the paper's stated MGF conditions hold
    (Definition 4.1; Algorithm 3, lines 2 and 6) and the value is > 0 (a loop that skips
    the rest; none left: epsilon +inf, order NaN).  Inherits every failure of
    :func:`lmo_rdp_as_published`.  No dpforge engine calls this.
    """
    delta = _number("delta", delta)
    if not 0 < delta < 1:
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ParameterError(f"steps must be an integer >= 1, got {steps!r}")
    if formula not in ("public_code_loop",) + PAPER_FORMULAS:
        raise ParameterError(
            f"formula must be one of public_code_loop, {', '.join(PAPER_FORMULAS)}, got {formula!r}"
        )
    alpha = require_orders(orders)
    p = published_parameters(mechanism_or_params, **params)
    if formula == "public_code_loop":
        if sensitivity is not None:
            raise ParameterError("sensitivity is an input of formula='theorem_4_2' only, not of 'public_code_loop'")
        rdp = lmo_rdp_as_published(p, alpha, "public_code_loop", zero_uniform=zero_uniform) * steps
        usable_curve = _public_pole_check(p, alpha)
    else:
        source = mechanism_or_params if isinstance(mechanism_or_params, LMO) else p
        raw = lmo_rdp_as_published(source, alpha, formula, zero_uniform=zero_uniform, sensitivity=sensitivity)
        with np.errstate(invalid="ignore"):
            keep = _paper_valid_orders(p, alpha, formula) & (raw > 0) & np.isfinite(raw)
        rdp = np.where(keep, raw, np.inf) * steps
        usable_curve = bool(keep.any())
    if not usable_curve:
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
