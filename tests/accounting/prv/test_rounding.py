"""The floating-point error model of the distribution functions (accounting/prv/rounding.py)
and what rests on it: the optimistic measure's labels, whose losses are read off
differences of those functions, lie at or below their exact losses (mpmath)."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from dpforge.accounting.prv import discretise, rounding
from dpforge.accounting.prv.components import truncation
from dpforge.accounting.prv.discrete_loss import DiscreteLoss
from dpforge.mechanisms import Gaussian, Laplace, PoissonSampled
from dpforge.mechanisms.combinators import flatten

mp.mp.dps = 60


def _law(kind: str, scale: float, rate: float, direction: str):
    base = Gaussian(scale) if kind == "gaussian" else Laplace(scale)
    return flatten(PoissonSampled(base, rate))[0].privacy_loss_distribution(direction)


def _base_functions(kind: str, scale: float, r):
    """(Pr_Q0(r' <= r), Pr_Q0(r' > r), Pr_P0(r' <= r), Pr_P0(r' > r)) of the base pair's
    log-likelihood ratio r', exactly (r not at an atom)."""
    if kind == "gaussian":  # P0 = N(mu, 1), Q0 = N(0, 1), r'(x) = mu x - mu^2/2
        mu = 1 / mp.mpf(scale)
        x = (r + mu**2 / 2) / mu
        return mp.ncdf(x), mp.ncdf(-x), mp.ncdf(x - mu), mp.ncdf(mu - x)
    b = mp.mpf(scale)  # P0 = Laplace(1, b), Q0 = Laplace(0, b), r' = (|x| - |x - 1|)/b

    def cdf(t, loc):
        return mp.exp((t - loc) / b) / 2 if t < loc else 1 - mp.exp(-(t - loc) / b) / 2

    if r >= 1 / b:
        return mp.mpf(1), mp.mpf(0), mp.mpf(1), mp.mpf(0)
    if r < -1 / b:
        return mp.mpf(0), mp.mpf(1), mp.mpf(0), mp.mpf(1)
    x = (r * b + 1) / 2
    return cdf(x, 0), 1 - cdf(x, 0), cdf(x, 1), 1 - cdf(x, 1)


def _exact_functions(kind: str, scale: float, rate: float, direction: str, ell: float):
    """(Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l)) of the subsampled law
    (remove: P = (1-q) Q0 + q P0, Q = Q0; add: P = Q0, Q = (1-q) Q0 + q P0)."""
    q = mp.mpf(rate)
    y = mp.mpf(ell) if direction == "remove" else -mp.mpf(ell)
    if rate < 1 and y <= mp.log1p(-q):
        below = (mp.mpf(0), mp.mpf(1))
        return below + below if direction == "remove" else (mp.mpf(1), mp.mpf(0), mp.mpf(1), mp.mpf(0))
    r = mp.log(mp.expm1(y) + q) - mp.log(q) if rate < 1 else y
    below_q0, above_q0, below_p0, above_p0 = _base_functions(kind, scale, r)
    mixed_below, mixed_above = (1 - q) * below_q0 + q * below_p0, (1 - q) * above_q0 + q * above_p0
    if direction == "remove":
        return mixed_below, mixed_above, below_q0, above_q0
    return above_q0, below_q0, mixed_above, mixed_below


LAWS = [
    ("gaussian", 0.6, 1e-4),
    ("gaussian", 1.0, 1e-3),
    ("gaussian", 0.3, 1e-6),
    ("gaussian", 5.0, 1.0),
    ("gaussian", 100.0, 0.01),
    ("gaussian", 1000.0, 1e-3),
    ("laplace", 2.0, 0.01),
    ("laplace", 1.0, 1.0),
]


@pytest.mark.parametrize("kind, scale, rate", LAWS)
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_modelled_errors_cover_the_computed_distribution_functions(kind, scale, rate, direction):
    loss = _law(kind, scale, rate, direction)
    cut = truncation(loss, 1e-14)
    ell = np.linspace(cut.low, cut.high, 203)[1:-1]
    values = loss.distribution_functions(ell)
    errors = rounding.function_errors(loss, ell, values)
    worst = 0.0
    for i, point in enumerate(ell):
        exact = _exact_functions(kind, scale, rate, direction, float(point))
        for j in range(4):
            actual = abs(float(mp.mpf(float(values[j][i])) - exact[j]))
            assert actual <= errors[j][i], (point, j, values[j][i], actual, errors[j][i])
            worst = max(worst, actual / errors[j][i])
    # the model is a bound, not a loose guess: the worst value uses a good part of it
    assert worst > 1e-3


