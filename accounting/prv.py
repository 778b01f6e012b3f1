"""Certified PRV/PLD accountant: discretise, compose by FFT, bound both ways.

Pipeline (per neighbouring direction, DESIGN.md section 2):

1. every component's privacy-loss law is truncated to [l_lo, l_hi] (the mass outside
   is rounded up / moved to +inf for the upper bound, dropped for the lower bound);
2. it is discretised on a common grid of step h twice: a pessimistic
   "connect-the-dots" measure and an optimistic post-processing measure
   (:mod:`dpforge.accounting.discretise`);
3. the composition of all components is the convolution of those measures, computed as
   one product of discrete Fourier transforms, prod_i FFT(mu_i)^{count_i}, on a window
   chosen from Chernoff bounds of the composed discrete measure:
   Pr(S >= a) <= exp(Lambda(lam) - lam a), Lambda = sum_i count_i log E[e^{lam L_i}]
   (Gopi, Lee, Wutschitz 2021 use the same aliasing argument);
4. the wrapped (aliased) mass is non-negative, so it can only raise the upper sum; the
   mass above the window is added to the upper bound and the mass outside the window
   is subtracted from the lower bound;
5. floating-point round-off of the FFT is allowed for per entry (``roundoff`` below):
   the larger of the most negative entry (pure round-off) and a model
   4 u log2(n) max(p) (1 + sqrt(T)) -- an a-posteriori allowance, not a worst-case
   bound (DESIGN.md records this).

The profile of the composed measures gives delta_lower(eps) <= delta(eps) <=
delta_upper(eps); epsilon bounds are their inverses, and the profile of a dataset pair
is the maximum over the two directions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import fft as sp_fft
from scipy.special import logsumexp

from dpforge.accounting.discretise import GridMeasure, lower_measure, upper_measure
from dpforge.mechanisms.combinators import Component
from dpforge.mechanisms.pairs import Direction, PrivacyLoss

_U = np.finfo(float).eps / 2


@dataclass(frozen=True)
class ComposedProfile:
    """Composed discrete measure of one bound in one direction, ready to be queried.

    delta(eps) = constant + sum_{x_j > eps} w_j (1 - e^{eps - x_j}), clipped at 0, where
    w_j = max(p_j, 0) + roundoff for the upper bound and max(p_j - roundoff, 0) for the
    lower bound; ``constant`` is +(mass at +inf + mass above the window) for the upper
    bound and -(mass outside the window) for the lower bound.
    """

    kind: str
    positions: np.ndarray
    weights: np.ndarray
    constant: float
    roundoff: float
    grid_size: int

    def delta(self, epsilon: float) -> float:
        active = self.positions > epsilon
        x = self.positions[active]
        value = self.constant + float(np.dot(self.weights[active], -np.expm1(epsilon - x)))
        return max(value, 0.0)

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 with delta(eps) <= delta (inf when no eps qualifies)."""
        if self.constant >= delta:
            return math.inf
        if self.delta(0.0) <= delta:
            return 0.0
        keep = self.positions > 0
        x = self.positions[keep]
        w = self.weights[keep]
        if x.size == 0:
            return 0.0
        if x[-1] > 700:
            raise ValueError("privacy loss window exceeds 700 nats; epsilon this large is out of range")
        # suffix sums over entries strictly to the right
        suffix_a = np.cumsum(w[::-1])[::-1]
        suffix_b = np.cumsum((w * np.exp(-x))[::-1])[::-1]
        a_next = np.append(suffix_a[1:], 0.0)
        b_next = np.append(suffix_b[1:], 0.0)
        at_points = self.constant + a_next - np.exp(x) * b_next
        j = int(np.argmax(at_points <= delta))  # first grid point where the profile is <= delta
        if at_points[j] > delta:
            return math.inf
        a, b = suffix_a[j], suffix_b[j]
        left = x[j - 1] if j > 0 else 0.0
        if b <= 0:
            return float(x[j])
        value = (self.constant + a - delta) / b
        eps = math.log(value) if value > 0 else left
        return float(min(max(eps, left), x[j]))


