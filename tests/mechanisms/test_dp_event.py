"""Conversion to and from dp_accounting's DpEvent vocabulary (mechanisms/dp_event.py)."""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpforge.accounting import epsilon as dpforge_epsilon
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled, PureDP
from dpforge.mechanisms.dp_event import from_dp_event, to_dp_event

pytest.importorskip("dp_accounting")
dp_event = pytest.importorskip("dp_accounting.dp_event")

FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------
def assert_equivalent(a, b, rel=1e-12):
    """Structural equality; PureDP epsilons (which pass through 2/(1+e^eps)) up to ``rel``."""
    assert type(a) is type(b), f"{type(a).__name__} != {type(b).__name__}"
    if isinstance(a, PureDP):
        assert math.isclose(a.epsilon, b.epsilon, rel_tol=rel, abs_tol=1e-15), (a, b)
    elif isinstance(a, PoissonSampled):
        assert a.sampling_rate == b.sampling_rate
        assert_equivalent(a.mechanism, b.mechanism, rel)
    elif isinstance(a, Composed):
        assert len(a.parts) == len(b.parts), (a, b)
        for (da, ca), (db, cb) in zip(a.parts, b.parts):
            assert ca == cb
            assert_equivalent(da, db, rel)
    else:
        assert a == b


def assert_events_equivalent(a, b, rel=1e-12):
    """Equality of DpEvents; randomized-response noise parameters up to ``rel``."""
    assert type(a) is type(b), f"{type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dp_event.RandomizedResponseDpEvent):
        assert a.num_buckets == b.num_buckets
        assert math.isclose(a.noise_parameter, b.noise_parameter, rel_tol=rel)
    elif isinstance(a, dp_event.PoissonSampledDpEvent):
        assert a.sampling_probability == b.sampling_probability
        assert_events_equivalent(a.event, b.event, rel)
    elif isinstance(a, dp_event.SelfComposedDpEvent):
        assert a.count == b.count
        assert_events_equivalent(a.event, b.event, rel)
    elif isinstance(a, dp_event.ComposedDpEvent):
        assert len(a.events) == len(b.events)
        for x, y in zip(a.events, b.events):
            assert_events_equivalent(x, y, rel)
    else:
        assert a == b


positive = st.floats(min_value=0.05, max_value=50.0, allow_nan=False, allow_infinity=False)
rates = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False, exclude_min=False)
mechanisms = st.one_of(
    st.builds(Gaussian, positive),
    st.builds(Laplace, positive),
    st.builds(PureDP, st.floats(min_value=0.0, max_value=30.0, allow_nan=False)),
)
sampled = st.one_of(mechanisms, st.builds(PoissonSampled, mechanisms, rates))
descriptions = st.recursive(
    sampled,
    lambda children: st.builds(
        Composed, st.lists(st.tuples(children, st.integers(min_value=1, max_value=10_000)), min_size=1, max_size=4)
    ),
    max_leaves=8,
)


# ----------------------------------------------------------------------------------------
# the individual mappings
# ----------------------------------------------------------------------------------------
def test_gaussian_maps_to_gaussian_event():
    assert to_dp_event(Gaussian(1.3)) == dp_event.GaussianDpEvent(noise_multiplier=1.3)
    assert from_dp_event(dp_event.GaussianDpEvent(1.3)) == Gaussian(1.3)


def test_gaussian_sensitivity_is_folded_into_an_equivalent_description():
    # noise_multiplier is std/sensitivity in both libraries; the pair depends on it alone
    original = Gaussian(1.3, sensitivity=4.0)
    back = from_dp_event(to_dp_event(original))
    assert back == Gaussian(1.3)
    assert back.dominating_pair() == original.dominating_pair()


def test_laplace_maps_scale_over_sensitivity():
    assert to_dp_event(Laplace(2.0)) == dp_event.LaplaceDpEvent(noise_multiplier=2.0)
    assert to_dp_event(Laplace(3.0, sensitivity=0.5)) == dp_event.LaplaceDpEvent(noise_multiplier=6.0)
    original = Laplace(3.0, sensitivity=0.5)
    back = from_dp_event(to_dp_event(original))
    assert back == Laplace(6.0)
    assert back.dominating_pair() == original.dominating_pair()


