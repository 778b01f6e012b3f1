"""Cross-checks of dpforge's certified bounds against peer accountants (slow; run in CI).

Peers and what their numbers mean
---------------------------------
* **prv-accountant 0.2.0** (Gopi, Lee, Wutschitz 2021) returns (eps_low, eps_est, eps_up)
  with |error| <= ``eps_error`` in epsilon and ``delta_error`` in delta by its Theorem 5.5.
  Its ``PoissonSubsampledGaussianMechanism`` is the *remove* direction only
  (P = (1-q) N(0,1) + q N(mu,1) vs N(0,1)); dpforge takes the max over both directions,
  which for the Poisson-subsampled Gaussian is the remove one (the add direction's
  profile is smaller for eps >= 0), so the two intervals must overlap and prv's
  estimate must lie in dpforge's interval widened by ``eps_error``.
* **dp-accounting 0.6.0** PLD, ``pessimistic_estimate=True`` with connect-the-dots (the
  default): a dominating discrete PLD, so its epsilon is an *upper bound* on the true
  epsilon (its truncated tails go to the infinity mass).  Hence it must be
  >= dpforge.lower, with no allowance beyond float round-off (1e-9 relative).  It has no
  stated error the other way; the a-priori bound we use is one grid step h per composed
  mechanism: every per-step privacy loss is moved up by less than h, so the composed
  loss moves up by less than T h and eps_dpa <= eps_true + T h <= dpforge.upper + T h.
  (Connect-the-dots is usually far better than that; T h is a guaranteed-type
  tolerance, not a typical error.)  h is chosen so that T h is about 2% of epsilon.
* An **independent reference** for tiny deltas of the subsampled Gaussian: the exact
  per-step law of L (from normal CDFs, not from dpforge), discretised by splitting each
  fine bin linearly between its two grid neighbours (error O(h^2)), composed by an
  exponentially tilted FFT (so FFT round-off is relative to the tilted mode, not to the
  bulk) at three grid steps and Richardson-extrapolated.  It is not certified; its
  tolerance is ten times the change between the last two extrapolations.

The grids are drawn from a seeded generator (reproducible) over the ranges named in the
task: q in [0.001, 0.2] (log-uniform), sigma in [0.6, 3], T in [10, 3000] (log-uniform),
delta in [1e-8, 1e-5] (log-uniform).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import fft as sp_fft
from scipy import special

from dpforge.accounting import delta as dpforge_delta
from dpforge.accounting import epsilon as dpforge_epsilon
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled

pytestmark = pytest.mark.slow

FLOAT_SLACK = 1e-9  # relative; float round-off of peers that are certified in one direction


def _grid(seed: int, count: int, laplace: bool = False):
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        q = float(10 ** rng.uniform(-3.0, math.log10(0.2)))
        noise = float(rng.uniform(0.6, 3.0) if not laplace else rng.uniform(0.5, 5.0))
        steps = int(round(10 ** rng.uniform(1.0, math.log10(3000 if not laplace else 1000))))
        delta = float(10 ** rng.uniform(-8.0, -5.0))
        cases.append((round(q, 6), round(noise, 4), steps, float(f"{delta:.3g}")))
    return cases


GAUSSIAN_GRID = _grid(20240601, 8) + [
    (0.2, 0.6, 3000, 1e-8),  # the corner with the largest epsilon (~486)
    (0.001, 3.0, 10, 1e-5),  # the corner with the smallest epsilon
    (0.2, 0.6, 10, 1e-8),
]
LAPLACE_GRID = _grid(7, 6, laplace=True) + [(0.2, 0.5, 1000, 1e-8), (0.001, 5.0, 10, 1e-5)]


def _dpa_step(eps: float, steps: int) -> float:
    """dp-accounting grid step: T h ~ 2% of epsilon, within [2e-5, 1e-3] (run time)."""
    return float(np.clip(0.02 * eps / steps, 2e-5, 1e-3))


def _check_dp_accounting(theirs: float, ours, steps: int, h: float, what: str) -> None:
    assert math.isfinite(theirs), f"{what}: dp-accounting gave {theirs}"
    assert theirs >= ours.lower - FLOAT_SLACK * max(1.0, ours.lower), (
        f"{what}: dp-accounting's pessimistic (upper-bound) epsilon {theirs!r} is below dpforge's "
        f"certified lower bound {ours.lower!r} (upper {ours.upper!r})"
    )
    assert theirs <= ours.upper + steps * h, (
        f"{what}: dp-accounting's epsilon {theirs!r} exceeds dpforge.upper {ours.upper!r} + T h = {steps * h:.3g}"
    )


@pytest.mark.parametrize("q, sigma, steps, delta", GAUSSIAN_GRID)
def test_subsampled_gaussian_against_prv_accountant(prv, q, sigma, steps, delta):
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    ours = dpforge_epsilon(Composed([(PoissonSampled(Gaussian(sigma), q), steps)]), delta)
    eps_error = max(1e-2, 5e-3 * ours.upper)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            accountant = PRVAccountant(
                [PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)],
                eps_error=eps_error,
                delta_error=1e-3 * delta,
                max_self_compositions=[steps],
            )
            low, estimate, high = accountant.compute_epsilon(delta=delta, num_self_compositions=[steps])
        except (RuntimeError, ValueError, FloatingPointError) as error:
            # e.g. "Discrete mean differs from continuous mean significantly" at eps ~ 486:
            # a failure of the peer, not a disagreement (dp-accounting still covers the case)
            pytest.skip(f"prv-accountant cannot evaluate this case: {error}")
    what = f"q={q} sigma={sigma} T={steps} delta={delta:g}"
    assert low <= ours.upper and ours.lower <= high, (
        f"{what}: prv-accountant [{low!r}, {high!r}] and dpforge [{ours.lower!r}, {ours.upper!r}] do not overlap"
    )
    assert ours.lower - eps_error <= estimate <= ours.upper + eps_error, (
        f"{what}: prv-accountant estimate {estimate!r} outside dpforge [{ours.lower!r}, {ours.upper!r}] "
        f"+- eps_error {eps_error:g}"
    )


@pytest.mark.parametrize("q, sigma, steps, delta", GAUSSIAN_GRID)
def test_subsampled_gaussian_against_dp_accounting(dpa, q, sigma, steps, delta):
    from dp_accounting.pld import privacy_loss_distribution as pld

    ours = dpforge_epsilon(Composed([(PoissonSampled(Gaussian(sigma), q), steps)]), delta)
    h = _dpa_step(ours.upper, steps)
    composed = pld.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=h).self_compose(steps)
    theirs = composed.get_epsilon_for_delta(delta)
    _check_dp_accounting(theirs, ours, steps, h, f"subsampled Gaussian q={q} sigma={sigma} T={steps} delta={delta:g}")


@pytest.mark.parametrize("q, scale, steps, delta", LAPLACE_GRID)
def test_subsampled_laplace_against_dp_accounting(dpa, q, scale, steps, delta):
    from dp_accounting.pld import privacy_loss_distribution as pld

    ours = dpforge_epsilon(Composed([(PoissonSampled(Laplace(scale), q), steps)]), delta)
    h = _dpa_step(ours.upper, steps)
    composed = pld.from_laplace_mechanism(scale, sampling_prob=q, value_discretization_interval=h).self_compose(steps)
    theirs = composed.get_epsilon_for_delta(delta)
    _check_dp_accounting(theirs, ours, steps, h, f"subsampled Laplace q={q} scale={scale} T={steps} delta={delta:g}")


@pytest.mark.parametrize("scale, steps, delta", [(1.0, 10, 1e-6), (3.0, 100, 1e-8), (0.5, 3, 1e-5)])
def test_laplace_against_prv_accountant(prv, scale, steps, delta):
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import LaplaceMechanism

    ours = dpforge_epsilon(Composed([(Laplace(scale), steps)]), delta)
    eps_error = max(1e-2, 5e-3 * ours.upper)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accountant = PRVAccountant(
            [LaplaceMechanism(mu=1.0 / scale)], eps_error=eps_error, delta_error=1e-3 * delta, max_self_compositions=[steps]
        )
        low, estimate, high = accountant.compute_epsilon(delta=delta, num_self_compositions=[steps])
    assert low <= ours.upper and ours.lower <= high, ((low, high), ours)
    assert ours.lower - eps_error <= estimate <= ours.upper + eps_error, (estimate, ours)


# ----------------------------------------------------------------------------------------
# independent reference for tiny deltas (tilted FFT, Richardson-extrapolated)
# ----------------------------------------------------------------------------------------
def _step_cdf_grid(sigma: float, q: float, direction: str, h: float):
    """Grid points l_j = j h, Pr_P(L <= l_j) and Pr_P(L > l_j) for one Poisson-subsampled
    Gaussian step, each computed directly (the upper tail from the survival function: as
    differences of a CDF near 1 its masses would lose every digit below 1e-16).

    L = +-log(1 - q + q e^r), r = mu x - mu^2/2; x in [-14, 14 + mu] (mass outside ~1e-44).
    """
    mu = 1.0 / sigma
    forward = lambda r: np.logaddexp(math.log1p(-q), math.log(q) + r)  # noqa: E731
    r_lo, r_hi = mu * -14.0 - mu * mu / 2, mu * (14.0 + mu) - mu * mu / 2
    lo, hi = (forward(r_lo), forward(r_hi)) if direction == "remove" else (-forward(r_hi), -forward(r_lo))
    grid = np.arange(math.floor(lo / h) - 1, math.ceil(hi / h) + 2) * h
    y = grid if direction == "remove" else -grid
    with np.errstate(all="ignore"):
        inner = np.expm1(y) + q
        x = np.where(inner > 0, (np.log(np.where(inner > 0, inner, 1.0)) - math.log(q) + mu * mu / 2) / mu, -np.inf)
        if direction == "remove":  # P = (1-q) N(0,1) + q N(mu,1); L <= l <=> X <= x
            cdf = (1 - q) * special.ndtr(x) + q * special.ndtr(x - mu)
            sf = (1 - q) * special.ndtr(-x) + q * special.ndtr(mu - x)
        else:  # P = N(0,1); L <= l <=> X >= x
            cdf, sf = special.ndtr(-x), special.ndtr(x)
    return grid, np.clip(cdf, 0.0, 1.0), np.clip(sf, 0.0, 1.0)


def _linear_split(sigma, q, direction, h, sub=64):
    fine, cdf, sf = _step_cdf_grid(sigma, q, direction, h / sub)
    mass = np.where(cdf[1:] < 0.5, np.diff(cdf), -np.diff(sf))
    pos = (fine[1:] - 0.5 * h / sub) / h
    low = np.floor(pos).astype(np.int64)
    frac = pos - low
    start = int(low.min())
    out = np.zeros(int(low.max()) - start + 2)
    np.add.at(out, low - start, mass * (1 - frac))
    np.add.at(out, low - start + 1, mass * frac)
    return start, out


def _tilted_delta(start, masses, h, steps, eps, theta):
    positions = (start + np.arange(masses.size)) * h
    with np.errstate(divide="ignore"):
        logw = np.log(masses) + theta * positions
    top = logw.max()
    w = np.exp(logw - top)
    log_m = top + math.log(w.sum())
    w /= w.sum()
    size = sp_fft.next_fast_len(steps * (masses.size - 1) + 1, real=True)
    composed = sp_fft.irfft(sp_fft.rfft(w, size) ** steps, size)
    s = (start * steps + np.arange(size)) * h
    keep = (s > eps) & (composed > 0)
    logp = np.log(composed[keep]) - theta * s[keep] + steps * log_m
    return float(np.sum(np.exp(logp) * -np.expm1(eps - s[keep])))


def reference_delta(sigma, q, steps, eps, steps_h=(2e-3, 1e-3, 5e-4), theta=1.0):
    """(value, tolerance) of delta(eps), max over both directions."""
    best = (0.0, 0.0)
    for direction in ("remove", "add"):
        values = []
        for h in steps_h:
            start, masses = _linear_split(sigma, q, direction, h)
            values.append(_tilted_delta(start, masses, h, steps, eps, theta))
        r1 = values[1] + (values[1] - values[0]) / 3.0
        r2 = values[2] + (values[2] - values[1]) / 3.0
        candidate = (r2, 10.0 * abs(r2 - r1) + 1e-6 * abs(r2))
        if candidate[0] > best[0]:
            best = candidate
    return best


@pytest.mark.parametrize("sigma, q, steps, eps", [(1.0, 0.01, 1000, 3.0), (1.0, 0.01, 1000, 4.0), (0.8, 0.05, 200, 6.0)])
def test_subsampled_gaussian_tiny_delta_against_independent_reference(sigma, q, steps, eps):
    value, tolerance = reference_delta(sigma, q, steps, eps)
    ours = dpforge_delta(Composed([(PoissonSampled(Gaussian(sigma), q), steps)]), eps)
    assert ours.lower <= value + tolerance and value - tolerance <= ours.upper, (
        f"sigma={sigma} q={q} T={steps} eps={eps}: reference delta {value!r} +- {tolerance:.2g} "
        f"outside dpforge [{ours.lower!r}, {ours.upper!r}]"
    )