def _log_mgf(measure: GridMeasure, lambdas: np.ndarray) -> np.ndarray:
    """log sum_j m_j exp(lam x_j) for each lam (finite part of the measure), exactly."""
    positive = measure.masses > 0
    if not positive.any():
        return np.full(lambdas.shape, -np.inf)
    x = measure.positions[positive]
    log_m = np.log(measure.masses[positive])
    return np.array([logsumexp(log_m + lam * x) for lam in lambdas])


def _moments(measure: GridMeasure) -> tuple[float, float]:
    total = measure.total_mass
    if total <= 0:
        return 0.0, 0.0
    x = measure.positions
    mean = float(np.dot(measure.masses, x) / total)
    return mean, float(np.dot(measure.masses, (x - mean) ** 2) / total)


def _chernoff_lambdas(measures: Sequence[tuple[GridMeasure, int]], tail: float) -> np.ndarray:
    """A few exponents around the Gaussian-optimal ones for both tails.

    Any lam gives a valid Chernoff bound; near-optimal ones give a tight window.  For a
    sum with variance S^2 the optimal lam for a tail of size ``tail`` is about
    sqrt(2 log(1/tail)) / S.
    """
    variance = sum(count * _moments(measure)[1] for measure, count in measures)
    spread = math.sqrt(max(variance, 1e-300))
    centre = math.sqrt(2.0 * math.log(1.0 / tail)) / max(spread, 1e-12)
    factors = np.array([0.35, 0.6, 0.85, 1.0, 1.2, 1.6, 2.5])
    lam = np.clip(centre * factors, 1e-6, 1e6)
    return np.concatenate([lam, -lam])