cells_of = discretise._cell_masses


def _spy_labels(monkeypatch):
    """Record the cell edges, the routing's fractions and the labels (kept masses, loss
    bounds) of an optimistic discretisation."""
    calls = {"edges": [], "labels": []}
    cells, base_cells = discretise._cell_masses, discretise._base_cell_masses
    labels, mixture_labels = discretise._label_losses, discretise._mixture_label_losses

    def spy_cells(loss, edges):
        calls["edges"].append(np.array(edges))
        return cells(loss, edges)

    def spy_base_cells(loss, edges):
        calls["edges"].append(np.array(edges))
        return base_cells(loss, edges)

    def spy_labels(*args):  # args[6] is the routing's fractions pi
        kept, lowest, widest = labels(*args)
        calls["labels"].append((args[6], kept, lowest))
        return kept, lowest, widest

    def spy_mixture_labels(*args):
        kept, lowest, widest = mixture_labels(*args)
        calls["labels"].append((args[6], kept, lowest))
        return kept, lowest, widest

    monkeypatch.setattr(discretise, "_cell_masses", spy_cells)
    monkeypatch.setattr(discretise, "_base_cell_masses", spy_base_cells)
    monkeypatch.setattr(discretise, "_label_losses", spy_labels)
    monkeypatch.setattr(discretise, "_mixture_label_losses", spy_mixture_labels)
    return calls


@pytest.mark.parametrize(
    "kind, scale, rate, direction, step",
    [
        ("gaussian", 0.6, 1e-4, "remove", 2.5e-4),  # the law of the T = 1e6 workload, a fine grid
        ("gaussian", 0.6, 1e-4, "add", 2.5e-4),
        ("gaussian", 1.0, 0.01, "remove", 1e-3),
        ("gaussian", 2.0, 1.0, "remove", 1e-3),  # unsampled: P and Q from separate parts
        ("laplace", 2.0, 0.01, "remove", 1e-3),
        ("laplace", 10.0, 1e-6, "add", 4e-10),  # losses of 1e-7, where ulps of 1 were too wide
    ],
)
def test_optimistic_labels_lie_at_or_below_their_exact_losses(monkeypatch, kind, scale, rate, direction, step):
    """Each label of the routing keeps no more P-mass than it has, and its loss bound is
    at most its exact loss log P_k/Q_k (from mpmath cell masses and the routing's own
    fractions).  The log P_k/Q_k computed from the mixed masses is off by far more than a
    few ulps on the fine Gaussian grids (cell masses are differences of values near 1/2),
    which the test also checks, so a margin of ulps alone would not do."""
    loss = _law(kind, scale, rate, direction)
    cut = truncation(loss, 1e-12)
    calls = _spy_labels(monkeypatch)
    discretise.lower_measure(loss, step, cut.low, cut.high)
    (grid,), ((pi, kept, lowest),) = calls["edges"], calls["labels"]
    size = grid.size
    m, n = cells_of(loss, grid)[:2]
    heaviest = np.argsort(kept)[::-1][:150]
    spread = np.linspace(1, size - 2, 150).astype(int)
    labels = sorted({int(k) for k in np.concatenate([heaviest, spread]) if 0 < k < size - 1})
    edges = sorted({e for k in labels for e in (k - 1, k, k + 1)})
    functions = {e: _exact_functions(kind, scale, rate, direction, float(grid[e])) for e in edges}

    def cell(c, under):  # exact mass of (grid[c], grid[c+1]] under P (0) or Q (2)
        return functions[c + 1][under] - functions[c][under]

    beyond_ulps = 0
    for k in labels:
        if kept[k] <= 0.0:
            continue
        p_exact = pi[k] * cell(k, 0) + (1 - pi[k - 1]) * cell(k - 1, 0)
        q_exact = pi[k] * cell(k, 2) + (1 - pi[k - 1]) * cell(k - 1, 2)
        assert kept[k] <= p_exact
        loss_exact = mp.log(p_exact / q_exact)
        assert lowest[k] <= loss_exact, (k, lowest[k], float(loss_exact))
        p_label = pi[k] * m[k] + (1 - pi[k - 1]) * m[k - 1]
        q_label = pi[k] * n[k] + (1 - pi[k - 1]) * n[k - 1]
        computed = np.log(p_label) - np.log(q_label)
        if abs(mp.mpf(computed) - loss_exact) > 64 * np.finfo(float).eps * max(1.0, abs(computed)):
            beyond_ulps += 1
    if kind == "gaussian" and rate < 1e-3:
        assert beyond_ulps > 0


