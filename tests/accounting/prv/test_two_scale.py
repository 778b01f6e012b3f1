"""Two-scale staged chunks: the bulk on a fine grid, the thin tail on the coarse grid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpforge.accounting.prv import components as comps
from dpforge.accounting.prv import two_scale
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled, flatten

DELTA_EPS = (0.0, 0.01, 0.05, 0.1, 0.3, 1.0)


def _profile(measure, eps_values):
    x, m = measure.positions, measure.masses
    return np.array([float(np.sum(m[x > e] * -np.expm1(e - x[x > e]))) for e in eps_values])


def _chunks(direction, sigma=0.6, rate=1e-4, size=5617, step=1.76e-4):
    component = flatten(Composed([(PoissonSampled(Gaussian(sigma), rate), 10 * size)]))[0]
    tail = 1e-16
    two = comps._chunk(component, direction, size, step, tail, ("lower", "upper"))
    original = comps.split_point
    comps.split_point = lambda *args, **kwargs: None  # the single-scale chunk
    try:
        single = comps._chunk(component, direction, size, step, tail, ("lower",))
    finally:
        comps.split_point = original
    return two, single


@pytest.mark.parametrize("direction", ["remove", "add"])
def test_two_scale_chunk_is_below_the_upper_chunk_and_as_tight_as_one_scale(direction):
    two, single = _chunks(direction)
    lower, upper, old = (_profile(m, DELTA_EPS) for m in (two["lower"], two["upper"], single["lower"]))
    assert np.all(lower <= upper)
    # as tight as the single-scale chunk (whose fine grid spans the whole range)
    assert np.all(lower >= old * (1 - 1e-5) - 1e-15)
    # and close to the upper chunk where delta is not tiny
    big = upper > 1e-6
    assert np.all((upper[big] - lower[big]) / upper[big] < 5e-3)
    # a chunk of c steps pays the bulk grid's rounding c times: with its phase searched
    # finely (zoom passes), the lower chunk's mean is within 1e-3 of the upper chunk's
    # (the one-scale chunk, with the plain phase search, was 1.7 % below)
    mean = lambda m: float(np.dot(m.masses, m.positions))  # noqa: E731
    assert mean(single["lower"]) * (1 - 1e-4) <= mean(two["lower"]) <= mean(two["upper"])
    assert mean(two["upper"]) - mean(two["lower"]) <= 1e-3 * mean(two["upper"])


@pytest.mark.parametrize("direction, side", [("remove", "upper"), ("add", "lower")])
def test_split_parts_partition_the_law(direction, side):
    """B and R cover disjoint cells that meet at the split: their masses add up to the
    law's mass on the range, never more."""
    loss = flatten(PoissonSampled(Gaussian(0.6), 1e-4))[0].privacy_loss_distribution(direction)
    step, size = 1.76e-4, 5617
    cut = comps.truncation(loss, 1e-20)
    split, found_side = two_scale.split_point(loss, size, step, comps._bulk_quantiles(loss)[:2], cut.low, cut.high)
    assert found_side == side
    fine = comps.bulk_spread(loss) / comps._FINE_RESOLUTION
    make = two_scale._upper_split if side == "upper" else two_scale._lower_split
    bulk, rest, rho = make(loss, step, fine, cut.low, cut.high, split)
    assert 0 < rho <= two_scale._TAIL_EVENTS / size * 1.01
    covered = float(bulk.masses.sum() + rest.masses.sum())
    in_range = 1.0 - float(loss.cdf(np.floor(cut.low / step) * step if side == "lower" else cut.low))
    assert covered <= in_range * (1 + 1e-12)
    # all of it but the modelled errors of the computed masses (each optimistic label
    # keeps its P-mass less that error; module .rounding)
    assert covered == pytest.approx(in_range, abs=1e-9)
    assert float(rest.masses.sum()) == pytest.approx(rho, rel=1e-6)


def test_drop_count_leaves_a_negligible_binomial_tail():
    from scipy import stats

    for chunk, rho, tail in ((5617, 1.8e-7, 1e-16), (100, 1e-5, 1e-20), (10_000, 1e-7, 1e-30)):
        k = two_scale._drop_count(chunk, rho, tail)
        assert stats.binom.sf(k, chunk, rho) <= tail
        assert k == 1 or stats.binom.sf(k - 1, chunk, rho) > tail


