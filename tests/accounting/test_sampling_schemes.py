"""Engines on replace-one, fixed-size-batch and shuffled descriptions, against independent
references: closed forms at q = 1, dp-accounting at fine discretisation, Monte-Carlo."""

import math

import numpy as np
import pytest
from scipy import optimize, special

from dpforge.accounting import api
from dpforge.errors import UnsupportedError
from dpforge.mechanisms import (
    Composed,
    Gaussian,
    Laplace,
    PoissonSampled,
    PureDP,
    SampledWithoutReplacement,
    Shuffled,
    WithRelation,
)

DELTA = 1e-5


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Closed form of the Gaussian pair N(mu,1) vs N(0,1) (Balle & Wang 2018, Thm. 8)."""

    def gap(eps):
        return special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2) - delta

    return optimize.brentq(gap, 0.0, 200.0, xtol=1e-13)


def contains(result, value, slack=1e-9):
    return result.lower - slack * max(1.0, value) <= value <= result.upper + slack * max(1.0, value)


@pytest.mark.parametrize("sigma, steps", [(2.0, 10), (0.9, 3)])
def test_q1_closed_forms_replace_one_and_full_batches(sigma, steps):
    expected = gaussian_epsilon(2.0 * math.sqrt(steps) / sigma, DELTA)  # twice the sensitivity
    for description in (
        WithRelation(Composed([(Gaussian(sigma), steps)])),
        Composed([(SampledWithoutReplacement(Gaussian(sigma), 50, 50), steps)]),
        WithRelation(Composed([(SampledWithoutReplacement(Gaussian(sigma), 50, 50), steps)])),
    ):
        result = api.epsilon(description, DELTA)
        assert contains(result, expected)
        assert result.relation == (description.relation if isinstance(description, WithRelation) else "add-remove")


def test_q1_pure_dp_replace_one_is_group_privacy():
    result = api.epsilon(WithRelation(Composed([(PureDP(0.5), 4)])), DELTA, engine="pure")
    assert result.upper == pytest.approx(4.0)


GRID = [(1.0, 0.01, 1000), (2.0, 0.1, 100), (0.8, 0.05, 300)]


@pytest.mark.slow
@pytest.mark.parametrize("sigma, q, steps", GRID)
def test_poisson_replace_one_matches_dp_accounting_pld(sigma, q, steps):
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pld

    reference = (
        pld.from_gaussian_mechanism(
            sigma,
            sampling_prob=q,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
            value_discretization_interval=1e-4,
        )
        .self_compose(steps)
        .get_epsilon_for_delta(DELTA)
    )
    result = api.epsilon(WithRelation(Composed([(PoissonSampled(Gaussian(sigma), q), steps)])), DELTA)
    # dp-accounting's pessimistic PLD is an upper estimate at its discretisation
    assert result.lower <= reference * (1 + 1e-6)
    assert abs(reference - result.upper) <= 2e-3 * result.upper
    assert result.relation == "replace-one" and result.sampling == "poisson"


@pytest.mark.slow
@pytest.mark.parametrize("sigma, batch, size, steps", [(1.0, 256, 60000, 2000), (1.5, 1000, 50000, 500), (3.0, 500, 1000, 50)])
def test_fixed_size_batches_against_dp_accounting(sigma, batch, size, steps):
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event
    from dp_accounting.pld import privacy_loss_distribution as pld

    relation = dp_accounting.NeighboringRelation
    q = batch / size
    description = WithRelation(Composed([(SampledWithoutReplacement(Gaussian(sigma), batch, size), steps)]))
    result = api.epsilon(description, DELTA)
    # upper: never above dp-accounting's RDP accountant for the same event (Wang-Balle-Kasiviswanathan)
    rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation.REPLACE_ONE)
    rdp.compose(dp_event.SelfComposedDpEvent(dp_event.SampledWithoutReplacementDpEvent(size, batch, dp_event.GaussianDpEvent(sigma / 2)), steps))
    assert result.upper <= rdp.get_epsilon(DELTA)
    assert api.epsilon(description, DELTA, engine="rdp").upper >= result.upper
    # lower: the realised worst case (others +g, the record -g) is the add-or-remove
    # subsampled pair at twice the sensitivity, which dp-accounting's PLD computes
    realised = (
        pld.from_gaussian_mechanism(sigma / 2, sampling_prob=q, value_discretization_interval=1e-4)
        .self_compose(steps)
        .get_epsilon_for_delta(DELTA)
    )
    assert result.lower <= realised * (1 + 1e-6)
    assert result.lower >= realised * (1 - 3e-3)
    assert result.sampling == "without-replacement"
    # under add-remove the same certified pair holds (a fixed batch turns an addition into a replacement)
    plain = api.epsilon(description.description, DELTA)
    assert plain.upper == result.upper and plain.relation == "add-remove"


def test_fixed_size_batch_single_step_profile_closed_form():
    """One step: delta(eps) = Pr_P'(R > eps) - e^eps Pr_Q(R > eps) for the mixture
    (1-q) N(0,1) + q N(mu,1) vs N(0,1), mu = 2/sigma (Zhu, Dong, Wang 2022, Thm. 10)."""
    sigma, q = 1.0, 0.2
    mu = 2.0 / sigma
    for eps in (0.1, 0.5, 1.0):
        r_star = math.log((math.exp(eps) - (1 - q)) / q)
        x = (r_star + mu * mu / 2) / mu
        expected = (1 - q) * special.ndtr(-x) + q * special.ndtr(mu - x) - math.exp(eps) * special.ndtr(-x)
        result = api.delta(SampledWithoutReplacement(Gaussian(sigma), 20, 100), eps)
        assert result.upper >= expected * (1 - 1e-9)
        assert result.upper <= expected * (1 + 1e-2) + 1e-12


@pytest.mark.slow
@pytest.mark.parametrize(
    "description",
    [
        WithRelation(Composed([(PoissonSampled(Gaussian(1.0), 0.1), 20)])),
        Composed([(SampledWithoutReplacement(Gaussian(2.0), 10, 100), 20)]),
        WithRelation(Composed([(SampledWithoutReplacement(Laplace(2.0), 10, 100), 20)])),
    ],
)
def test_montecarlo_brackets_overlap_prv(description):
    mc = api.epsilon(description, 1e-2, engine="montecarlo", samples=200_000, seed=3)
    prv = api.epsilon(description, 1e-2)
    assert mc.lower <= prv.upper and prv.lower <= mc.upper


def test_rdp_and_pure_engines_account_new_steps():
    description = WithRelation(Composed([(SampledWithoutReplacement(PureDP(1.0), 10, 100), 3)]))
    pure = api.epsilon(description, DELTA, engine="pure")
    # amplification without replacement, replace-one (Balle, Barthe, Gaboardi 2018): log(1 + q(e^{2 eps} - 1))
    assert pure.upper == pytest.approx(3 * math.log1p(0.1 * math.expm1(2.0)))
    prv = api.epsilon(description, DELTA)
    assert prv.upper <= pure.upper * (1 + 1e-9)
    rdp = api.epsilon(description, DELTA, engine="rdp")
    assert rdp.upper >= prv.lower and "Wang-Balle-Kasiviswanathan" in rdp.accuracy["bounds"][0]


def test_shuffled_gets_only_a_lower_bound():
    epoch = Shuffled(Gaussian(1.0), 100, 10000)
    result = api.epsilon(Composed([(epoch, 5)]), DELTA)
    assert math.isinf(result.upper) and result.sampling == "shuffled"
    assert "NOT an upper bound" in result.accuracy["note"]
    poisson = api.epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 500)]), DELTA)
    assert result.accuracy["poisson_upper"] == pytest.approx(poisson.upper)
    # sanity: an epoch uses each record once, so it is no worse than one Gaussian release
    assert 0 < result.lower <= gaussian_epsilon(math.sqrt(5.0), DELTA)
    assert '"epsilon_upper": "inf"' in result.to_json()
    with pytest.raises(UnsupportedError, match="lower bound"):
        api.epsilon(Composed([(epoch, 5)]), DELTA, engine="rdp")
    # replace-one: the no-amplification bound (one release per epoch at twice the sensitivity)
    replace = api.epsilon(WithRelation(Composed([(epoch, 5)])), DELTA)
    assert replace.upper >= gaussian_epsilon(2.0 * math.sqrt(5.0), DELTA) * (1 - 1e-9)
    assert replace.upper <= gaussian_epsilon(2.0 * math.sqrt(5.0), DELTA) * (1 + 2e-3)
    assert replace.lower == pytest.approx(result.lower, rel=1e-9)
    delta = api.delta(Composed([(epoch, 5)]), 1.0)
    assert delta.upper == 1.0 and 0 < delta.lower < 1


def test_shuffled_single_batch_epochs_are_gaussian():
    """B = n: one step per epoch, the max test is the Gaussian pair itself."""
    result = api.epsilon(Composed([(Shuffled(Gaussian(1.5), 64, 64), 4)]), DELTA)
    expected = gaussian_epsilon(2.0 / 1.5, DELTA)
    assert result.lower <= expected * (1 + 1e-9)
    assert result.lower >= expected * (1 - 2e-3)


@pytest.mark.slow
def test_shuffled_lower_bound_montecarlo_agrees():
    description = Composed([(Shuffled(Gaussian(1.0), 10, 100), 3)])
    prv = api.epsilon(description, 1e-2)
    mc = api.epsilon(description, 1e-2, engine="montecarlo", samples=200_000, seed=5)
    assert abs(mc.lower - prv.lower) <= 0.05 * prv.lower


def test_calibration_over_fixed_size_batches_verifies():
    from dpforge.accounting.calibrate import calibrate

    def make(sigma):
        return WithRelation(Composed([(SampledWithoutReplacement(Gaussian(sigma), 100, 10_000), 500)]))

    result = calibrate(make, 2.0, DELTA, parameter_name="noise_multiplier")
    assert api.epsilon(make(result.parameter), DELTA).upper <= 2.0 * (1 + 1e-9)
    # more noise than Poisson sampling needs for the same target under the same relation
    poisson = calibrate(
        lambda s: WithRelation(Composed([(PoissonSampled(Gaussian(s), 0.01), 500)])), 2.0, DELTA
    )
    assert result.parameter > poisson.parameter


@pytest.mark.parametrize("eps0, delta", [(1.0, 0.1), (0.5, 1e-3), (2.0, 0.2)])
def test_replace_one_pure_dp_lower_is_below_the_group_privacy_bound(eps0, delta):
    """An epsilon-DP step under replace-one is bounded by group privacy (trade-off
    1 - (1-f)o(1-f), Dong, Roth, Su 2022): delta(e) <= (e^{2 eps} - e^{e}) / (e^eps + e^{2 eps}),
    so the true epsilon at delta is at most log(e^{2 eps} - delta (e^eps + e^{2 eps})).  The
    reported lower bound must not exceed it (PureDP(2 eps)'s lower end did)."""
    import math

    from dpforge.accounting import epsilon
    from dpforge.mechanisms import PureDP, WithRelation

    result = epsilon(WithRelation(PureDP(eps0), "replace-one"), delta)
    group_bound = math.log(math.exp(2 * eps0) - delta * (math.exp(eps0) + math.exp(2 * eps0)))
    assert result.lower <= group_bound <= result.upper