def test_an_edge_on_the_pile_at_log_one_minus_q_keeps_the_pile(monkeypatch):
    """sigma = 0.172, q = 9e-7 (remove) piles 1 - q of its mass just above log(1 - q),
    where the distribution functions are ill-conditioned (1.2e-3 of modelled error).  The
    phase search put a fine grid's edge there; the cells on either side were differenced
    from different functions, so that error counted against the label holding both, which
    kept 0.9975 of the law: after 11,862 steps the staged lower chain had nothing left and
    a valid call raised ParameterError.  Now the label keeps the pile, and its loss bound
    still lies at or below the exact loss (mpmath)."""
    rate = 9e-7
    loss = _law("gaussian", 0.172, rate, "remove")
    step = 4.061114474877661e-05
    low = float(np.log1p(-rate))
    high = truncation(loss, 1e-12).high
    calls = _spy_labels(monkeypatch)
    measure = discretise.lower_measure(loss, step, low, high, phase=low % step)
    (grid,), ((pi, kept, lowest),) = calls["edges"], calls["labels"]
    pile = int(np.argmin(np.abs(grid - low)))
    assert abs(grid[pile] - low) < 1e-15  # the edge sits on the pile
    assert measure.masses.sum() > 1.0 - 1e-6
    functions = {e: _exact_functions("gaussian", 0.172, rate, "remove", float(grid[e])) for e in range(pile - 2, pile + 4)}
    for k in range(pile - 1, pile + 3):
        if kept[k] <= 0.0:
            continue
        p_exact = sum(w * (functions[c + 1][0] - functions[c][0]) for c, w in ((k, pi[k]), (k - 1, 1 - pi[k - 1])))
        q_exact = sum(w * (functions[c + 1][2] - functions[c][2]) for c, w in ((k, pi[k]), (k - 1, 1 - pi[k - 1])))
        assert kept[k] <= p_exact
        assert lowest[k] <= mp.log(p_exact / q_exact), (k, lowest[k])


def test_a_discrete_law_sums_its_cells_within_the_bound():
    rng = np.random.default_rng(3)
    positions = np.sort(rng.uniform(-2.0, 3.0, 5000))
    masses = rng.random(5000) * np.exp(-30 * rng.random(5000))
    law = DiscreteLoss(positions, masses)
    edges = np.linspace(-2.5, 3.5, 301)
    m, n, error_m, error_n = law.cell_masses(edges)
    for i in range(edges.size - 1):
        inside = (positions > edges[i]) & (positions <= edges[i + 1])
        exact_m = mp.fsum(mp.mpf(float(v)) for v in masses[inside])
        exact_n = mp.fsum(mp.mpf(float(v)) * mp.exp(-mp.mpf(float(x))) for v, x in zip(masses[inside], positions[inside]))
        assert abs(mp.mpf(float(m[i])) - exact_m) <= error_m[i]
        assert abs(mp.mpf(float(n[i])) - exact_n) <= error_n[i]
    assert m.sum() == pytest.approx(masses.sum(), rel=1e-12)


def _exact_profile(kind, scale, rate, direction, epsilon):
    """delta(eps) = Pr_P(L > eps) - e^eps Pr_Q(L > eps) in mpmath."""
    _, above_p, _, above_q = _exact_functions(kind, scale, rate, direction, epsilon)
    return above_p - mp.exp(mp.mpf(epsilon)) * above_q


def _measure_profile(measure, epsilon):
    """The profile of a grid measure in mpmath: sum_x p_x (1 - e^{eps - x})_+ + p_inf,
    at the exact positions (first_index + j) * step - shift."""
    eps = mp.mpf(epsilon)
    total = mp.mpf(measure.infinity_mass)
    step, shift = mp.mpf(measure.step), mp.mpf(measure.shift)
    for j in np.flatnonzero(measure.masses):
        x = (measure.first_index + int(j)) * step - shift
        if x > eps:
            total += mp.mpf(float(measure.masses[j])) * (1 - mp.exp(eps - x))
    return total


