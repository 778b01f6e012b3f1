"""The compiled kernels of the PRV engine against their numpy/mpmath specifications."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from dpforge.accounting.prv import discretise
from dpforge.accounting.prv.compose import _log_mgf_kernel, _place
from dpforge.mechanisms import Gaussian, PoissonSampled, flatten


@pytest.mark.parametrize(
    "mechanism, sampling_rate, step",
    [(Gaussian(0.8), 0.01, 5e-3), (Gaussian(1.2), 0.01, 1e-3), (Gaussian(0.6), 1e-4, 1e-4), (Gaussian(5.0), 0.3, 1e-2)],
)
def test_phase_search_kernel_matches_the_numpy_routing(mechanism, sampling_rate, step):
    loss = flatten(PoissonSampled(mechanism, sampling_rate))[0].privacy_loss_distribution("remove")
    low, high = loss.lower_quantile(1e-6), loss.upper_quantile(1e-4)
    cells = int(np.ceil((high - low) / step)) + 2
    candidates = 24
    points = low - step + step / candidates * np.arange((cells + 1) * candidates + 1)
    functions = loss.distribution_functions(points)
    reference = np.array(
        [discretise._phase_excess_reference(points, *functions, phase, candidates) for phase in range(candidates)]
    )
    compiled = discretise._phase_excesses(points, *functions, candidates)
    np.testing.assert_allclose(compiled, reference, rtol=1e-9, atol=1e-300)
    assert int(np.argmin(compiled)) == int(np.argmin(reference))


def test_log_mgf_kernel_is_an_upper_bound_within_a_few_ulps():
    rng = np.random.default_rng(7)
    lambdas = np.array([1e-3, 0.5, 3.0, 50.0, 400.0, -0.5, -7.0, -300.0])
    for _ in range(12):
        n = int(rng.integers(2, 4000))
        masses = rng.random(n) * np.exp(-50.0 * rng.random(n))
        masses[rng.random(n) < 0.3] = 0.0
        first, step = int(rng.integers(-3000, 3000)), float(10 ** rng.uniform(-5, -1))
        shift = float(rng.random() * step)
        bound = _log_mgf_kernel(masses, first, step, shift, lambdas)
        occupied = np.flatnonzero(masses)
        positions = (first + occupied) * step - shift
        for k, lam in enumerate(lambdas):
            exact = mp.log(mp.fsum(mp.mpf(float(m)) * mp.exp(mp.mpf(float(lam)) * mp.mpf(float(x))) for m, x in zip(masses[occupied], positions)))
            assert bound[k] >= float(exact) - 1e-15 * abs(float(exact))
            assert bound[k] - float(exact) <= 1e-9 * max(1.0, abs(float(exact)))


def test_cyclic_placement_matches_bincount():
    rng = np.random.default_rng(3)
    for size, length, offset in ((16, 5, 13), (16, 16, -3), (16, 40, 7), (9, 1, -100)):
        values = rng.random(length)
        row = np.zeros(size)
        _place(row, values, offset)
        expected = np.bincount((offset + np.arange(length)) % size, weights=values, minlength=size)
        np.testing.assert_allclose(row, expected, rtol=1e-15)