def test_compose_powers_equals_one_compose_per_count():
    """One transform raised to several counts gives each count's own composition: the
    same profile, aliasing bounds, +inf mass and round-off allowance as compose()."""
    from dpforge.accounting.prv.compose import compose, compose_powers
    from dpforge.accounting.prv.discretise import lower_measure

    loss = flatten(PoissonSampled(Gaussian(0.9), 0.02))[0].privacy_loss_distribution("remove")
    measure = lower_measure(loss, 2e-3, loss.lower_quantile(1e-12), loss.upper_quantile(1e-12))
    counts = [300, 297, 299, 298]
    powers = compose_powers(measure, counts, 1e-14)
    for count, together in zip(sorted(counts), powers):
        alone = compose([(measure, count)], 1e-14)
        for eps in (0.0, 0.5, 1.0, 2.0):
            assert together.lower_profile().delta(eps) == pytest.approx(alone.lower_profile().delta(eps), rel=1e-9, abs=1e-15)
            assert together.upper_profile().delta(eps) == pytest.approx(alone.upper_profile().delta(eps), rel=1e-9, abs=1e-15)
        assert together.infinity == alone.infinity
        assert together.roundoff == pytest.approx(alone.roundoff, rel=0.5)
        assert together.above + together.below <= 10 * (alone.above + alone.below) + 1e-300


def test_chunks_of_two_neighbouring_sizes_share_one_two_scale_computation(monkeypatch):
    """discretise_all splits a staged count into chunks of two neighbouring sizes (no
    remainder chunk); their lower measures from one shared computation equal those of
    separate computations at the same split and phase, up to the shared truncation
    (with the bulk's grid uncapped, so that both take the same fine step: capped, the
    step follows the window of the largest count's powers)."""
    monkeypatch.setattr(two_scale, "_FIRST_FINE_POINTS", two_scale._FINE_POINTS)
    component = flatten(Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 100_000)]))[0]
    step, tail = 1.76e-4, 1e-16
    shared = comps._chunks(component, "remove", [5001, 5000], step, tail, ("lower",))
    for size in (5001, 5000):
        alone = comps._chunk(component, "remove", size, step, tail, ("lower",))["lower"]
        together = shared[size]["lower"]
        assert np.allclose(_profile(together, DELTA_EPS), _profile(alone, DELTA_EPS), rtol=1e-6, atol=1e-15)
    # the staged plan: ceil(count / chunk) chunks of sizes base + 1 and base, nothing else
    loss = component.privacy_loss_distribution("remove")
    chunk = int(np.ceil((comps._RESOLUTION * step / comps.bulk_spread(loss)) ** 2))
    pieces = -(-component.count // chunk)
    base, extra = divmod(component.count, pieces)
    staged = comps.discretise_all([component], "remove", step, 1e-9, ("lower",), staged=True)["lower"]
    assert [times for _, times in staged] == [t for t in (extra, pieces - extra) if t > 0]
    assert extra * (base + 1) + (pieces - extra) * base == component.count


def test_fine_grid_is_capped_and_a_capped_chunk_stays_below_the_upper_chunk(monkeypatch):
    """The bulk's fine grid and the window of its powers hold at most _FINE_POINTS
    points (a coarser fine step only loosens the lower chunk, never past the upper one):
    capped 32x tighter than the default, the S1 chunk's lower profile stays below its
    upper profile and within 1e-3 of the uncapped lower profile where delta is not tiny."""
    component = flatten(Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 56_170)]))[0]
    step, tail, size = 1.76e-4, 1e-16, 5617
    free = comps._chunk(component, "remove", size, step, tail, ("lower", "upper"))
    sizes = []
    original = two_scale.compose_powers

    def recording(measure, counts, inner_tail):
        out = list(original(measure, counts, inner_tail))
        sizes.append((measure.masses.size, out[0].grid_size))
        return iter(out)

    cap = 2**16
    monkeypatch.setattr(two_scale, "_FINE_POINTS", cap)
    monkeypatch.setattr(two_scale, "compose_powers", recording)
    capped = comps._chunk(component, "remove", size, step, tail, ("lower",))["lower"]
    assert sizes and all(grid <= cap + 2 and window <= 1.1 * cap + 3 for grid, window in sizes)
    lower, upper, uncapped = (_profile(m, DELTA_EPS) for m in (capped, free["upper"], free["lower"]))
    assert np.all(lower <= upper)
    big = uncapped > 1e-6
    assert np.all(np.abs(lower[big] - uncapped[big]) <= 1e-3 * uncapped[big])


