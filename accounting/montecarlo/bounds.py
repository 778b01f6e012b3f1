"""The statistics of the Monte-Carlo accountant: empirical-Bernstein confidence bounds on
a grid of epsilon values, the pilot's predictions, the samples a target needs, the grid
of the main run and the crossing of delta.

**Confidence.**  For n independent terms Z = Y / B in [0, 1] with sample mean Z̄ and
unbiased sample variance V, the empirical Bernstein inequality of Maurer & Pontil (2009,
Theorem 4) gives, with probability at least 1 - b,

    E[Y] <= B (Z̄ + sqrt(2 V ln(2/b) / n) + 7 ln(2/b) / (3 (n - 1))),

and the same bound below (applied to 1 - Z) gives the lower confidence bound.  With two
neighbouring directions each uses b = beta / 2 (union bound; beta = 1 - confidence);
``log_term`` below is ln(2/b).  B(eps) is the moment bound of the importance-sampling
terms (Wang, Mahloujifar, Wu, Jia & Mittal 2023; :mod:`.directions`), which the upper
bound never exceeds.

**Pilot.**  A pilot sample at tilt lam_p predicts, by reweighting, the mean and the
variance of the terms of a main run at another tilt lam_m; these fix the main run's tilt
and grid before it is drawn, and predict the samples needed when a target is out of
reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpforge.accounting.montecarlo.directions import _Direction
from dpforge.errors import LimitError


@dataclass(frozen=True)
class _GridBounds:
    """Point estimate, upper and lower bounds of delta at every grid point, with the
    statistics they came from (mean and variance of Z, log B)."""

    grid: np.ndarray
    estimate: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    mean_z: np.ndarray
    var_z: np.ndarray
    log_bound: np.ndarray


def _bernstein(sums: np.ndarray, squares: np.ndarray, n: int, log_term: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, unbiased variance, empirical-Bernstein margin) of terms in [0, 1]."""
    mean = sums / n
    if n < 2:
        return mean, np.full_like(mean, 0.25), np.full_like(mean, np.inf)
    var = np.maximum((squares - sums * mean) / (n - 1), 0.0)
    margin = np.sqrt(2.0 * var * log_term / n) + 7.0 * log_term / (3.0 * (n - 1))
    return mean, var, margin


def _scaled(log_b: np.ndarray, z: np.ndarray) -> np.ndarray:
    """B * z computed as exp(log B + log z) (B may overflow where z underflows); z >= 0."""
    with np.errstate(divide="ignore"):
        return np.exp(log_b + np.log(np.maximum(z, 0.0)))


def _grid_bounds(direction: _Direction, lam: float, grid: np.ndarray, sums, squares, n: int, log_term: float) -> _GridBounds:
    """The bounds at every grid point from the main run's sums of Z and Z^2 (exactly 0 at
    and beyond the largest possible loss)."""
    log_b = np.array([direction.log_bound(lam, e) for e in grid])
    mean, var, margin = _bernstein(sums, squares, n, log_term)
    # B * min(mean + margin, 1) never exceeds the moment bound B itself
    upper = np.minimum(_scaled(log_b, np.minimum(mean + margin, 1.0)), 1.0)
    lower = _scaled(log_b, mean - margin)
    estimate = _scaled(log_b, mean)
    exact_zero = grid >= direction.max_loss
    upper = np.where(exact_zero, 0.0, upper)
    estimate = np.where(exact_zero, 0.0, estimate)
    lower = np.where(exact_zero, 0.0, lower)
    return _GridBounds(grid, estimate, upper, lower, mean, var, log_b)


def _samples_needed(log_b: np.ndarray, mean: np.ndarray, var: np.ndarray, delta: float, log_term: float) -> float:
    """Smallest n with B (mean + sqrt(2 var L/n) + 7L/(3n)) <= delta at some point (inf if none)."""
    room = np.exp(np.log(delta) - log_b) - mean  # (delta / B) - mean
    ok = room > 0
    if not ok.any():
        return math.inf
    a = 7.0 * log_term / 3.0
    b = np.sqrt(2.0 * var[ok] * log_term)
    c = room[ok]
    x = (-b + np.sqrt(b * b + 4.0 * a * c)) / (2.0 * a)  # x = 1/sqrt(n)
    return float(np.min(1.0 / (x * x)) + 1.0)


