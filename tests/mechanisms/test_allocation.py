"""Group-wise clipping noise allocation and the adaptive-threshold budget split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpforge.accounting import epsilon
from dpforge.mechanisms.allocation import (
    allocate_noise,
    effective_noise_multiplier,
    geometric_threshold_update,
    gradient_noise_multiplier,
)
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled

THRESHOLDS = (0.5, 1.0, 2.0, 0.1)


@pytest.mark.parametrize("strategy", ["global", "equal_budget", "weighted"])
def test_allocation_meets_the_target_effective_multiplier(strategy):
    allocation = allocate_noise(1.3, THRESHOLDS, strategy)
    assert allocation.noise_multiplier == pytest.approx(1.3, rel=1e-12)
    assert effective_noise_multiplier(THRESHOLDS, allocation.noise_stds) == pytest.approx(1.3, rel=1e-12)
    assert sum(allocation.shares) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("strategy", ["global", "equal_budget", "weighted"])
def test_effective_epsilon_equals_the_per_group_noises_accounted_directly(strategy):
    """Without subsampling the K group releases compose to exactly one Gaussian
    mechanism; the PRV engine on the K separate Gaussians must agree with the effective one."""
    allocation = allocate_noise(2.0, THRESHOLDS, strategy)
    per_group = Composed([(Gaussian(s / c), 1) for s, c in zip(allocation.noise_stds, THRESHOLDS)])
    direct = epsilon(Composed([(per_group, 50)]), 1e-6)
    effective = epsilon(Composed([(allocation.mechanism, 50)]), 1e-6)
    assert direct.lower <= effective.upper and effective.lower <= direct.upper
    assert direct.upper == pytest.approx(effective.upper, rel=2e-3)


def test_strategies_differ_as_derived():
    sigma, c = 1.0, np.array(THRESHOLDS)
    flat = allocate_noise(sigma, THRESHOLDS, "global")
    assert np.allclose(flat.noise_stds, sigma * math.sqrt(np.sum(c**2)))
    equal = allocate_noise(sigma, THRESHOLDS, "equal_budget")
    assert np.allclose(equal.shares, 0.25) and np.allclose(equal.noise_stds, sigma * 2.0 * c)
    chosen = allocate_noise(sigma, THRESHOLDS, "weighted", shares=(0.1, 0.2, 0.3, 0.4))
    assert np.allclose(chosen.shares, (0.1, 0.2, 0.3, 0.4))


def test_default_weighted_shares_minimise_total_noise_energy():
    sizes = np.array([10.0, 1000.0, 50.0, 5.0])
    best = allocate_noise(1.0, THRESHOLDS, "weighted", group_sizes=sizes)
    energy = float(np.sum(sizes * np.square(best.noise_stds)))
    rng = np.random.default_rng(0)
    for _ in range(200):
        shares = rng.dirichlet(np.ones(4))
        other = allocate_noise(1.0, THRESHOLDS, "weighted", shares=shares / shares.sum())
        assert np.sum(sizes * np.square(other.noise_stds)) >= energy * (1 - 1e-12)


def test_budget_split_spends_exactly_the_budget():
    """Gradient at z plus K centred counts (sensitivity 1/2, noise sigma_b, i.e. Gaussian
    mechanisms with noise multiplier 2 sigma_b) compose to Gaussian(sigma)."""
    sigma, sigma_b, groups = 1.1, 5.0, 3
    z = gradient_noise_multiplier(sigma, sigma_b, groups)
    assert z > sigma
    assert z**-2 + groups * (2 * sigma_b) ** -2 == pytest.approx(sigma**-2, rel=1e-12)
    step = Composed([(Gaussian(z), 1), (Gaussian(2 * sigma_b), groups)])
    joint = epsilon(Composed([(step, 20)]), 1e-5)
    target = epsilon(Composed([(Gaussian(sigma), 20)]), 1e-5)
    assert joint.upper == pytest.approx(target.upper, rel=2e-3)
    # with subsampling the effective mechanism is what is accounted
    assert epsilon(Composed([(PoissonSampled(Gaussian(z), 0.01), 100)]), 1e-5).upper < epsilon(
        Composed([(PoissonSampled(Gaussian(sigma), 0.01), 100)]), 1e-5
    ).upper


def test_budget_split_refuses_when_counts_use_the_budget():
    with pytest.raises(ValueError, match="leaves no privacy budget"):
        gradient_noise_multiplier(1.0, 0.5, groups=1)  # sigma_b must exceed 0.5
    with pytest.raises(ValueError, match="leaves no privacy budget"):
        gradient_noise_multiplier(1.0, 1.0, groups=4)  # must exceed sqrt(4)/2 = 1
    assert gradient_noise_multiplier(1.0, 1.0001, groups=4) > 1.0


def test_geometric_update_moves_towards_the_quantile():
    counts = np.array([20.0, -20.0])  # centred counts over an expected batch of 50
    updated = geometric_threshold_update([1.0, 1.0], counts, 50.0, target_quantile=0.5, learning_rate=0.2)
    assert updated[0] < 1.0 < updated[1]  # too many unclipped: shrink; too few: grow
    assert updated[0] == pytest.approx(math.exp(-0.2 * (20 / 50)), rel=1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: allocate_noise(0.0, THRESHOLDS), "noise_multiplier"),
        (lambda: allocate_noise(1.0, (1.0, -1.0)), "thresholds"),
        (lambda: allocate_noise(1.0, ()), "thresholds"),
        (lambda: allocate_noise(1.0, THRESHOLDS, "uniform"), "strategy"),
        (lambda: allocate_noise(1.0, THRESHOLDS, "weighted", shares=(0.5, 0.5)), "shares"),
        (lambda: allocate_noise(1.0, THRESHOLDS, "weighted", shares=(0.5, 0.5, 0.5, 0.5)), "sum to 1"),
        (lambda: allocate_noise(1.0, THRESHOLDS, "global", shares=(0.25,) * 4), "shares"),
        (lambda: gradient_noise_multiplier(1.0, 2.0, groups=0), "groups"),
        (lambda: geometric_threshold_update([1.0], [0.0], 10.0, target_quantile=1.0), "target_quantile"),
        (lambda: effective_noise_multiplier([1.0, 2.0], [1.0]), "same length"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
