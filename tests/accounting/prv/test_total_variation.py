"""eps = 0 from the total variation bound 1 - prod (1 - TV_i): closed forms, the coupling
bound against the grids' certified delta(0), and where the shortcut applies."""

from __future__ import annotations

import mpmath as mp
import pytest

from dpforge.accounting import delta as delta_of
from dpforge.accounting import epsilon
from dpforge.accounting.prv.total_variation import one_step_total_variation, total_variation_bound
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled, flatten


def _component(mechanism, rate, steps=1):
    return flatten(Composed([(PoissonSampled(mechanism, rate), steps)]))[0]


@pytest.mark.parametrize("sigma, rate", [(0.3, 1e-6), (1.0, 1e-3), (5.0, 1.0), (0.5, 0.5)])
def test_gaussian_step_total_variation_is_q_erf(sigma, rate):
    """TV(N(0, s^2), N(1, s^2)) = erf(1 / (2 sqrt(2) s)); subsampling scales it by q."""
    exact = mp.mpf(rate) * mp.erf(1 / (2 * mp.sqrt(2) * mp.mpf(sigma)))
    value = one_step_total_variation(_component(Gaussian(sigma), rate))
    assert exact <= value <= exact * (1 + 1e-9) + 1e-14


@pytest.mark.parametrize("scale, rate", [(1.0, 1e-3), (10.0, 1.0), (0.3, 0.2)])
def test_laplace_step_total_variation_is_q_one_minus_exp(scale, rate):
    """TV(Lap(0, b), Lap(1, b)) = 1 - e^{-1/(2b)}."""
    exact = mp.mpf(rate) * -mp.expm1(-1 / (2 * mp.mpf(scale)))
    value = one_step_total_variation(_component(Laplace(scale), rate))
    assert exact <= value <= exact * (1 + 1e-9) + 1e-14


@pytest.mark.parametrize(
    "description",
    [
        Composed([(PoissonSampled(Gaussian(1.0), 1e-3), 100)]),
        Composed([(PoissonSampled(Gaussian(10.0), 1.0), 3)]),
        Composed([(PoissonSampled(Laplace(0.5), 0.01), 20)]),
    ],
)
def test_bound_is_above_the_certified_delta_at_zero(description):
    """The coupling bound sits above delta(0) of the composition (the grid's certified
    lower end); for one step it is delta(0) itself."""
    bound = total_variation_bound(flatten(description))
    assert delta_of(description, 0.0).lower <= bound
    one = flatten(description)[0]
    single = Composed([(one.mechanism, 1)]) if one.sampling_rate == 1.0 else Composed([(PoissonSampled(one.mechanism, one.sampling_rate), 1)])
    step = delta_of(single, 0.0)
    assert step.lower <= one_step_total_variation(one) <= step.upper * (1 + 1e-6) + 1e-14


def test_epsilon_is_zero_exactly_where_delta_covers_the_bound():
    description = Composed([(PoissonSampled(Gaussian(1.0), 1e-3), 100)])
    bound = total_variation_bound(flatten(description))
    shortcut = epsilon(description, 1.01 * bound)
    assert (shortcut.lower, shortcut.upper) == (0.0, 0.0)
    assert shortcut.accuracy["reached"] and shortcut.accuracy["total_variation"] == bound
    # below delta(0) the grids answer, with a positive eps
    below = 0.5 * delta_of(description, 0.0).lower
    graded = epsilon(description, below)
    assert graded.accuracy["grid_size"] > 0 and graded.lower > 0
    # a fixed grid is used as given
    assert epsilon(description, 1.01 * bound, step=1e-3).accuracy["grid_step"] == 1e-3


def test_heterogeneous_components_multiply_their_agreements():
    components = flatten(
        Composed([(PoissonSampled(Gaussian(1.0), 1e-3), 100), (PoissonSampled(Laplace(2.0), 1e-2), 10)])
    )
    agree = 1.0
    for component in components:
        agree *= (1 - one_step_total_variation(component)) ** component.count
    assert total_variation_bound(components) == pytest.approx(1 - agree, rel=1e-12)