def _plain_samples_needed(delta: float, log_term: float) -> int:
    """n with 7 ln(2/b) / (3 (n - 1)) < delta: necessary for plain sampling (B = 1)."""
    return int(math.floor(7.0 * log_term / (3.0 * delta))) + 2


def _too_small(delta: float, samples: int, confidence: float, needed: float, how: str) -> LimitError:
    """The error for a delta below what ``samples`` can certify, with the samples needed."""
    need = "an unbounded number of" if not math.isfinite(needed) else f"about {needed:.3g}"
    return LimitError(
        f"delta={delta:g} is smaller than the montecarlo engine can certify with samples={samples} at "
        f"confidence={confidence:g} ({how}); it would need {need} samples"
    )


def _pilot_stats(
    direction: _Direction, losses: np.ndarray, lam_p: float, lam_m: float, candidates: np.ndarray, log_term: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From pilot losses drawn at tilt lam_p: per candidate eps, (log B_m, E[Z_m], Var[Z_m])
    predicted for the main run at tilt lam_m (second moment by reweighting)."""
    k_p, k_m = direction.log_mgf(lam_p), direction.log_mgf(lam_m)
    log_b_m = np.array([direction.log_bound(lam_m, e) for e in candidates])
    n = len(losses)
    mean = np.zeros(len(candidates))
    second = np.zeros(len(candidates))
    positive = losses[losses > candidates[0]]
    log_w_p = k_p - lam_p * positive
    log_w_m = k_m - lam_m * positive
    step = max(1, 2**19 // max(positive.size, 1))  # candidates per block: temporaries stay small
    for start in range(0, len(candidates), step):
        eps = candidates[start : start + step, None]
        gap = positive[None, :] - eps
        with np.errstate(divide="ignore", invalid="ignore"):
            log_f = np.where(gap > 0, np.log(-np.expm1(-np.maximum(gap, 1e-300))), -np.inf)
        lb = log_b_m[start : start + step, None]
        mean[start : start + step] = np.exp(log_w_p[None, :] + log_f - lb).sum(axis=1) / n
        second[start : start + step] = np.exp(log_w_p[None, :] + log_w_m[None, :] + 2.0 * log_f - 2.0 * lb).sum(axis=1) / n
    return log_b_m, mean, np.maximum(second - mean * mean, 0.0)


def _main_grid(eps_hat: float, eps_pred: float, eps_top: float, max_loss: float) -> tuple[np.ndarray, float]:
    """Grid for the main run (fixed before it) and where the lower-bound search starts."""
    spread = max(eps_pred - eps_hat, 1e-3 * max(eps_pred, 1e-2))
    low = max(0.0, eps_hat - 3.0 * spread)
    high = eps_pred + 4.0 * spread
    parts = [np.linspace(low, high, 256), np.linspace(max(0.0, eps_hat - 25.0 * spread), low, 17)]
    if eps_top > high:
        parts.append(np.linspace(high, eps_top, 33))
    if math.isfinite(max_loss) and max_loss > 0:
        parts.append(np.array([max_loss]))
    grid = np.unique(np.concatenate(parts))
    return grid[grid >= 0.0], low


def _crossing(grid: np.ndarray, values: np.ndarray, delta: float) -> float:
    """Point estimate: where the (non-increasing) values cross delta, log-linear interpolation."""
    below = np.nonzero(values <= delta)[0]
    if not below.size:
        return float(grid[-1])
    i = int(below[0])
    if i == 0:
        return float(grid[0])
    v0, v1 = values[i - 1], values[i]
    if v1 <= 0 or v0 <= 0:
        return float(grid[i])
    t = (math.log(v0) - math.log(delta)) / (math.log(v0) - math.log(v1)) if v0 != v1 else 1.0
    return float(grid[i - 1] + min(max(t, 0.0), 1.0) * (grid[i] - grid[i - 1]))