@pytest.mark.parametrize("eps", [0.0, 1e-8, 0.1, 1.0, 5.0, 30.0, 700.0])
def test_pure_dp_maps_to_binary_randomized_response(eps):
    event = to_dp_event(PureDP(eps))
    assert isinstance(event, dp_event.RandomizedResponseDpEvent)
    assert event.num_buckets == 2
    # dp_accounting's RR: truthful with probability 1 - p + p/k; for k = 2 that must be e^eps/(1+e^eps)
    p = event.noise_parameter
    assert 0.0 < p <= 1.0
    assert math.isclose(1.0 - p / 2.0, 1.0 / (1.0 + math.exp(-eps)), rel_tol=1e-14)
    assert math.isclose(p / 2.0, 1.0 / (1.0 + math.exp(eps)), rel_tol=1e-12)
    back = from_dp_event(event)
    assert math.isclose(back.epsilon, eps, rel_tol=1e-12, abs_tol=1e-15)


def test_pure_dp_with_too_large_epsilon_is_refused():
    with pytest.raises(ValueError, match="RandomizedResponseDpEvent"):
        to_dp_event(PureDP(800.0))


@pytest.mark.parametrize("eps0", [0.1, 1.0, 3.0])
def test_randomized_response_gives_the_same_epsilon_in_both_libraries(dpa, eps0):
    """The mapping is checked numerically: dp_accounting's PLD of the RR event (replace-one,
    the only relation it supports for RR, under which binary RR's pair is exactly
    dpforge's PureDP pair) gives the epsilon dpforge brackets."""
    accountant = dpa.pld.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-5)
    accountant.compose(to_dp_event(PureDP(eps0)))
    for delta in (1e-2, 1e-6):
        theirs = accountant.get_epsilon(delta)
        ours = dpforge_epsilon(PureDP(eps0), delta)
        # exact: delta(eps) = Pr_P(L=eps0) (1 - e^{eps-eps0}) -> eps = eps0 + log(1 - delta (1 + e^-eps0))
        exact = eps0 + math.log1p(-delta * (1.0 + math.exp(-eps0)))
        assert ours.lower <= exact <= ours.upper
        # dp_accounting's pessimistic grid puts the loss at most one step (1e-5) too high
        assert exact - 1e-9 <= theirs <= exact + 1e-5 + 1e-9


def test_poisson_sampled_maps_to_poisson_sampled_event():
    d = PoissonSampled(Gaussian(0.9), 0.01)
    e = to_dp_event(d)
    assert e == dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(0.9))
    assert from_dp_event(e) == d
    nested = PoissonSampled(PoissonSampled(Laplace(2.0), 0.5), 0.2)
    assert from_dp_event(to_dp_event(nested)) == nested


def test_composed_maps_counts_to_self_composed_events():
    d = Composed([(PoissonSampled(Gaussian(1.1), 0.01), 1000), (Laplace(2.0), 1), (PureDP(0.5), 3)])
    e = to_dp_event(d)
    assert isinstance(e, dp_event.ComposedDpEvent)
    first, second, third = e.events
    assert first == dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 1000
    )
    assert second == dp_event.LaplaceDpEvent(2.0)  # count 1 -> the bare event
    assert isinstance(third, dp_event.SelfComposedDpEvent) and third.count == 3
    assert_equivalent(from_dp_event(e), d)


def test_single_part_composition_stays_a_composition():
    d = Composed([(Gaussian(2.0), 1)])
    e = to_dp_event(d)
    assert e == dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(2.0)])
    assert from_dp_event(e) == d


def test_nested_compositions_round_trip():
    inner = Composed([(Gaussian(1.0), 2), (PoissonSampled(Laplace(1.5), 0.3), 7)])
    d = Composed([(inner, 3), (PureDP(0.2), 1), (Composed([(Gaussian(4.0), 1)]), 1)])
    assert_equivalent(from_dp_event(to_dp_event(d)), d)


@FEW
@given(descriptions)
def test_round_trip_description_event_description(d):
    assert_equivalent(from_dp_event(to_dp_event(d)), d)


