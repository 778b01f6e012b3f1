"""eps(delta) and delta(eps) read off a closed-form profile, where there is one: a single
step of any law, and any composition of unsampled Gaussian steps.

For a pair (P, Q) with privacy loss L = log dP/dQ,

    delta(eps) = E_P[(1 - e^{eps - L})_+] = Pr_P(L > eps) - e^eps Pr_Q(L > eps)

(the hockey-stick divergence; Balle and Wang 2018, Theorem 5), so one step needs only the
law's distribution functions, no grid.  T unsampled Gaussian steps of noise multipliers
sigma_i compose to one Gaussian pair N(mu, 1) vs N(0, 1) with mu^2 = sum_i 1/sigma_i^2
(Dong, Roth, Su 2022, Corollary 3.3), and

    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)

(Balle and Wang 2018, Theorem 8), with the second term in log space (e^eps overflows
past 709).

Certification.  Both terms are computed to a few ulps of themselves, so the computed
delta is within ``_RELATIVE_ERROR`` x (A + B) of the exact one, A and B the two terms; a
model of floating-point error like the grids' round-off allowance (design notes, section
3), with a wide margin: 450 ulps where special functions promise a few.  The upper end
is a point where the computed delta plus that error is at most delta (so the exact
delta is too, and eps is at most that point), the lower end a point where the computed
delta minus that error exceeds delta; bisection keeps each end a point where its
condition holds, so the bracket does not depend on the computed delta being monotone.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from scipy import special

from dpforge.accounting.prv.components import directions_for
from dpforge.mechanisms.combinators import Component
from dpforge.mechanisms.pairs import GaussianPair

#: the computed delta's error, relative to the sum of the two terms
_RELATIVE_ERROR = 1e-13
#: eps beyond which no closed form is tried (the grids then report their limits)
_LARGEST_EPSILON = 1e7
#: bisection stops once the bracket is this narrow relative to its upper end
_BISECTION_WIDTH = 1e-12

#: (A, B) of delta(eps) = A - B at an eps
Terms = Callable[[float], tuple[float, float]]


def _one_step_terms(component: Component, direction: str) -> Terms:
    loss = component.privacy_loss_distribution(direction)

    def terms(epsilon: float) -> tuple[float, float]:
        above_q = float(loss.sf(epsilon, "Q"))
        scaled = math.exp(epsilon + math.log(above_q)) if above_q > 0.0 else 0.0
        return float(loss.sf(epsilon, "P")), scaled

    return terms


def _gaussian_terms(mu: float) -> Terms:
    def terms(epsilon: float) -> tuple[float, float]:
        return float(special.ndtr(0.5 * mu - epsilon / mu)), math.exp(epsilon + float(special.log_ndtr(-0.5 * mu - epsilon / mu)))

    return terms


def closed_form(components: Sequence[Component]) -> tuple[str, list[Terms]] | None:
    """(what the closed form is, the terms of each direction's profile), or None when the
    description has none: one component of one step, or only unsampled Gaussian steps."""
    if len(components) == 1 and components[0].count == 1:
        return "one step", [_one_step_terms(components[0], d) for d in directions_for(components)]
    pairs = [component.mechanism.dominating_pair() for component in components]
    if all(c.sampling_rate >= 1.0 and type(p) is GaussianPair for c, p in zip(components, pairs)):
        mu = math.sqrt(sum(c.count * float(p.mu) ** 2 for c, p in zip(components, pairs)))
        if mu > 0.0 and math.isfinite(mu):
            return "gaussian composition", [_gaussian_terms(mu)]
    return None


def _bracket(terms: Terms, delta: float) -> tuple[float, float] | None:
    """Certified (lower, upper) eps(delta) of one profile (module docstring), or None when
    eps lies beyond ``_LARGEST_EPSILON`` or the terms are not finite."""

    def error(a: float, b: float) -> float:
        return _RELATIVE_ERROR * (a + b) + 1e-300

    def upper_holds(epsilon: float) -> bool:  # exact delta(eps) <= delta
        a, b = terms(epsilon)
        return a - b + error(a, b) <= delta

    def lower_holds(epsilon: float) -> bool:  # exact delta(eps) > delta
        a, b = terms(epsilon)
        return a - b - error(a, b) > delta

    a, b = terms(0.0)
    if not (math.isfinite(a) and math.isfinite(b)):
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
        a, b = terms(epsilon)
        if not (math.isfinite(a) and math.isfinite(b)):
            return None
        error = _RELATIVE_ERROR * (a + b) + 1e-300
        lows.append(min(max(a - b - error, 0.0), 1.0))
        highs.append(min(max(a - b + error, 0.0), 1.0))
    return name, max(lows), max(highs)