@pytest.mark.slow
def test_log_normal_bulk_is_accounted_within_the_memory_budget():
    """sigma = 0.3, q = 1e-6: one step's bulk is 2.8e-7 nats wide (robust), its powers
    reach 0.1 nats, and the fine grid at bulk / 50 asked for 1.2e8 points (LimitError).
    Capped, the staged lower chain meets the one-grid upper chain within 1e-3; the two
    chains share no construction."""
    from dpforge.accounting import epsilon

    result = epsilon(Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 100_000)]), 1e-5)
    assert result.accuracy["reached"]
    assert 0 < result.upper - result.lower <= 1e-3 * result.upper
    # RDP's (looser) certified upper bound
    assert result.upper <= epsilon(Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 100_000)]), 1e-5, engine="rdp").upper


def _direct_sum_of_products(coarse, rest, chunk, terms, first, length):
    """sum_k C(chunk, k) coarse[k] * rest^{*k} by direct convolution (non-negative terms:
    every entry to a relative 1e-13, however small), from lattice index ``first``."""
    from scipy import special

    support = max(coarse[k].first_index + coarse[k].masses.size + k * (rest.first_index + rest.masses.size) for k in range(terms + 1))
    out = np.zeros(max(length, support - first))
    power = np.array([1.0])
    for k in range(terms + 1):
        if k > 0:
            power = np.convolve(power, rest.masses)
        term = np.convolve(coarse[k].masses, power) * special.comb(chunk, k)
        offset = coarse[k].first_index + k * rest.first_index - first
        out[offset : offset + term.size] += term
    return out[:length]


def test_tilted_sum_of_products_is_below_the_exact_sum_and_keeps_rare_entries():
    """Untilted, the allowance (relative to the sum's peak) zeroes every entry below about
    1e-16 of it; summed tilted instead, the entries the tilt lifts come back, every entry
    stays at most the exact one (direct convolution), and the bulk is kept (the tilted
    sum's mass within 1e-8 of the untilted one's)."""
    from dpforge.accounting.prv.discretise import GridMeasure

    step = 0.01
    x = np.arange(400) * step
    rest = GridMeasure(40, np.exp(-8.0 * x[:300]) * 1e-3, step)  # a thin tail, rarer further out
    coarse = [GridMeasure(-20 + k, np.exp(-0.5 * ((x[:60] - 0.3) / 0.05) ** 2) / 12.5, step) for k in range(4)]
    chunk, terms = 50, 3
    untilted = two_scale._sum_of_products(coarse, rest, chunk, terms)
    tilted = two_scale._sum_of_products(coarse, rest, chunk, terms, theta=8.0)
    assert tilted.first_index == untilted.first_index
    # each window may end before the support does (the entries past it dropped)
    support = max(coarse[k].first_index + coarse[k].masses.size + k * (rest.first_index + rest.masses.size) for k in range(terms + 1))
    exact = _direct_sum_of_products(coarse, rest, chunk, terms, untilted.first_index, support - untilted.first_index + 1)
    assert untilted.masses.size <= exact.size and tilted.masses.size <= exact.size
    untilted_masses, tilted_masses = (np.pad(m.masses, (0, exact.size - m.masses.size)) for m in (untilted, tilted))
    untilted, tilted = (dataclasses.replace(m, masses=masses) for m, masses in ((untilted, untilted_masses), (tilted, tilted_masses)))
    assert np.all(untilted.masses <= exact * (1 + 1e-12))
    assert np.all(tilted.masses <= exact * (1 + 1e-12))
    assert tilted.masses.sum() >= (1 - 1e-8) * untilted.masses.sum()
    rare = (exact > 0) & (exact < 1e-20 * exact.max())
    assert rare.sum() > 100
    assert np.all(untilted.masses[rare] == 0.0)
    # the tilt keeps them (to the allowance relative to the tilted peak)
    kept = rare & (exact > 1e-30 * exact.max())
    assert kept.sum() > 50
    assert np.allclose(tilted.masses[kept], exact[kept], rtol=1e-6)


