"""eps(delta) and delta(eps) read off a closed-form profile, where there is one: a single
step of a (subsampled) Gaussian or Laplace pair, and any composition of unsampled Gaussian
steps.

For a pair (P, Q) with privacy loss L = log dP/dQ,

    delta(eps) = E_P[(1 - e^{eps - L})_+] = Pr_P(L > eps) - e^eps Pr_Q(L > eps)

(the hockey-stick divergence; Balle and Wang 2018, Theorem 5), so one step needs only the
law's distribution functions, no grid (other laws, LMO and randomised response among
them, go to the grids: their terms' error model is not checked).  T unsampled Gaussian steps of noise multipliers
sigma_i compose to one Gaussian pair N(mu, 1) vs N(0, 1) with mu^2 = sum_i 1/sigma_i^2
(Dong, Roth, Su 2022, Corollary 3.3), and

    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)

(Balle and Wang 2018, Theorem 8), with the second term in log space (e^eps overflows
past 709).

Certification.  The computed terms carry rounding that grows with the magnitudes that
enter them: for the Gaussian, the arguments x = mu/2 - eps/mu and y = -mu/2 - eps/mu
carry an absolute error of about 2u (mu/2 + eps/mu) (u the unit round-off), which moves
Phi(x) by phi(x)/Phi(x) <= |x| + 2 times that, relatively; e^eps Phi(y) is
exp(eps + log Phi(y)), whose exponent carries u (eps + |log Phi(y)|) more.  Each term's
error is modelled as its relative error bound from those sources (:func:`_gaussian_error`)
and, for one step of a general law, from the same sources read off the term itself
(:func:`_one_step_error`: the law's argument scales with eps and with how far into its
tail the term lies), times ``_SAFETY``, plus 16 ulps for each special function; a model
of floating-point error like the grids' round-off allowance (design notes, section 3),
checked against mpmath references (tests/accounting/prv/test_exact.py).  The upper end
is a point where the computed delta plus that error is at most delta (so the exact delta
is too, and eps is at most that point), the lower end a point where the computed delta
minus that error exceeds delta; bisection keeps each end a point where its condition
holds, so the bracket does not depend on the computed delta being monotone.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from scipy import special

from dpforge.accounting.prv.components import directions_for
from dpforge.accounting.prv.rounding import SAFETY as _SAFETY
from dpforge.accounting.prv.rounding import U as _U
from dpforge.accounting.prv.rounding import argument_amplification
from dpforge.accounting.prv.rounding import tail_factor as _tail_factor
from dpforge.mechanisms.combinators import Component
from dpforge.mechanisms.pairs import GaussianPair, LaplacePair

#: eps beyond which no closed form is tried (the grids then answer)
_LARGEST_EPSILON = 1e9
#: bisection stops once the bracket is this narrow relative to its upper end
_BISECTION_WIDTH = 1e-12

#: (A, B, the modelled error of A - B) of delta(eps) = A - B at an eps
Terms = Callable[[float], tuple[float, float, float]]


def _one_step_error(epsilon: float, a: float, above_q: float, b: float, rate: float, amplify: float) -> float:
    """The modelled error of A - B for one step: each term's argument is a function of
    eps and of the law's parameters computed to a few ulps of (1 + eps + log 1/q), then
    divided by the base pair's scale (``amplify``: 1/mu for a Gaussian of small mu, 1 for
    Laplace), moving the term by its tail factor times that; B's exponent
    eps + log Pr_Q(L > eps) adds u (eps + |log|)."""
    scale = (1.0 + abs(epsilon) + max(40.0, -math.log(rate))) * amplify
    error_a = 16.0 * _U + 4.0 * _U * scale * _tail_factor(a)
    log_q = abs(math.log(above_q)) if above_q > 0.0 else 0.0
    error_b = 16.0 * _U + 4.0 * _U * scale * _tail_factor(above_q) + 2.0 * _U * (abs(epsilon) + log_q)
    return _SAFETY * (error_a * a + error_b * b) + 1e-300


def _one_step_terms(component: Component, direction: str) -> Terms:
    loss = component.privacy_loss_distribution(direction)
    pair = loss.pair
    amplify = argument_amplification(pair)
    rate = min(component.sampling_rate, 1.0)

    def terms(epsilon: float) -> tuple[float, float, float]:
        a = float(loss.sf(epsilon, "P"))
        above_q = float(loss.sf(epsilon, "Q"))
        b = math.exp(epsilon + math.log(above_q)) if above_q > 0.0 else 0.0
        return a, b, _one_step_error(epsilon, a, above_q, b, rate, amplify)

    return terms


def _gaussian_error(mu: float, epsilon: float, x: float, log_b: float, a: float, b: float) -> float:
    """The modelled error of Phi(x) - exp(eps + log Phi(y)) (module docstring)."""
    argument = 2.0 * _U * (0.5 * mu + abs(epsilon) / mu)
    error_a = 16.0 * _U + (abs(x) + 2.0) * argument
    y = -0.5 * mu - epsilon / mu
    error_b = 16.0 * _U + (abs(y) + 2.0) * argument + 2.0 * _U * (abs(epsilon) + abs(log_b)) + 16.0 * _U * abs(log_b)
    return _SAFETY * (error_a * a + error_b * b) + 1e-300


def _gaussian_terms(mu: float) -> Terms:
    def terms(epsilon: float) -> tuple[float, float, float]:
        x = 0.5 * mu - epsilon / mu
        log_b = float(special.log_ndtr(-0.5 * mu - epsilon / mu))
        a, b = float(special.ndtr(x)), math.exp(epsilon + log_b)
        return a, b, _gaussian_error(mu, epsilon, x, log_b, a, b)

    return terms


def closed_form(components: Sequence[Component]) -> tuple[str, list[Terms]] | None:
    """(what the closed form is, the terms of each direction's profile), or None when the
    description has none: one component of one step of a Gaussian or Laplace pair (the
    laws whose error model is checked against mpmath), or only unsampled Gaussian steps."""
    pairs = [component.mechanism.dominating_pair() for component in components]
    if len(components) == 1 and components[0].count == 1 and type(pairs[0]) in (GaussianPair, LaplacePair):
        return "one step", [_one_step_terms(components[0], d) for d in directions_for(components)]
    if all(c.sampling_rate >= 1.0 and type(p) is GaussianPair for c, p in zip(components, pairs)):
        mu = math.sqrt(sum(c.count * float(p.mu) ** 2 for c, p in zip(components, pairs)))
        if mu > 0.0 and math.isfinite(mu):
            return "gaussian composition", [_gaussian_terms(mu)]
    return None


def _bracket(terms: Terms, delta: float) -> tuple[float, float] | None:
    """Certified (lower, upper) eps(delta) of one profile (module docstring), or None when
    eps lies beyond ``_LARGEST_EPSILON`` or the terms are not finite."""

    def upper_holds(epsilon: float) -> bool:  # exact delta(eps) <= delta
        a, b, error = terms(epsilon)
        return a - b + error <= delta

    def lower_holds(epsilon: float) -> bool:  # exact delta(eps) > delta
        a, b, error = terms(epsilon)
        return a - b - error > delta

    a, b, error = terms(0.0)
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(error)):
        return None
    if upper_holds(0.0):
        return 0.0, 0.0
    high = 1.0
    while not upper_holds(high):
        high *= 2.0
        if high > _LARGEST_EPSILON:
            return None
    # the upper end: the smallest point found where upper_holds
    low = 0.0
    while high - low > _BISECTION_WIDTH * high:
        middle = 0.5 * (low + high)
        low, high = (low, middle) if upper_holds(middle) else (middle, high)
    upper = high
    if not lower_holds(0.0):
        return 0.0, upper
    # the lower end: the largest point found where lower_holds, below the upper end
    low, high = 0.0, upper
    while high - low > _BISECTION_WIDTH * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if lower_holds(middle) else (low, middle)
    return low, upper


def exact_epsilon(components: Sequence[Component], delta: float) -> tuple[str, float, float] | None:
    """(what the closed form is, lower, upper) eps(delta), the maximum over directions,
    or None where there is no closed form (the grids answer)."""
    found = closed_form(components)
    if found is None:
        return None
    name, profiles = found
    brackets = [_bracket(terms, delta) for terms in profiles]
    if any(bracket is None for bracket in brackets):
        return None
    return name, max(b[0] for b in brackets), max(b[1] for b in brackets)


def exact_delta(components: Sequence[Component], epsilon: float) -> tuple[str, float, float] | None:
    """(what the closed form is, lower, upper) delta(eps), the maximum over directions:
    the computed A - B less and plus its error model, within [0, 1]; None where there is
    no closed form."""
    found = closed_form(components)
    if found is None:
        return None
    name, profiles = found
    lows, highs = [], []
    for terms in profiles:
        a, b, error = terms(epsilon)
        if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(error)):
            return None
        lows.append(min(max(a - b - error, 0.0), 1.0))
        highs.append(min(max(a - b + error, 0.0), 1.0))
    return name, max(lows), max(highs)
