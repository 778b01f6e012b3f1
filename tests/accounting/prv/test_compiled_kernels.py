"""The compiled kernels of the PRV engine against their numpy/mpmath specifications."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from dpforge.accounting.prv import discretise
from dpforge.accounting.prv.compose import _discounted_suffix, _log_mgf_kernel, _place
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


@pytest.mark.parametrize("seed", range(6))
def test_compiled_routing_matches_the_numpy_routing(seed):
    """The lower measure's routing (compiled) against :func:`discretise._route` on cell
    weights of real laws and of random ones (zeros, spikes and steep edges included)."""
    rng = np.random.default_rng(seed)
    if seed < 3:
        loss = flatten(PoissonSampled(Gaussian(0.6 + 0.3 * seed), 10.0 ** -(seed + 1)))[0].privacy_loss_distribution("remove")
        step = 10.0 ** -(seed + 2)
        grid = np.arange(int(np.floor(loss.lower_quantile(1e-9) / step)), int(np.ceil(loss.upper_quantile(1e-9) / step)) + 1) * step
        m, n = discretise._cell_masses(loss, grid)[:2]
        up, down = discretise._cell_weights(m, n, grid)
        top_up = 1e-12
    else:
        cells = int(rng.integers(2, 3000))
        up = rng.random(cells) * (rng.random(cells) < 0.7) * np.exp(-20 * rng.random(cells))
        down = rng.random(cells) * (rng.random(cells) < 0.7) * np.exp(-20 * rng.random(cells))
        top_up = float(rng.random() * 1e-3)
    np.testing.assert_array_equal(discretise._route_compiled(up, down, top_up), discretise._route(up, down, top_up))


def _label_losses_reference(m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n, grid, step):
    """The numpy specification of :func:`discretise._label_losses`."""
    eps = np.finfo(float).eps

    def labels(cells, top):
        out = np.zeros(grid.size)
        out[:-1] += pi * cells
        out[1:] += (1.0 - pi) * cells
        out[-1] += top
        return out

    def errors(cells, shared, top):
        # a shared edge's error enters label k |1 - pi_k-1 - pi_k| times, not their sum
        gross = labels(cells, top)
        cancelled = np.zeros(grid.size)
        cancelled[1:-1] = 2.0 * np.minimum(1.0 - pi[:-1], pi[1:]) * shared[1:-1]
        margin = 4.0 * (eps / 2.0) * (2.0 * gross + cancelled)  # the subtraction's rounding
        return np.where(shared > 0.0, np.maximum(gross - cancelled + margin, 0.0), gross)

    p_label, q_label = labels(m, top_m), labels(n, top_n)
    low_p = p_label - errors(error_m, shared_m, top_error_m) - 2.0 * eps * p_label
    high_q = q_label + errors(error_n, shared_n, top_error_n) + 2.0 * eps * q_label
    keep = low_p > 0
    with np.errstate(divide="ignore"):
        log_p = np.log(np.where(keep, low_p, 1.0))
        log_q = np.log(np.where(high_q > 0, high_q, 1.0))
    v = np.where(high_q > 0, log_p - log_q - 2.0 * eps * (np.abs(log_p) + np.abs(log_q)), np.inf)
    v = np.minimum(v, grid)
    margin = 8.0 * eps * (np.abs(v) + step)
    widest = float(margin[keep].max(initial=0.0))
    return np.where(keep, low_p, 0.0), np.where(keep, v - margin, 0.0), widest


@pytest.mark.parametrize("mechanism, sampling_rate, step", [(Gaussian(0.8), 0.01, 1e-3), (Gaussian(0.6), 1e-4, 2e-6), (Gaussian(2.0), 1.0, 1e-2)])
@pytest.mark.parametrize("graded", [False, True])
def test_compiled_label_losses_match_the_numpy_specification(mechanism, sampling_rate, step, graded):
    loss = flatten(PoissonSampled(mechanism, sampling_rate))[0].privacy_loss_distribution("add")
    low, high = loss.lower_quantile(1e-12), loss.upper_quantile(1e-12)
    phase = discretise._choose_phase(loss, step, low, high)
    k_lo = int(np.floor((low - phase) / step))
    k_hi = int(np.ceil((high - phase) / step))
    if graded:  # wider cells across the thin tail (graded_lattice)
        lattice = discretise.graded_lattice(loss, step, k_lo, k_hi, phase, 2.0)
    else:
        lattice = np.arange(k_lo, k_hi + 1)
    grid = lattice * step + phase
    m, n, error_m, error_n, shared_m, shared_n = discretise._cell_masses(loss, grid)
    targets = grid + discretise._label_slack(m, n, error_m, error_n, step, 1.0)
    up, down = discretise._cell_weights(m, n, targets)
    _, _, top_m, top_error_m, top_n, top_error_n = discretise._end_masses(loss, float(grid[0]), float(grid[-1]))
    pi = discretise._route_compiled(up, down, max(top_m - top_n * np.exp(targets[-1]), 0.0))
    args = (m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n, grid, step)
    kept, lowest, widest = discretise._label_losses(*args)
    expected_kept, expected_lowest, expected_widest = _label_losses_reference(*args)
    np.testing.assert_allclose(kept, expected_kept, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(lowest, expected_lowest, rtol=0, atol=1e-15)
    assert widest == expected_widest
    masses, shift = discretise._labels_rounded_down(*args[:-1], lattice, step, phase)
    # the slack keeps almost all of the P-mass on the labels' own points
    assert shift >= 2.0 * widest
    assert masses.sum() == pytest.approx(kept.sum(), rel=1e-12)
    own = np.bincount(lattice - (lattice[0] - 1), weights=kept, minlength=masses.size)
    assert np.minimum(masses, own).sum() > (1.0 - 1e-6) * kept.sum()


def test_log_mgf_kernel_is_an_upper_bound_within_a_few_ulps():
    rng = np.random.default_rng(7)
    lambdas = np.array([1e-3, 0.5, 3.0, 50.0, 400.0, -0.5, -7.0, -300.0])
    # short supports too: the kernel runs four interleaved chains, then one by one
    for n in [1, 2, 3, 4, 5, 7, 9] + [int(rng.integers(2, 4000)) for _ in range(12)]:
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



def test_product_of_powers_matches_numpy_powers():
    from dpforge.accounting.prv.compose import _product_of_powers

    rng = np.random.default_rng(3)
    spectra = np.exp(1j * 6.0 * rng.random((6, 2000))) * (0.999 + 0.001 * rng.random((6, 2000)))
    for counts in ([1], [2, 1], [1000], [1, 3, 1000, 17, 250, 64], [0, 5], [10] * 6, [10, 3, 10, 3, 1000, 10]):
        rows = spectra[: len(counts)]
        exact = np.prod(rows ** np.array(counts)[:, None], axis=0)
        got = _product_of_powers(rows, np.array(counts, dtype=np.int64))
        assert np.max(np.abs(got - exact) / np.abs(exact)) <= 1e-11


@pytest.mark.parametrize("counts", [[10] * 6, [10, 3, 10, 3, 1000, 10], [1, 3, 1000, 17, 250, 64]])
def test_product_of_powers_stays_within_the_roundoff_allowance(counts):
    """Rows with equal counts are multiplied before their power is taken; the relative
    error against a 40-digit mpmath product stays within the sqrt(5) u (sum of counts)
    that the composition's allowance 4u (T + log2 n) is built on."""
    from dpforge.accounting.prv.compose import _product_of_powers

    rng = np.random.default_rng(5)
    rows = np.exp(1j * 6.0 * rng.random((len(counts), 16))) * (0.999 + 0.001 * rng.random((len(counts), 16)))
    got = _product_of_powers(rows, np.array(counts, dtype=np.int64))
    u = np.finfo(float).eps / 2
    with mp.workdps(40):
        for column in range(rows.shape[1]):
            exact = mp.mpf(1)
            for row, count in zip(rows[:, column], counts):
                exact *= mp.mpc(row.real, row.imag) ** count
            error = abs(mp.mpc(got[column].real, got[column].imag) - exact) / abs(exact)
            assert float(error) <= math.sqrt(5) * u * sum(counts)