@pytest.mark.parametrize("theta", [0.0, 8.0])
def test_an_empty_rest_leaves_the_first_term_of_the_sum_of_products(theta):
    """sum_k C(chunk, k) coarse[k] * rest^{*k} with no mass in ``rest`` is coarse[0]: the
    k = 0 term's scale took 0 x log(0) = nan, which dropped it, and with every term
    empty the sum raised (max of nothing).  Now the first term is kept (to the
    allowance), and empty terms give an empty sum, never nan."""
    from dpforge.accounting.prv.discretise import GridMeasure

    step = 0.01
    x = np.arange(60) * step
    rest = GridMeasure(40, np.zeros(300), step)
    coarse = [GridMeasure(-20 + k, np.exp(-0.5 * ((x - 0.3) / 0.05) ** 2) / 12.5, step) for k in range(4)]
    summed = two_scale._sum_of_products(coarse, rest, 50, 3, theta=theta)
    assert np.all(np.isfinite(summed.masses))
    exact = _direct_sum_of_products(coarse, rest, 50, 3, summed.first_index, summed.masses.size)
    assert np.all(summed.masses <= exact * (1 + 1e-12))
    assert summed.masses.sum() == pytest.approx(coarse[0].masses.sum(), rel=1e-12)
    empty = [GridMeasure(-20 + k, np.zeros(60), step) for k in range(4)]
    nothing = two_scale._sum_of_products(empty, rest, 50, 3, theta=theta)
    assert np.all(nothing.masses == 0.0)


def _thinning_chunk():
    """A rest thinning out as e^{-3x} over 20 nats and five bulk terms (K = 4)."""
    from dpforge.accounting.prv.discretise import GridMeasure

    step = 0.01
    x = np.arange(2_000) * step
    rest = GridMeasure(40, np.exp(-3.0 * x) * 1e-4, step)
    coarse = [GridMeasure(-20 + k, np.exp(-0.5 * ((x[:60] - 0.3) / 0.05) ** 2) / 12.5, step) for k in range(5)]
    return coarse, rest


@pytest.mark.parametrize("theta", [0.0, 1.5])
def test_the_sum_of_products_window_ends_where_what_lies_beyond_is_negligible(theta):
    """A rest whose law thins out: the K = 4 terms reach 80 nats, but the sum's (tilted)
    mass past a fraction of that lies far below the round-off allowance, so the window
    ends there (it held the whole support before).  Every entry is still at most the
    exact one (direct convolution), the mass kept is the exact mass to 1e-9, and the
    bound on the (tilted, scaled) mass past the window is at least the exact one."""
    coarse, rest = _thinning_chunk()
    step, chunk, terms = rest.step, 50, 4
    summed = two_scale._sum_of_products(coarse, rest, chunk, terms, theta=theta)
    first = summed.first_index
    support = max(coarse[k].first_index + coarse[k].masses.size + k * (rest.first_index + rest.masses.size) for k in range(terms + 1))
    exact = _direct_sum_of_products(coarse, rest, chunk, terms, first, support - first + 1)
    assert summed.masses.size < 0.5 * exact.size
    assert np.all(summed.masses <= exact[: summed.masses.size] * (1 + 1e-12))
    assert summed.masses.sum() >= (1 - 1e-9) * exact.sum()
    # the bound on what wraps round the window, in the units _summed forms the sum in
    scaled = [two_scale._scaled_entries(coarse[k], theta) for k in range(terms + 1)]
    rest_top = two_scale._scaled_entries(rest, theta)[1]
    logs = [two_scale._log_binomial(chunk, k) + top + k * rest_top for k, (_, top) in enumerate(scaled)]
    scale = max(logs)
    size, wrapped = two_scale._window(coarse, rest, chunk, terms, theta, first, exact.size, logs[0] - scale, scale)
    assert size < exact.size
    beyond = exact[size:] * np.exp(theta * (first + size + np.arange(exact.size - size)) * step - scale)
    assert 0.0 < beyond.sum() <= wrapped


