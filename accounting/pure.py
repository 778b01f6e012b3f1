"""Pure-DP engine: basic composition with amplification by Poisson subsampling.

Every component must be pure epsilon-DP: its dominating pair must have a bounded
log-likelihood ratio (Laplace: eps = sensitivity / scale; PureDP / randomised response:
its eps).  The Gaussian mechanism is not pure DP and is refused with a one-line error.

* Amplification (Balle, Barthe, Gaboardi 2018, Poisson sampling, add-or-remove
  neighbours): an eps-DP step run on a Poisson sample with rate q is
  eps' = log(1 + q (e^eps - 1))-DP.  In the add direction the bound is
  -log(1 - q (1 - e^{-eps})), which is never larger.
* Basic composition: eps_0 = sum over components of count * eps'.

``epsilon(description, delta)`` reports ``upper = eps_0`` (an eps_0-DP mechanism is
(eps_0, delta)-DP for every delta; delta is recorded but not used) and as ``lower`` the
largest exact epsilon(delta) of a *single* step (any one step is a post-processing of
the composition, so its privacy profile is a lower bound; computed from the pair's
closed-form distribution functions).  ``estimate`` is ``upper`` (this engine has no
point estimate).

``delta(description, epsilon)`` reports ``upper = 0`` for epsilon >= eps_0 and
otherwise the tight bound for an eps_0-DP mechanism, the profile of randomised response
RR(eps_0), which dominates every eps_0-DP mechanism (Kairouz, Oh, Viswanath 2015):
(e^{eps_0} - e^{eps}) / (1 + e^{eps_0}).  ``lower`` is again the largest single-step delta.
"""

from __future__ import annotations

import math

import numpy as np

from dpforge.accounting.results import CalibrationResult, DeltaResult, EpsilonResult
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian
from dpforge.mechanisms.sampling import result_labels
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.mechanisms.pairs import PrivacyLoss
from dpforge.validation import (
    require_count,
    require_non_negative,
    require_positive,
    require_probability_open,
    require_sampling_rate,
)

AMPLIFICATION = "log(1 + q (e^eps - 1)) (Balle, Barthe, Gaboardi 2018)"


def unamplified_epsilon(amplified: float, sampling_rate: float) -> float:
    """The eps of one step whose Poisson-sampled release at rate q has eps' = ``amplified``:
    log(1 + (e^eps' - 1) / q), the inverse of :func:`amplified_epsilon`; past eps' = 1 as
    eps' - log q + log1p((q - 1) e^-eps'), which does not overflow (e^eps' did past 709)."""
    q = sampling_rate
    if amplified > 1.0:
        return amplified - math.log(q) + math.log1p((q - 1.0) * math.exp(-amplified))
    return math.log1p(math.expm1(amplified) / q)


def amplified_epsilon(epsilon: float, sampling_rate: float) -> float:
    """eps' = log(1 + q (e^eps - 1)) of an eps-DP step under Poisson sampling with rate q
    (amplification by subsampling, Balle, Barthe, Gaboardi 2018; add-or-remove relation)."""
    epsilon = require_non_negative("epsilon", epsilon)
    q = require_sampling_rate("sampling_rate", sampling_rate)
    if q >= 1.0:
        return epsilon
    if epsilon > 700.0:
        return epsilon + math.log(q) + math.log1p((1.0 - q) * math.exp(-epsilon) / q)
    return math.log1p(q * math.expm1(epsilon))


def step_epsilon(component: Component) -> float:
    """Pure epsilon of one unsubsampled step: max(r_max, -r_min) of its dominating pair."""
    mechanism = component.mechanism
    if isinstance(getattr(mechanism, "mechanism", None), Gaussian):  # a fixed-size batch or replace-one step
        mechanism = mechanism.mechanism
    if isinstance(mechanism, Gaussian):
        raise UnsupportedError(
            "the pure engine cannot account a Gaussian mechanism: it is not pure epsilon-DP "
            "(its privacy loss is unbounded); use engine='prv' (or 'rdp', 'montecarlo')"
        )
    pair = mechanism.dominating_pair()
    bound = max(float(pair.r_max), -float(pair.r_min))
    if not math.isfinite(bound):
        raise UnsupportedError(
            f"the pure engine cannot account {type(mechanism).__name__}: its privacy loss is unbounded, "
            "so it is not pure epsilon-DP; use engine='prv'"
        )
    return bound


def pure_epsilon(description: Description) -> float:
    """Basic composition of the amplified per-step pure epsilons of ``description``."""
    return float(sum(c.count * amplified_epsilon(step_epsilon(c), c.sampling_rate) for c in flatten(description)))


def _directions(component: Component) -> tuple[str, ...]:
    return ("remove",) if component.symmetric else ("remove", "add")


def _step_delta(loss: PrivacyLoss, epsilon: float) -> float:
    """Exact hockey-stick divergence of one step: Pr_P(L > eps) - e^eps Pr_Q(L > eps)."""
    above_q = float(loss.sf(epsilon, "Q"))
    # e^eps Pr_Q(L > eps) in log space: e^eps alone overflows past eps ~ 709 (a step of
    # pure epsilon 710 raised OverflowError); past e^700 it exceeds Pr_P <= 1 and delta is 0
    exponent = epsilon + math.log(above_q) if above_q > 0.0 else -math.inf
    if exponent > 700.0:
        return 0.0
    return max(float(loss.sf(epsilon, "P")) - math.exp(exponent), 0.0)