@pytest.mark.parametrize("decay", [0.0, 1e-300, 0.37, 1.0 - 1e-9, 1.0])
def test_discounted_suffix_matches_the_direct_sum(decay):
    """S_j = sum_{i>j} w_i decay^{i-j}, the epsilon inversion's recursion, against the sum
    written out in mpmath (weights spanning 300 orders of magnitude, zeros included)."""
    rng = np.random.default_rng(7)
    weights = 10.0 ** rng.uniform(-300, 0, 40)
    weights[::7] = 0.0
    compiled = _discounted_suffix(weights, decay)
    n = weights.size
    reference = [
        float(mp.fsum(mp.mpf(weights[i]) * mp.mpf(decay) ** (i - j) for i in range(j + 1, n))) for j in range(n)
    ]
    np.testing.assert_allclose(compiled, reference, rtol=1e-13, atol=0.0)
    assert compiled[-1] == 0.0


@pytest.mark.parametrize(
    "size, step, theta",
    [(185_000, 7e-8, 3000.0), (185_000, 7e-8, 0.0), (1_000, 0.01, 50.0), (5_000, 1e-3, -20.0), (300_000, 1e-7, 1e5)],
)
def test_tilt_kernel_matches_the_direct_sums(size, step, theta):
    """The tilted moments by one multiplication a cell (tilt._tilt_kernel) match log Z,
    the tilted mean and variance summed with an exponential each, in log space: a
    million-cell walk would drift about 1e-10; these are within 1e-9 (mean and variance
    relative to the law's spread, log Z absolutely)."""
    from dpforge.accounting.prv.tilt import _tilt_kernel

    rng = np.random.default_rng(size)
    masses = np.exp(-0.5 * ((np.arange(size) - size / 3) / (size / 20)) ** 2) + 1e-12 * rng.random(size)
    masses[:10] = 0.0
    masses[-7:] = 0.0
    masses /= masses.sum()
    first, shift = -size // 3, 1e-9
    x = (first + np.arange(size)) * step - shift
    occupied = masses > 0
    logs = np.log(masses[occupied]) + theta * x[occupied]
    top = logs.max()
    weights = np.exp(logs - top)
    log_z = top + math.log(weights.sum())
    mean = float((weights * x[occupied]).sum() / weights.sum())
    variance = float((weights * (x[occupied] - mean) ** 2).sum() / weights.sum())
    got_log_z, got_mean, got_variance = _tilt_kernel(masses, first, step, shift, theta)
    spread = math.sqrt(variance)
    assert abs(got_log_z - log_z) <= 1e-9 * max(1.0, abs(log_z))
    assert abs(got_mean - mean) <= 1e-9 * spread
    assert abs(got_variance - variance) <= 1e-9 * variance
    assert _tilt_kernel(np.zeros(5), 0, 1.0, 0.0, 1.0) == (-np.inf, 0.0, 0.0)