def _exact_sum_of_products(coarse, rest, chunk, terms, first, length):
    """The sum of :func:`_direct_sum_of_products` in long double, from the exact binomial
    integers: within about 1e-18 of itself wherever double would be within 1e-15."""
    import math

    support = max(coarse[k].first_index + coarse[k].masses.size + k * (rest.first_index + rest.masses.size) for k in range(terms + 1))
    out = np.zeros(max(length, support - first + 1), dtype=np.longdouble)
    power = np.array([1.0], dtype=np.longdouble)
    for k in range(terms + 1):
        if k > 0:
            power = np.convolve(power, rest.masses.astype(np.longdouble))
        term = np.convolve(coarse[k].masses.astype(np.longdouble), power) * np.longdouble(math.comb(chunk, k))
        offset = coarse[k].first_index + k * rest.first_index - first
        out[offset : offset + term.size] += term
    return out[:length]


def test_folded_rows_add_what_passes_the_window_at_its_index_mod_the_window():
    """A factor longer than the window is wrapped round it before its transform: the
    circular convolution of wrapped rows is the wrapped linear one."""
    entries = np.arange(1.0, 11.0)
    assert np.array_equal(two_scale._folded(entries, 4, 1), [4.0 + 8.0, 1.0 + 5.0 + 9.0, 2.0 + 6.0 + 10.0, 3.0 + 7.0])
    assert np.array_equal(two_scale._folded(entries[:3], 5, 1), [0.0, 1.0, 2.0, 3.0, 0.0])
    assert np.array_equal(two_scale._folded(None, 3, 0), np.zeros(3))


@pytest.mark.parametrize("theta", [0.0, 1.5])
def test_a_window_cut_far_inside_the_support_stays_below_the_exact_sum(theta, monkeypatch):
    """With the cut allowed 1e12 times the allowance, much of the sum's mass lies
    past the window and wraps round it (the rest itself longer than the window): every
    entry is still at most the exact sum's (long double, exact binomials), because the
    bound on what wraps is taken off every entry; without that, the wrapped mass lifts
    the first entries above it."""
    monkeypatch.setattr(two_scale, "_CUT_SHARE", 1e12)
    coarse, rest = _thinning_chunk()
    summed = two_scale._sum_of_products(coarse, rest, 50, 4, theta=theta)
    exact = _exact_sum_of_products(coarse, rest, 50, 4, summed.first_index, summed.masses.size)
    assert summed.masses.size < rest.masses.size  # the rest was folded
    assert np.all(summed.masses.astype(np.longdouble) <= exact)
    assert summed.masses.sum() > 0.5 * float(exact.sum())


def test_untilted_entries_stay_below_the_exact_sum_to_the_last_ulp():
    """Tilted at theta = 5 (the window holds the whole sum), entries are untilted by
    e^{log p~ + scale - theta x}, whose argument reaches tens of nats: its rounding, u
    times those magnitudes, put 409 entries up to 3.5e-14 above the exact sum, past
    the FFT's allowance, and gammaln's binomials (40-600 ulp off at chunk = 63-200)
    did the same untilted.  With the exact binomials and each entry lowered by its
    exponential's rounding, none is above (long double, exact binomials)."""
    coarse, rest = _thinning_chunk()
    for theta, chunk in ((5.0, 50), (0.0, 180)):
        summed = two_scale._sum_of_products(coarse, rest, chunk, 4, theta=theta)
        exact = _exact_sum_of_products(coarse, rest, chunk, 4, summed.first_index, summed.masses.size)
        assert np.all(summed.masses.astype(np.longdouble) <= exact)
        # (tilted far, the bulk's lowest entries fall below the tilted allowance)
        assert summed.masses.sum() >= (1 - 1e-5) * float(exact.sum())


def test_sum_of_products_holds_a_few_windows_whatever_the_number_of_terms():
    """Each term's row is formed, transformed and added in turn: 16 terms peak at about 6
    windows of traced memory (holding every row and its transform's temporaries, as
    before, took 24), and the sum is still the exact one to the allowance."""
    import tracemalloc

    from dpforge.accounting.prv.discretise import GridMeasure

    step, terms, chunk = 0.01, 16, 200
    rest = GridMeasure(10, np.full(2_500, 2e-5), step)  # heavy enough that the window holds every term
    coarse = [GridMeasure(k, np.exp(-0.5 * ((np.arange(3_000) * step - 5.0) / 2.0) ** 2) / 500.0, step) for k in range(terms + 1)]
    tracemalloc.start()
    try:
        summed = two_scale._sum_of_products(coarse, rest, chunk, terms)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summed.masses.size > 40_000
    assert peak <= 8 * (8 * summed.masses.size)
    top = summed.masses > 1e-12 * summed.masses.max()
    exact = _direct_sum_of_products(coarse, rest, chunk, terms, summed.first_index, summed.masses.size)
    assert np.all(summed.masses <= exact * (1 + 1e-12))
    assert np.allclose(summed.masses[top], exact[top], rtol=1e-9)


