"""PRV engine behaviour that the closed-form tests do not reach."""

from __future__ import annotations

import importlib
import math

import pytest

from dpforge.accounting import delta, epsilon
from dpforge.accounting.prv.evaluate import evaluate
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled, PureDP, flatten


def test_default_accuracy_is_met():
    result = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)]), 1e-5)
    assert result.lower <= result.estimate <= result.upper
    assert (result.upper - result.lower) / result.upper <= 1e-3
    assert result.accuracy["achieved"] <= 1e-3
    assert result.engine == "prv" and result.neighbouring == "add_remove"


def test_staged_and_direct_bounds_overlap():
    """Composing in chunks on a finer grid is an independent certified route."""
    components = flatten(Composed([(PoissonSampled(Gaussian(0.8), 0.002), 4000)]))
    direct = evaluate(components, 2e-5, 1e-9)
    staged = evaluate(components, 4e-4, 1e-9, staged=True)
    d_low, d_high = direct.epsilon(1e-5)
    s_low, s_high = staged.epsilon(1e-5)
    assert max(d_low, s_low) <= min(d_high, s_high)
    assert (s_high - s_low) / s_high < 5e-3


def test_heterogeneous_composition_is_order_free():
    first = PoissonSampled(Gaussian(1.0), 0.01)
    second = PoissonSampled(Laplace(2.0), 0.02)
    forward = epsilon(Composed([(first, 300), (second, 100)]), 1e-6)
    backward = epsilon(Composed([(second, 100), (first, 300)]), 1e-6)
    assert max(forward.lower, backward.lower) <= min(forward.upper, backward.upper)


def test_nested_composition_multiplies_counts():
    inner = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 10)])
    nested = epsilon(Composed([(inner, 50)]), 1e-5)
    flat = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 500)]), 1e-5)
    assert max(nested.lower, flat.lower) <= min(nested.upper, flat.upper)


def test_pure_dp_composition_is_exact_on_aligned_grid():
    # T-fold randomised response: epsilon(delta=tiny) approaches T*eps0 from below
    result = epsilon(Composed([(PureDP(0.5), 4)]), 1e-12)
    assert result.upper <= 2.0 + 1e-9
    assert result.lower > 1.9


def test_delta_is_monotone_and_bounded():
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.05), 200)])
    values = [delta(description, eps) for eps in (0.5, 1.0, 2.0, 4.0)]
    for result in values:
        assert 0.0 <= result.lower <= result.upper <= 1.0
    uppers = [r.upper for r in values]
    assert uppers == sorted(uppers, reverse=True)


def test_epsilon_and_delta_are_consistent():
    description = Composed([(PoissonSampled(Gaussian(1.2), 0.02), 500)])
    eps = epsilon(description, 1e-6)
    at_upper = delta(description, eps.upper)
    assert at_upper.lower <= 1e-6 * (1 + 1e-9)
    if eps.lower > 0:
        at_lower = delta(description, eps.lower)
        assert at_lower.upper >= 1e-6 * (1 - 1e-9)


def test_large_epsilon_and_tiny_delta_are_finite():
    big = epsilon(Gaussian(0.1), 1e-5)
    assert math.isfinite(big.upper) and 40 < big.upper < 100
    tiny = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)]), 1e-12)
    assert math.isfinite(tiny.upper) and tiny.lower <= tiny.upper