@pytest.mark.parametrize("q", [1.0, 0.5, 0.01, 1e-6])
@pytest.mark.parametrize("remove", [True, False])
def test_the_fused_gaussian_base_kernel_gives_the_separate_passes_numbers(q, remove):
    """The subsampled Gaussian's base functions and their modelled errors share one
    expm1 and one log1p a point (:func:`.rounding._gaussian_base_kernel`); they must be
    the very numbers of the separate passes (the base functions' kernel, then the
    error model's kernel on them), edges of the support, y = 1 and infinities included."""
    from dpforge.accounting.prv.rounding import _errors_kernel, _gaussian_base_kernel
    from dpforge.mechanisms.subsampled_gaussian_kernel import subsampled_gaussian_base_functions

    edge = float(np.log1p(-q)) if q < 1.0 else -30.0
    ell = np.concatenate(
        [
            np.linspace(-40.0, 40.0, 4001),
            edge + np.linspace(-1e-9, 1e-9, 41),
            -edge + np.linspace(-1e-9, 1e-9, 41),
            [1.0, -1.0, np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0), 0.0, np.inf, -np.inf],
        ]
    )
    for mu in (0.05, 1.0, 12.0):
        values, errors = _gaussian_base_kernel(ell, mu, q, remove)
        separate = subsampled_gaussian_base_functions(ell, mu, q, remove)
        for row in range(4):
            np.testing.assert_array_equal(values[row], separate[row])
        expected = _errors_kernel(ell, *separate, q, 1.0 if remove else -1.0, 1.0 / mu, 0.5 * mu, True, False)
        for row in range(4):
            np.testing.assert_array_equal(errors[row], expected[row])


def test_a_mechanisms_grid_phase_is_searched_once_a_grid(monkeypatch):
    """verify's prefix pass discretises every phase again at the grid the whole plan's
    refinement ended on: the optimistic measure of a mechanism's law reuses the phase
    searched there (the search was 28 % of a subsampled law's lower measure), and gives
    the same measure; another step searches afresh."""
    calls = []
    original = discretise._choose_phase

    def counted(*args):
        calls.append(args[1])
        return original(*args)

    monkeypatch.setattr(discretise, "_choose_phase", counted)
    discretise._cached_phase.cache_clear()
    loss = flatten(PoissonSampled(Gaussian(0.9), 0.01))[0].privacy_loss_distribution("remove")
    low, high = loss.lower_quantile(1e-12), loss.upper_quantile(1e-12)
    first = discretise.lower_measure(loss, 1e-3, low, high, exponent=2.0)
    again = discretise.lower_measure(loss, 1e-3, low, high, exponent=2.0)
    discretise.lower_measure(loss, 1e-3, low, high, exponent=(1.0, 2.0))
    assert calls == [1e-3]
    assert (first.shift, first.first_index) == (again.shift, again.first_index)
    np.testing.assert_array_equal(first.masses, again.masses)
    discretise.lower_measure(loss, 2e-3, low, high)
    assert calls == [1e-3, 2e-3]