def test_saddle_exponent_puts_the_tilted_mean_at_eps():
    """K'(lambda) = eps solved on the coarse laws agrees with the same equation solved on
    a finely discretised one-step law; a normal approximation puts lambda orders of
    magnitude off for a subsampled law's heavy tail."""
    from dpforge.accounting.prv.discretise import upper_measure
    from dpforge.accounting.prv.evaluate import saddle_estimate

    components = flatten(Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 1000)]))
    lam = comps.saddle_exponent(components, "remove", 1e-20, 8.47)
    loss = components[0].privacy_loss_distribution("remove")
    cut = comps.truncation(loss, 1e-20)
    fine = upper_measure(loss, (cut.high - cut.low) / 200_000, cut.low, cut.high, exponent=0.0)
    x, m = fine.positions[fine.masses > 0], fine.masses[fine.masses > 0]

    def composed_tilted_mean(value):
        logs = np.log(m) + value * x
        w = np.exp(logs - logs.max())
        return 1000 * float(np.dot(w, x) / w.sum())

    low, high = 0.0, 100.0
    for _ in range(60):
        low, high = ((low + high) / 2, high) if composed_tilted_mean((low + high) / 2) < 8.47 else (low, (low + high) / 2)
    assert lam == pytest.approx(high, rel=0.05)
    assert saddle_estimate(components, "remove", 1e-20, 8.47) > 100 * lam
    assert comps.saddle_exponent(components, "remove", 1e-20, -1.0) == 0.0
    assert comps.saddle_exponent(components, "remove", 1e-20, 1e9) == 0.0  # beyond reach


@pytest.mark.slow
def test_tiny_delta_staged_chunks_read_their_rare_events():
    """sigma = 0.3, q = 1e-6, T = 1,000: at delta = 1e-10 eps = 8.47 is set by single hits
    far out in the tail, rarer than 1e-16 of a chunk's peak; with chunks summed untilted
    the staged lower chain stopped at 8.367 against the upper 8.471 (1.2 %)."""
    from dpforge.accounting import epsilon

    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 1000)])
    result = epsilon(description, 1e-10)
    assert result.accuracy["reached"]
    assert 0 < result.upper - result.lower <= 1e-3 * result.upper
    assert result.upper <= epsilon(description, 1e-10, engine="rdp").upper


def test_length_scale_makes_chunks_longer_within_the_sixteen_pieces():
    """length_scale s: chunks of about (s x _RESOLUTION h / bulk)^2 steps, still at least
    _MIN_PIECES of them."""
    component = flatten(Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 1_000_000)]))[0]
    step = 1.76e-4
    plans = {}
    for scale in (1.0, 2.0, 8.0):
        staged = comps.discretise_all([component], "remove", step, 1e-9, ("lower",), staged=True, length_scale=scale)["lower"]
        plans[scale] = sum(times for _, times in staged)
    assert plans[2.0] == pytest.approx(plans[1.0] / 4, rel=0.05)
    assert plans[8.0] == comps._MIN_PIECES


def test_one_scale_chunk_grid_is_capped_and_stays_certified(monkeypatch):
    """A one-scale chunk's fine grid over the whole range holds at most _ONE_SCALE_POINTS
    points: capped far below the default, the upper chunk's profile stays above the lower
    chunk's (and, 256x coarser, within a quarter of the uncapped upper one where delta is
    not tiny)."""
    component = flatten(Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 56_170)]))[0]
    step, tail, size = 1.76e-4, 1e-16, 5617
    fine = comps.bulk_spread(component.privacy_loss_distribution("remove")) / comps._FINE_RESOLUTION
    free = comps._one_scale_chunk(component, "remove", size, step, fine, tail, ("upper", "lower"))
    monkeypatch.setattr(comps, "_ONE_SCALE_POINTS", 2**14)
    steps_used = []
    original = comps.discretise_all
    monkeypatch.setattr(comps, "discretise_all", lambda parts, d, h, *a, **k: (steps_used.append(h), original(parts, d, h, *a, **k))[1])
    capped = comps._one_scale_chunk(component, "remove", size, step, 1e-12, tail, ("upper",))["upper"]
    cut = comps.truncation(component.privacy_loss_distribution("remove"), tail / (10.0 * size))
    assert steps_used == [pytest.approx((cut.high - cut.low) / 2**14)]
    upper, lower, uncapped = (_profile(m, DELTA_EPS) for m in (capped, free["lower"], free["upper"]))
    assert np.all(upper >= lower)
    big = uncapped > 1e-6
    assert np.all(upper[big] >= uncapped[big] * (1 - 1e-9))
    assert np.all(upper[big] - uncapped[big] <= 0.25 * uncapped[big])