@pytest.mark.parametrize(
    "kind, scale, rate, direction, points",
    [
        ("gaussian", 1.0, 0.01, "remove", 400),
        ("gaussian", 1.0, 0.01, "add", 400),
        ("gaussian", 100.0, 1e-6, "remove", 300),  # losses of 1e-7: the parts' errors scaled by |1 - q - e^l|
        ("gaussian", 2.0, 1.0, "add", 300),
        ("laplace", 10.0, 1e-6, "remove", 300),
    ],
)
def test_pessimistic_measure_lies_above_the_exact_profile(kind, scale, rate, direction, points):
    """Connect the dots from computed distribution functions, with the cover of their
    modelled errors, at or above mpmath's profile at grid points and between them."""
    mp.mp.dps = 40
    loss = _law(kind, scale, rate, direction)
    cut = truncation(loss, 1e-12)
    step = (cut.high - cut.low) / points
    measure = discretise.upper_measure(loss, step, cut.low, cut.high)
    positions = (measure.first_index + np.arange(measure.masses.size)) * step - measure.shift
    inside = positions[(positions > cut.low) & (positions < cut.high)]
    chosen = np.concatenate([inside[:: max(1, inside.size // 12)], inside[::37][:6] + 0.5 * step])
    for epsilon in chosen:
        exact = _exact_profile(kind, scale, rate, direction, float(epsilon))
        assert _measure_profile(measure, float(epsilon)) >= exact, (epsilon, exact)
    mp.mp.dps = 60


def _direct_power(masses: np.ndarray, count: int) -> np.ndarray:
    """masses convolved with itself ``count`` times, directly (every term positive, so
    each entry is within a few ulps per term of the exact sum)."""
    result, base = np.array([1.0]), masses.copy()
    while count:
        if count & 1:
            result = np.convolve(result, base)
        count >>= 1
        if count:
            base = np.convolve(base, base)
    return result


@pytest.mark.parametrize(
    "kind, scale, rate, count, step, exponent",
    [
        ("laplace", 2.0, 0.01, 1000, 1.626361871734663e-4, 51.9566252660544),
        ("gaussian", 1.0, 0.01, 200, 1e-2, None),
        ("gaussian", 0.8, 0.1, 100, 1e-2, None),
    ],
)
def test_fft_composition_stays_within_its_allowance_of_a_direct_convolution(kind, scale, rate, count, step, exponent):
    """Each entry of the FFT composition of an optimistic measure lies within the
    per-entry round-off allowance of the direct convolution, and so the lower profile
    read off it lies below the direct one's (at delta = 1e-13 the allowance of
    u (T + log2 n) max p put Laplace's lower eps above its upper eps)."""
    from dpforge.accounting.prv.compose import compose

    loss = _law(kind, scale, rate, "remove")
    cut = truncation(loss, 1e-17)
    measure = discretise.lower_measure(loss, step, cut.low, cut.high, zoom=1, exponent=exponent, search=(24, 4.0))
    composed = compose([(measure, count)], 1e-17)
    direct = _direct_power(measure.masses, count)
    first = count * measure.first_index
    index = np.rint((composed.positions + count * measure.shift) / step).astype(np.int64) - first
    inside = (index >= 0) & (index < direct.size)
    errors = np.abs(composed.masses[inside] - direct[index[inside]])
    assert errors.max() <= composed.roundoff
    positions = (first + np.arange(direct.size)) * step - count * measure.shift
    profile = composed.lower_profile()
    for epsilon in np.quantile(positions[direct > 1e-20], [0.5, 0.9, 0.99, 0.999]):
        above = positions > epsilon
        exact = float(np.dot(direct[above], -np.expm1(epsilon - positions[above])))
        assert profile.delta(float(epsilon)) <= exact * (1 + 1e-9)


def test_the_measure_that_exceeded_the_old_allowance_stays_within_the_new_one():
    """A stored optimistic measure (Laplace b = 2, q = 0.01, at the engine's first grid
    for delta = 1e-13) whose 1000-fold FFT composition had an entry 1.28 u (T + log2 n)
    max p off the direct convolution: the allowance of 4u (T + log2 n) max p covers it,
    the old one would not."""
    import json
    from pathlib import Path

    from dpforge.accounting.prv.compose import _U, compose

    data = json.loads((Path(__file__).parent / "fft_roundoff_measure.json").read_text())
    step, count = data["step"], 1000
    measure = discretise.GridMeasure(data["first_index"], np.array(data["masses"]), step, data["shift"], 0.0)
    composed = compose([(measure, count)], 1e-17)
    direct = _direct_power(measure.masses, count)
    index = np.rint((composed.positions + count * measure.shift) / step).astype(np.int64) - count * measure.first_index
    inside = (index >= 0) & (index < direct.size)
    worst = float(np.abs(composed.masses[inside] - direct[index[inside]]).max())
    old_allowance = _U * (count + np.log2(composed.grid_size)) * float(composed.masses.max())
    assert old_allowance < worst <= composed.roundoff