@pytest.mark.parametrize(
    "event",
    [
        dp_event.GaussianDpEvent(0.7),
        dp_event.LaplaceDpEvent(3.0),
        dp_event.RandomizedResponseDpEvent(0.25, 2),
        dp_event.PoissonSampledDpEvent(0.004, dp_event.GaussianDpEvent(0.8)),
        dp_event.ComposedDpEvent(
            [
                dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.LaplaceDpEvent(1.0)), 50),
                dp_event.GaussianDpEvent(3.0),
                dp_event.ComposedDpEvent([dp_event.RandomizedResponseDpEvent(0.5, 2)]),
            ]
        ),
    ],
    ids=lambda e: type(e).__name__,
)
def test_round_trip_event_description_event(event):
    assert_events_equivalent(to_dp_event(from_dp_event(event)), event)


# ----------------------------------------------------------------------------------------
# what from_dp_event accepts beyond the canonical form
# ----------------------------------------------------------------------------------------
def test_top_level_self_composed_event():
    e = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), 12)
    assert from_dp_event(e) == Composed([(Gaussian(1.0), 12)])


def test_nested_self_composed_events_multiply_through_flatten():
    from dpforge.mechanisms import flatten

    e = dp_event.SelfComposedDpEvent(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), 4), 3)
    d = from_dp_event(e)
    assert d == Composed([(Composed([(Gaussian(1.0), 4)]), 3)])
    [component] = flatten(d)
    assert component.count == 12 and component.mechanism == Gaussian(1.0)


def test_nested_composed_events():
    e = dp_event.ComposedDpEvent(
        [dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0), dp_event.LaplaceDpEvent(2.0)]), dp_event.GaussianDpEvent(1.0)]
    )
    assert from_dp_event(e) == Composed([(Composed([(Gaussian(1.0), 1), (Laplace(2.0), 1)]), 1), (Gaussian(1.0), 1)])


def test_no_op_events_are_skipped():
    e = dp_event.ComposedDpEvent(
        [
            dp_event.NoOpDpEvent(),
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), 5),
            dp_event.SelfComposedDpEvent(dp_event.NoOpDpEvent(), 5),
            dp_event.ComposedDpEvent([dp_event.NoOpDpEvent()]),
            dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0), 0),
            dp_event.PoissonSampledDpEvent(0.0, dp_event.GaussianDpEvent(1.0)),
            dp_event.RandomizedResponseDpEvent(0.3, 1),
        ]
    )
    assert from_dp_event(e) == Composed([(Gaussian(1.0), 5)])


@pytest.mark.parametrize(
    "event",
    [
        dp_event.NoOpDpEvent(),
        dp_event.ComposedDpEvent([]),
        dp_event.ComposedDpEvent([dp_event.NoOpDpEvent(), dp_event.SelfComposedDpEvent(dp_event.NoOpDpEvent(), 3)]),
        dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), 0),
    ],
    ids=["noop", "empty", "only-noops", "count-0"],
)
def test_an_event_of_only_no_ops_is_an_error(event):
    with pytest.raises(ValueError, match="no private release"):
        from_dp_event(event)


# ----------------------------------------------------------------------------------------
# what is refused
# ----------------------------------------------------------------------------------------
UNSUPPORTED = [
    dp_event.NonPrivateDpEvent(),
    dp_event.UnsupportedDpEvent(),
    dp_event.SampledWithReplacementDpEvent(1000, 10, dp_event.GaussianDpEvent(1.0)),
    dp_event.SingleEpochTreeAggregationDpEvent(1.0, 10),
    dp_event.ZCDpEvent(0.5),
    dp_event.DiscreteLaplaceDpEvent(0.5, 1),
    dp_event.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]),
    dp_event.RepeatAndSelectDpEvent(dp_event.GaussianDpEvent(1.0), 3.0, 1.0),
    dp_event.TruncatedSubsampledGaussianDpEvent(1000, 0.01, 20, 1.0),
]


@pytest.mark.parametrize("event", UNSUPPORTED, ids=lambda e: type(e).__name__)
def test_unsupported_events_raise_naming_the_type(event):
    name = type(event).__name__
    with pytest.raises(ValueError, match=name):
        from_dp_event(event)
    # also when buried inside a composition
    with pytest.raises(ValueError, match=name):
        from_dp_event(
            dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0), dp_event.SelfComposedDpEvent(event, 2)])
        )