def test_lifting_exponent_keeps_the_tilted_peak_at_the_bulk():
    """R with a tail heavier than exponential (log-masses convex): the saddle exponent
    would put the tilted peak at R's far end; the exponent kept is the largest (within
    the bisection) at which no term k >= 1 outweighs k = 0 at its largest entry, and a
    theta that already satisfies that is kept as it is."""
    from dpforge.accounting.prv.discretise import GridMeasure

    step = 1e-3
    x = np.arange(1, 3001) * step
    rest = GridMeasure(10, np.exp(-0.5 * np.log(x / 1e-3) ** 2) * 1e-6, step)  # log-normal-like tail
    coarse = [GridMeasure(-5, np.exp(-0.5 * (np.arange(-5, 6) / 2.0) ** 2) / 5.0, step) for _ in range(3)]
    chunk, terms = 100, 2

    def excess(theta):
        tops = []
        for k in range(terms + 1):
            rest_top = np.max(np.log(rest.masses) + theta * (rest.first_index + np.arange(rest.masses.size)) * step)
            c = coarse[k]
            top = np.max(np.log(c.masses) + theta * (c.first_index + np.arange(c.masses.size)) * step)
            tops.append(two_scale._log_binomial(chunk, k) + top + k * rest_top)
        return max(tops[1:]) - tops[0]

    high = 500.0
    assert excess(high) > 0  # the saddle-sized theta would lift R's end over the bulk
    kept = two_scale._lifting_exponent(coarse, rest, chunk, terms, high)
    assert 0 < kept < high and excess(kept) <= 0
    assert excess(kept * 1.01) > 0 or kept >= high / 1.01  # the largest, within the bisection
    small = 0.5 * kept
    assert two_scale._lifting_exponent(coarse, rest, chunk, terms, small) == small


def test_first_chunks_take_a_coarse_bulk_grid_and_a_finer_one_on_request(monkeypatch):
    """A log-normal bulk (sigma = 0.3, q = 1e-6) reaches 0.03 nats while its robust width
    is 2.8e-7: the first chunks hold at most _FIRST_FINE_POINTS bulk points, a chunk
    asked for ``fine_scale`` 8 (the refinement's untilted second round) up to
    _FINE_POINTS.  Both lower chunks stay below the upper chunk, and the coarse one is
    within 1e-4 of the fine one where delta is not tiny."""
    component = flatten(Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 1000)]))[0]
    step, tail, size = 1.17e-4, 1e-18, 1000
    sizes = []
    original = two_scale.compose_powers

    def recording(measure, counts, inner_tail):
        sizes.append(measure.masses.size)
        return original(measure, counts, inner_tail)

    monkeypatch.setattr(two_scale, "compose_powers", recording)
    coarse = comps._chunks(component, "remove", [size], step, tail, ("lower", "upper"))[size]
    first = list(sizes)
    fine = comps._chunks(component, "remove", [size], step, tail, ("lower",), fine_scale=8.0)[size]["lower"]
    finer = sizes[len(first) :]
    assert first and max(first) <= two_scale._FIRST_FINE_POINTS + 2
    assert finer and two_scale._FIRST_FINE_POINTS < max(finer) <= two_scale._FINE_POINTS + 2
    lower, refined, upper = (_profile(m, DELTA_EPS) for m in (coarse["lower"], fine, coarse["upper"]))
    assert np.all(lower <= upper) and np.all(refined <= upper)
    big = refined > 1e-6
    assert np.all(np.abs(lower[big] - refined[big]) <= 1e-4 * refined[big])
