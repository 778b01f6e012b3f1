"""The binomial split of a tilted composition (:mod:`dpforge.accounting.prv.tilt_split`).

Checked against direct convolutions (the kept terms sum_{k <= K} C(T, k) B^{*(T-k)} *
R^{*k} formed term by term, and the whole omega^{*T}), and end to end against the whole
tilted composition, at the same width and at a tenth of it.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from dpforge.accounting import epsilon
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.accounting.prv.tilt_split import dropped_mass, split_composition
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled


def _power(row: np.ndarray, count: int) -> np.ndarray:
    out = np.ones(1)
    for _ in range(count):
        out = np.convolve(out, row)
    return out


def _rare_tail_measure() -> tuple[GridMeasure, np.ndarray]:
    """A one-step measure with a narrow bulk near 0 and a thin tail far above it (as a
    subsampled step's), and its masses tilted by e^{x} (normalised)."""
    masses = np.zeros(60)
    masses[:12] = np.exp(-0.5 * ((np.arange(12) - 5.0) / 2.0) ** 2)
    masses[:12] /= masses[:12].sum()
    masses[30:60] = 1e-12  # 3e-11 of tail from 0.28 to 0.57
    measure = GridMeasure(first_index=-2, masses=masses, step=0.01)
    tilted = masses * np.exp(measure.positions)
    return measure, tilted / tilted.sum()


def test_the_kept_terms_match_a_direct_convolution_and_the_dropped_mass_is_bounded():
    measure, tilted = _rare_tail_measure()
    count, tail, log_tail = 50, 1e-16, math.log(1e-16)
    split = split_composition(measure, count, tilted, tail, log_tail, (-100.0, 100.0), extended=False)
    assert split is not None and split.terms >= 1
    cut = int(round((split.split + measure.shift) / measure.step)) - measure.first_index + 1  # first entry of R
    bulk, rest = tilted.copy(), tilted.copy()
    bulk[cut:], rest[:cut] = 0.0, 0.0
    # sum_{k <= K} C(T, k) B^{*(T-k)} * R^{*k}, every term on the lattice from first_index * T
    size = count * tilted.size
    kept = np.zeros(size)
    for k in range(split.terms + 1):
        term = math.comb(count, k) * np.convolve(_power(bulk, count - k), _power(rest, k))
        kept[: term.size] += term
    positions = (count * measure.first_index + np.arange(size)) * measure.step - count * measure.shift
    index = np.rint((split.positions - positions[0]) / measure.step).astype(int)
    inside = np.zeros(size, dtype=bool)
    inside[index] = True
    # the window holds all but the Chernoff-bounded mass beyond it ...
    assert kept[~inside].sum() <= split.above_tilted + split.below_tilted
    # ... and each entry is the kept sum's, within the allowance and what can wrap in
    assert np.max(np.abs(split.masses - kept[index])) <= split.roundoff + split.above_tilted + split.below_tilted
    assert split.roundoff < 1e-12  # the comparison is not vacuous: entries reach 0.1
    assert np.max(kept) > 0.01
    # the dropped terms' untilted mass: omega^{*T} less the kept terms, untilted
    untilted_bulk, untilted_rest = measure.masses.copy(), measure.masses.copy()
    untilted_bulk[cut:], untilted_rest[:cut] = 0.0, 0.0
    rho = untilted_rest.sum()
    exact_dropped = sum(math.comb(count, k) * untilted_bulk.sum() ** (count - k) * rho**k for k in range(split.terms + 1, count + 1))
    assert exact_dropped <= split.dropped <= 2.0 * exact_dropped + 1e-300
    assert split.dropped <= 0.1 * tail


def test_dropped_mass_bounds_the_binomial_tail():
    for count, rho, terms in [(10**7, 4.4e-15, 1), (773_000, 5.3e-12, 2), (50, 6e-4, 3), (1000, 1e-4, 1)]:
        exact = sum(math.comb(count, k) * rho**k for k in range(terms + 1, min(count, terms + 40) + 1))
        assert exact <= dropped_mass(count, rho, terms) <= 1.5 * exact
    assert dropped_mass(100, 0.05, 1) == math.inf  # T rho = 5 >= K + 2


def test_dropped_mass_covers_a_bulk_over_one():
    """An upper measure's masses can sum to a little over 1 (its error cover): at T = 1e7
    a bulk of 1 + 1e-13 makes |B|^(T-k) 1 + 1e-6, more than the bound's own slack (a
    reviewer's mpmath check found it 8.8e-7 short without the factor)."""
    import mpmath as mp

    count, rho, terms, bulk = 10**7, 4.4e-15, 1, 1.0 + 1e-13
    with mp.workdps(40):
        exact = mp.fsum(mp.binomial(count, k) * mp.mpf(bulk) ** (count - k) * mp.mpf(rho) ** k for k in range(terms + 1, terms + 30))
    assert exact <= dropped_mass(count, rho, terms, bulk) <= 1.01 * exact
    assert dropped_mass(count, rho, terms) < exact  # without it: short


def test_no_split_where_nothing_is_rare():
    """A one-step law with no thin tail (a Gaussian's shape): no split halves its window."""
    x = np.arange(-40, 41)
    masses = np.exp(-0.5 * (x / 10.0) ** 2)
    masses /= masses.sum()
    measure = GridMeasure(first_index=-40, masses=masses, step=0.01)
    tilted = masses * np.exp(2.0 * measure.positions)
    tilted /= tilted.sum()
    assert split_composition(measure, 1000, tilted, 1e-20, math.log(1e-20), (-3.0, 3.0), extended=False) is None


def _bracket_with(monkeypatch, split: bool, description, target):
    """epsilon() with the split tried on every tilted composition of one measure (these
    workloads' windows are under the engine's ``_MIN_POINTS``), or never; and whether
    each try split."""
    tilt = importlib.import_module("dpforge.accounting.prv.tilt")
    monkeypatch.setattr(importlib.import_module("dpforge.accounting.prv.tilt_split"), "_MIN_POINTS", 0)
    original = tilt.split_composition
    used = []

    def spy(*args, **kwargs):
        out = original(*args, **kwargs) if split else None
        used.append(out is not None)
        return out

    monkeypatch.setattr(tilt, "split_composition", spy)
    result = epsilon(description, target)
    monkeypatch.setattr(tilt, "split_composition", original)
    return result, used


@pytest.mark.parametrize(
    "sigma, rate, steps, target",
    [(0.8, 1e-4, 20_000, 1e-12), (0.6, 1e-5, 200_000, 1e-10)],
)
def test_a_split_upper_chain_agrees_with_the_whole_one(monkeypatch, sigma, rate, steps, target):
    """Both brackets are certified, so they must overlap; the split is taken, and its
    bracket is as tight as asked."""
    description = Composed([(PoissonSampled(Gaussian(sigma), rate), steps)])
    with_split, used = _bracket_with(monkeypatch, True, description, target)
    whole, _ = _bracket_with(monkeypatch, False, description, target)
    assert any(used)
    assert max(with_split.lower, whole.lower) <= min(with_split.upper, whole.upper)
    assert with_split.accuracy["achieved"] <= 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("target", [1e-10, 1e-12])
def test_a_split_chain_meets_a_tighter_whole_chain(monkeypatch, target):
    """The split bracket at the default width overlaps the whole chain's at a tenth of it
    (the whole chain is checked against mpmath and dp-accounting references in
    ``test_tiny_delta``).  dp-accounting's PLD is no reference here: at 1e-12 its
    pessimistic estimate read 2.37, 0.764 and 0.701 at three discretisations (value
    interval and mass truncation), against [0.77581, 0.77610] from both chains."""
    description = Composed([(PoissonSampled(Gaussian(0.8), 1e-4), 20_000)])
    result, used = _bracket_with(monkeypatch, True, description, target)
    assert any(used)
    tilt = importlib.import_module("dpforge.accounting.prv.tilt")
    monkeypatch.setattr(tilt, "split_composition", lambda *args, **kwargs: None)
    tight = epsilon(description, target, relative_accuracy=1e-4)
    assert tight.accuracy["reached"]
    assert result.lower <= tight.upper and tight.lower <= result.upper


@pytest.mark.slow
def test_the_corner_sweeps_slowest_call_meets_the_width_on_a_split_window(monkeypatch):
    """sigma = 0.6, q = 1e-6, T = 1e7 at delta = 1e-10: composed whole, the tilted upper
    chain's window spanned 13.5 nats and the width took it past its limit (10M points in
    long double, then 15.6M); split after one large loss (K = 1 at c near 0.1 nats), the
    window spans about 2 nats and the width is met with every upper chain within 2^21
    points.  Cross-check: RDP's upper bound lies above the bracket."""
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")
    sizes = []
    original = evaluate.evaluate

    def recording(components, step, tail, kinds=("upper", "lower"), **options):
        out = original(components, step, tail, kinds, **options)
        if tuple(kinds) == ("upper",):
            sizes.append(out.grid_size)
        return out

    monkeypatch.setattr(evaluate, "evaluate", recording)
    description = Composed([(PoissonSampled(Gaussian(0.6), 1e-6), 10_000_000)])
    result = epsilon(description, 1e-10)
    assert result.accuracy["reached"] and result.upper - result.lower <= 1e-3 * result.upper
    assert sizes and max(sizes) <= 2**21
    assert 0.17 < result.lower and result.upper <= epsilon(description, 1e-10, engine="rdp").upper


def test_a_split_is_tried_only_on_windows_the_engine_would_compose_whole():
    """Small windows are not worth the plan's passes; a window over the memory budget is
    refused whole, and so is its split (sigma = 1.18, q = 1.1e-9, T = 22 at delta =
    1.8e-267: split windows of 18M points took the call from 31 s to 96 s)."""
    from dpforge.accounting.prv.limits import memory_budget
    from dpforge.accounting.prv.tilt_split import worth_splitting

    assert not worth_splitting(2**17)
    assert worth_splitting(2**20)
    with memory_budget(2**20):
        assert not worth_splitting(2**20)