@pytest.mark.parametrize(
    "event, pattern",
    [
        (dp_event.RandomizedResponseDpEvent(0.3, 3), "num_buckets"),
        (dp_event.RandomizedResponseDpEvent(0.0, 2), "noise_parameter"),
        (dp_event.RandomizedResponseDpEvent(1.5, 2), "noise_parameter"),
        (dp_event.GaussianDpEvent(0.0), "GaussianDpEvent.noise_multiplier"),
        (dp_event.LaplaceDpEvent(-1.0), "LaplaceDpEvent.noise_multiplier"),
        (dp_event.GaussianDpEvent(float("nan")), "noise_multiplier"),
        (dp_event.PoissonSampledDpEvent(1.5, dp_event.GaussianDpEvent(1.0)), "sampling_rate"),
        (
            dp_event.PoissonSampledDpEvent(0.1, dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0)])),
            "PoissonSampledDpEvent of ComposedDpEvent",
        ),
        (dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(1.0), -2), "count"),
    ],
)
def test_invalid_parameters_are_refused(event, pattern):
    with pytest.raises(ValueError, match=pattern):
        from_dp_event(event)


def test_non_events_and_non_descriptions_are_refused():
    with pytest.raises(ValueError, match="DpEvent"):
        from_dp_event(Gaussian(1.0))
    with pytest.raises(ValueError, match="GaussianDpEvent"):
        to_dp_event(dp_event.GaussianDpEvent(1.0))
    with pytest.raises(ValueError, match="str"):
        to_dp_event("gaussian")


def test_missing_dp_accounting_gives_an_install_hint(monkeypatch):
    # the module itself must not need dp_accounting at import time
    for name in [m for m in sys.modules if m == "dp_accounting" or m.startswith("dp_accounting.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # makes `import dp_accounting` fail
    import importlib

    import dpforge.mechanisms.dp_event as module

    module = importlib.reload(module)
    with pytest.raises(ImportError, match="pip install dp-accounting"):
        module.to_dp_event(Gaussian(1.0))
    with pytest.raises(ImportError, match="pip install dp-accounting"):
        module.from_dp_event(object())


# ----------------------------------------------------------------------------------------
# dp_accounting's PLD accountant on to_dp_event(d) agrees with dpforge's bounds
# ----------------------------------------------------------------------------------------
PLD_CASES = [
    (Composed([(PoissonSampled(Gaussian(1.0), 0.02), 200)]), 1e-5),
    (Composed([(PoissonSampled(Gaussian(2.0), 0.1), 50), (Gaussian(5.0), 3)]), 1e-6),
    (Composed([(PoissonSampled(Laplace(1.0), 0.05), 40)]), 1e-6),
    (Composed([(Laplace(2.0), 5), (PoissonSampled(Gaussian(0.8), 0.01), 100)]), 1e-7),
    (Gaussian(1.5), 1e-5),
]


def _count_steps(d) -> int:
    from dpforge.mechanisms import flatten

    return sum(c.count for c in flatten(d))


@pytest.mark.parametrize("description, delta", PLD_CASES, ids=[f"case{i}" for i in range(len(PLD_CASES))])
def test_dp_accounting_pld_epsilon_lies_in_dpforge_bounds(dpa, description, delta):
    """dp_accounting's PLD accountant (pessimistic connect-the-dots, add-or-remove) is an
    upper bound on the true epsilon, so it must be >= dpforge.lower (only float round-off
    allowed).  Its own discretisation error is at most one grid step h per composed
    mechanism (every per-step loss is placed at most h above its true value), so it must
    be <= dpforge.upper + T h."""
    h = 1e-4
    accountant = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=h)
    accountant.compose(to_dp_event(description))
    theirs = accountant.get_epsilon(delta)
    ours = dpforge_epsilon(description, delta)
    steps = _count_steps(description)
    assert ours.lower - 1e-9 * max(1.0, ours.lower) <= theirs, (theirs, ours)
    assert theirs <= ours.upper + steps * h, (theirs, ours, steps * h)