def _step_epsilon_at(loss: PrivacyLoss, delta: float, top: float) -> float:
    """A point strictly below the single-step epsilon(delta) (0 if delta(0) <= delta)."""
    if _step_delta(loss, 0.0) <= delta:
        return 0.0
    low, high = 0.0, top
    for _ in range(100):
        mid = 0.5 * (low + high)
        if _step_delta(loss, mid) > delta:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(high, 1.0):
            break
    return low * (1.0 - 1e-9)


def _single_step_lower_epsilon(components: list[Component], delta: float) -> float:
    best = 0.0
    for component in components:
        top = amplified_epsilon(step_epsilon(component), component.sampling_rate)
        for direction in _directions(component):
            loss = component.privacy_loss_distribution(direction)
            best = max(best, min(_step_epsilon_at(loss, delta, top), top))
    return best


def _single_step_lower_delta(components: list[Component], epsilon: float) -> float:
    best = 0.0
    for component in components:
        for direction in _directions(component):
            best = max(best, _step_delta(component.privacy_loss_distribution(direction), epsilon))
    return best


def _reject(options: dict) -> None:
    if options:
        raise ParameterError(f"{sorted(options)[0]} is not an option of the pure engine")


def _accuracy(components: list[Component], lower_rule: str) -> dict:
    return {
        "composition": "basic (sum of per-step pure epsilons)",
        "amplification": AMPLIFICATION,
        "per_step_epsilon": [
            amplified_epsilon(step_epsilon(c), c.sampling_rate) for c in components
        ],
        "counts": [c.count for c in components],
        "lower": lower_rule,
    }


def epsilon(description: Description, delta: float, **options) -> EpsilonResult:
    """``upper`` = basic-composition pure epsilon (valid for every delta); ``lower`` = the
    largest exact single-step epsilon(delta) (see the module docstring)."""
    _reject(options)
    delta = require_probability_open("delta", delta)
    components = flatten(description)
    upper = pure_epsilon(description)
    lower = min(_single_step_lower_epsilon(components, delta), upper)
    return EpsilonResult(
        lower=lower,
        upper=upper,
        estimate=upper,
        delta=delta,
        engine="pure",
        **result_labels(description),
        accuracy={
            **_accuracy(components, "largest single-step epsilon(delta), exact (a sound lower bound)"),
            "delta_used": False,
        },
    )


def delta(description: Description, epsilon: float, **options) -> DeltaResult:
    """``upper`` = 0 at epsilon >= eps_0, else the RR(eps_0) profile (e^{eps_0} - e^eps)/(1 + e^{eps_0})
    (randomised response dominates every eps_0-DP mechanism, Kairouz, Oh, Viswanath 2015)."""
    _reject(options)
    epsilon = require_non_negative("epsilon", epsilon)
    components = flatten(description)
    eps0 = pure_epsilon(description)
    if epsilon >= eps0:
        upper = 0.0
    else:
        # e^{eps0}/(1+e^{eps0}) * (1 - e^{eps - eps0})
        upper = float(1.0 / (1.0 + math.exp(-eps0)) * -math.expm1(epsilon - eps0))
    lower = min(_single_step_lower_delta(components, epsilon), upper)
    return DeltaResult(
        lower=lower,
        upper=upper,
        estimate=upper,
        epsilon=epsilon,
        engine="pure",
        **result_labels(description),
        accuracy={
            **_accuracy(components, "largest single-step delta(epsilon), exact (a sound lower bound)"),
            "pure_epsilon": eps0,
            "upper_rule": "0 at epsilon >= pure epsilon, else the randomised-response profile of the pure epsilon",
        },
    )


def calibrate_laplace_scale_pure(
    target_epsilon: float, sampling_rate: float, steps: int, sensitivity: float = 1.0
) -> CalibrationResult:
    """Smallest Laplace scale whose basic composition with amplification meets ``target_epsilon``.

    Closed form: each step gets eps' = target/steps, the unsubsampled step needs
    eps = log(1 + (e^{eps'} - 1)/q) (the amplification bound of Balle, Barthe, Gaboardi
    2018, inverted), and scale = sensitivity / eps (nudged up by ulps if rounding put the
    recomputed epsilon above the target).
    """
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    q = require_sampling_rate("sampling_rate", sampling_rate)
    steps = require_count("steps", steps)
    sensitivity = require_positive("sensitivity", sensitivity)
    per_step = target_epsilon / steps
    step = unamplified_epsilon(per_step, q)
    if not step > 0.0:
        raise ParameterError(f"target_epsilon / steps = {per_step!r} underflows: no Laplace scale is finite for it")
    scale = sensitivity / step

    def composed(b: float) -> float:
        return steps * amplified_epsilon(sensitivity / b, q)

    value = composed(scale)
    while value > target_epsilon:
        scale = float(np.nextafter(scale, np.inf))
        value = composed(scale)
    return CalibrationResult(
        parameter=scale,
        epsilon=value,
        target_epsilon=target_epsilon,
        delta=0.0,
        rel_tolerance=0.0,
        evaluations=1,
        engine="pure",
        parameter_name="scale",
    )