_SAMPLED = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 10)])


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: epsilon(Gaussian(1.0), 0.0), "delta"),
        (lambda: epsilon(Gaussian(1.0), 1.0), "delta"),
        (lambda: epsilon(Gaussian(1.0), float("nan")), "delta"),
        (lambda: epsilon(Gaussian(1.0), 1e-5, relative_accuracy=0), "relative_accuracy"),
        (lambda: epsilon(Gaussian(1.0), 1e-5, engine="gdp"), "engine"),
        (lambda: delta(Gaussian(1.0), -1.0), "epsilon"),
        (lambda: delta(Gaussian(1.0), float("inf")), "epsilon"),
        (lambda: epsilon("not a mechanism", 1e-5), "description"),
        (lambda: epsilon(Gaussian(1.0), 1e-5, step=-1.0), "step"),
        # a string was a TypeError; -1, 1.5 and NaN were taken as they came
        (lambda: epsilon(_SAMPLED, 1e-5, max_refinements="x"), "max_refinements"),
        (lambda: epsilon(_SAMPLED, 1e-5, max_refinements=-1), "max_refinements"),
        (lambda: epsilon(_SAMPLED, 1e-5, max_refinements=1.5), "max_refinements"),
        (lambda: delta(_SAMPLED, 1.0, max_refinements=float("nan")), "max_refinements"),
    ],
)
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_dominated_direction_is_not_refined_but_bounds_stay_valid():
    """After the probe, a direction whose upper epsilon is below the other's lower is kept
    from the coarse grid; the reported interval must still contain the full answer."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)])
    result = epsilon(description, 1e-5)
    full = evaluate(flatten(description), result.accuracy["grid_step"], 1e-9)
    full_low, full_high = full.epsilon(1e-5)
    assert max(result.lower, full_low) <= min(result.upper, full_high)
    assert result.upper >= full_low


def test_a_dominated_direction_gets_no_staged_lower_chain_at_a_tiny_delta(monkeypatch):
    """At delta = 1e-15 the tilted probe's upper chain for the add direction (eps far
    below the tilt) certifies nothing (+inf), and its staged lower chain was built from
    that: a third of the call for a bound that cannot raise the maximum.  The untilted
    probe's finite upper bound for it now rules it out."""
    components_module = importlib.import_module("dpforge.accounting.prv.components")
    built = []
    original = components_module._chunks

    def spy(component, direction, sizes, *args, **kwargs):
        built.append(direction)
        return original(component, direction, sizes, *args, **kwargs)

    monkeypatch.setattr(components_module, "_chunks", spy)
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-3), 100_000)])
    result = epsilon(description, 1e-15)
    assert result.accuracy["reached"] and result.accuracy["tilted"]
    assert built and set(built) == {"remove"}
    # an independent certified bracket: both chains direct, untilted, at the same step
    full_low, full_high = evaluate(flatten(description), result.accuracy["grid_step"], 1e-20).epsilon(1e-15)
    assert max(result.lower, full_low) <= min(result.upper, full_high)


@pytest.mark.slow
def test_split_chains_bracket_a_fine_pld_upper_bound():
    """A workload narrow enough to be staged (q=1e-4, sigma=0.6): the upper chain is composed
    on one grid and only the lower chain is staged.  dp-accounting's pessimistic PLD at a
    fine step is an independent certified upper bound: our lower must not exceed it, and
    our upper must come within the requested accuracy of it."""
    from dp_accounting.pld import privacy_loss_distribution as pldm

    description = Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 20_000)])
    result = epsilon(description, 1e-5)
    peer_upper = (
        pldm.from_gaussian_mechanism(0.6, sampling_prob=1e-4, value_discretization_interval=1e-5)
        .self_compose(20_000)
        .get_epsilon_for_delta(1e-5)
    )
    assert result.lower <= peer_upper
    assert result.accuracy["reached"]
    assert result.upper <= peer_upper * (1 + 1e-3)


def test_asking_for_more_accuracy_never_returns_a_wider_bracket():
    """A requested accuracy finer than one direct grid can reach used to force staging
    from the start, whose coarse final grid gave [3.290, 4.042] at delta=1e-12 for
    relative_accuracy=1e-7, 650 times wider than the default request's bracket."""
    import warnings

    from dpforge.errors import DpforgeAccuracyWarning

    description = Composed([(PoissonSampled(Gaussian(1.1), 0.004), 10_000)])
    default = epsilon(description, 1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpforgeAccuracyWarning)
        finer = epsilon(description, 1e-12, relative_accuracy=1e-7)
    assert finer.upper - finer.lower <= default.upper - default.lower
    assert max(finer.lower, default.lower) <= min(finer.upper, default.upper)


def test_many_distinct_atoms_do_not_shrink_the_step_far():
    """Laplace phases at 40 scales put 80 atoms on the loss axis; no step aligns them all,
    and the least misaligned of 4,096 candidates was the finest (1.6e-4 -> 2.9e-6, a 56x
    finer probe; with 60 Gaussian phases at delta = 1e-10, 154 s).  Where nothing
    aligns, the step shrinks by at most 2x; where one step aligns every atom (one scale),
    it is still found."""
    from dpforge.accounting.prv.components import atom_aligned_step

    many = flatten(Composed([(PoissonSampled(Laplace(2 + i / 40), 0.01), 5) for i in range(40)]))
    for step in (1e-3, 1.6e-4):
        aligned = atom_aligned_step(many, "remove", step)
        assert step / 2 <= aligned <= step
    one = flatten(Composed([(PoissonSampled(Laplace(2.0), 0.01), 5)]))
    aligned = atom_aligned_step(one, "remove", 1e-4)
    atoms = sorted(one[0].privacy_loss_distribution("remove").atoms)
    gap = (atoms[-1] - atoms[0]) / aligned
    assert abs(gap - round(gap)) < 1e-6 and aligned > 0.9e-4
    result = epsilon(Composed([(PoissonSampled(Laplace(2 + i / 40), 0.01), 5) for i in range(40)]), 1e-5)
    assert result.accuracy["reached"] and result.accuracy["grid_size"] < 400_000