def compose(measures: Sequence[tuple[GridMeasure, int]], tail: float, kind: str) -> ComposedProfile:
    """Compose ``count`` copies of each measure on one FFT window (see module docstring)."""
    step = measures[0][0].step
    total_count = sum(count for _, count in measures)
    lam = _chernoff_lambdas(measures, tail)
    cumulant = np.zeros(lam.shape)
    for measure, count in measures:
        cumulant += count * _log_mgf(measure, lam)
    positive = lam > 0
    log_tail = math.log(tail)
    with np.errstate(invalid="ignore"):
        top = float(np.min((cumulant[positive] - log_tail) / lam[positive]))
        bottom = float(np.max((cumulant[~positive] - log_tail) / lam[~positive]))
    if not (math.isfinite(top) and math.isfinite(bottom)) or top < bottom:
        raise ValueError("composed privacy loss has no mass on the grid; check the mechanism parameters")
    size = sp_fft.next_fast_len(int(math.ceil((top - bottom) / step)) + 3, real=True)
    if size > 2**26:
        raise ValueError(
            f"the FFT window needs {size} points (limit 2**26); lower the accuracy or the number of steps"
        )
    log_spectrum = np.zeros(size // 2 + 1, dtype=complex)
    base = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for measure, count in measures:
            centre = int(round(measure.mean_index()))
            index = (measure.first_index + np.arange(measure.masses.size) - centre) % size
            placed = np.bincount(index, weights=measure.masses, minlength=size)
            log_spectrum += count * np.log(sp_fft.rfft(placed))
            base += count * (centre * step - measure.shift)
    composed = sp_fft.irfft(np.exp(log_spectrum), size)
    first = int(math.floor((bottom - base) / step))
    offsets = np.arange(first, first + size)
    positions = base + offsets * step
    masses = composed[offsets % size]
    # Chernoff bounds on the composed discrete measure beyond the window
    above = float(np.exp(np.min(cumulant[positive] - lam[positive] * (positions[-1] + 0.5 * step))))
    below = float(np.exp(np.min(cumulant[~positive] - lam[~positive] * (positions[0] - 0.5 * step))))
    peak = float(np.max(masses))
    roundoff = max(2.0 * max(0.0, -float(np.min(masses))), 4.0 * _U * math.log2(size) * peak * (1.0 + math.sqrt(total_count)))
    if kind == "upper":
        infinity = 1.0
        for measure, count in measures:
            infinity *= (1.0 - measure.infinity_mass) ** count
        constant = (1.0 - infinity) + above
        weights = np.maximum(masses, 0.0) + roundoff
    else:
        constant = -(above + below)
        weights = np.maximum(masses - roundoff, 0.0)
    return ComposedProfile(kind, positions, weights, constant, roundoff, size)


@dataclass(frozen=True)
class Truncation:
    """Per-component truncation range of the privacy loss in one direction."""

    low: float
    high: float


@functools.lru_cache(maxsize=4096)
def truncation(loss: PrivacyLoss, tail: float) -> Truncation:
    """Range outside which the loss has at most ``tail`` mass on each side (cached)."""
    return Truncation(loss.lower_quantile(tail), loss.upper_quantile(tail))


def directions_for(components: Sequence[Component]) -> tuple[Direction, ...]:
    """Both directions unless every component is symmetric (then they coincide)."""
    return ("remove",) if all(c.symmetric for c in components) else ("remove", "add")


def discretise_all(
    components: Sequence[Component], direction: Direction, step: float, tail: float, kinds: Sequence[str]
) -> dict[str, list[tuple[GridMeasure, int]]]:
    """Discretise every component for each requested bound kind ('upper', 'lower')."""
    total = sum(c.count for c in components)
    out: dict[str, list[tuple[GridMeasure, int]]] = {k: [] for k in kinds}
    for component in components:
        loss = component.privacy_loss_distribution(direction)
        cut = truncation(loss, tail / (10.0 * total))
        for kind in kinds:
            build = upper_measure if kind == "upper" else lower_measure
            out[kind].append((build(loss, step, cut.low, cut.high), component.count))
    return out


def loss_moments(components: Sequence[Component], direction: Direction, tail: float) -> tuple[float, float, float]:
    """(mean, variance, width) of the composed privacy loss under P, from coarse grids."""
    total = sum(c.count for c in components)
    mean = variance = 0.0
    widths = []
    for component in components:
        loss = component.privacy_loss_distribution(direction)
        cut = truncation(loss, tail / (10.0 * total))
        span = max(cut.high - cut.low, 1e-9)
        widths.append(span)
        coarse = upper_measure(loss, span / 4000.0, cut.low, cut.high)
        x = coarse.positions
        m = coarse.masses / max(coarse.total_mass, 1e-300)
        mu = float(np.dot(m, x))
        mean += component.count * mu
        variance += component.count * float(np.dot(m, (x - mu) ** 2))
    return mean, variance, float(max(widths))


def atom_aligned_step(components: Sequence[Component], direction: Direction, step: float) -> float:
    """Shrink ``step`` so that the atoms of the privacy loss (Laplace, randomised response)
    are whole numbers of steps apart.

    The optimistic measure rounds every atom down onto the grid shifted by one common
    offset; when the gaps between atoms are multiples of the step, that offset puts
    every atom (just above) a grid point and the rounding costs nothing.
    """
    atoms = sorted({float(a) for c in components for a in c.privacy_loss_distribution(direction).atoms})
    if len(atoms) < 2:
        return step
    gaps = np.array(atoms[1:]) - atoms[0]
    span = float(gaps[-1])
    first = max(1, int(math.ceil(span / step)))
    counts = np.arange(first, first + 4096)
    candidates = span / counts
    ratio = gaps[None, :] / candidates[:, None]
    cost = np.abs(ratio - np.round(ratio)).sum(axis=1)
    good = np.flatnonzero(cost < 1e-3 * len(atoms))
    best = int(good[0]) if good.size else int(np.argmin(cost))
    return float(candidates[best])
