"""Noise allocation for group-wise clipping, and the adaptive-threshold budget split.

Group-wise clipping (He, Li, Yu, Zhang, Kulkarni, Lee, Backurs, Yu, Bian 2023, "Exploring
the limits of differentially private deep learning with group-wise clipping", ICLR)
clips the per-example gradient of each parameter group k to norm C_k and adds Gaussian
noise N(0, s_k^2 I) to the sum of group k.  The accountant needs one mechanism.

**Effective mechanism.**  Whiten group k by s_k.  Adding or removing one example shifts
the whitened release by a vector whose squared norm is sum_k ||Delta_k||^2 / s_k^2 <=
sum_k C_k^2 / s_k^2 =: mu^2, with equality reachable (every group at its threshold), and
the whitened noise is N(0, I).  So one step is exactly the Gaussian mechanism with

    noise_multiplier_eff = 1 / mu = (sum_k (C_k / s_k)^2)^(-1/2)          (1)

and sensitivity 1, also under Poisson subsampling (the groups share the sample).

**Strategies** map a target effective noise multiplier sigma to stds s_k with (1) = sigma:

* ``"global"``: one std for all groups, s_k = sigma * sqrt(sum_j C_j^2) (as flat
  clipping at the combined threshold would use);
* ``"equal_budget"``: each group gets mu^2 / K, s_k = sigma * sqrt(K) * C_k;
* ``"weighted"``: group k gets the share gamma_k of mu^2 (shares sum to 1),
  s_k = sigma * C_k / sqrt(gamma_k).  Without explicit shares, the shares that minimise
  the total noise energy sum_k d_k s_k^2 over groups of d_k coordinates: by Lagrange
  multipliers on sum_k d_k x_k subject to sum_k C_k^2 / x_k = mu^2 (x_k = s_k^2),
  x_k is proportional to C_k / sqrt(d_k), hence gamma_k proportional to C_k sqrt(d_k).

**Adaptive thresholds** (Andrew, Thakkar, McMahan, Ramaswamy 2019, "Differentially
private learning with adaptive clipping"): each group also releases its clipped-count
b_k = sum_i (1[||g_ik|| <= C_k] - 1/2) + N(0, sigma_b^2); the centred indicator has
sensitivity 1/2 under add/remove, so this count is a Gaussian mechanism with
mu_b^2 = (1/2)^2 / sigma_b^2 = (2 sigma_b)^-2.  The gradient release (mu_g = 1/z) and the
K counts use the same sample, and by the whitening argument above their joint release
is one Gaussian mechanism with mu^2 = z^-2 + K (2 sigma_b)^-2.  For the whole step to
spend the budget of noise multiplier sigma (mu^2 = sigma^-2), the gradient noise
multiplier must be

    z = (sigma^-2 - K (2 sigma_b)^-2)^(-1/2),                             (2)

which exists only when sigma^-2 > K (2 sigma_b)^-2, i.e. sigma_b > sqrt(K) sigma / 2
(Andrew et al. 2019, Thm. 1, for K = 1).  The thresholds then follow the geometric
update C_k <- C_k exp(-eta_C (b_k / B - target_quantile)) with B the expected batch
size (the count is released, so the update is post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from dpforge.errors import ParameterError
from dpforge.mechanisms.base import Gaussian
from dpforge.validation import require_positive

Strategy = Literal["global", "equal_budget", "weighted"]
STRATEGIES = ("global", "equal_budget", "weighted")


def _positive_array(name: str, values: Sequence[float]) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a sequence of numbers > 0, got {values!r}") from None
    if array.size == 0:
        raise ParameterError(f"{name} must contain at least one value")
    bad = ~np.isfinite(array) | (array <= 0)
    if bad.any():
        raise ParameterError(f"{name} must be finite numbers > 0, got {array[bad][0]!r} at index {int(np.argmax(bad))}")
    return array


def effective_noise_multiplier(thresholds: Sequence[float], noise_stds: Sequence[float]) -> float:
    """Equation (1) of the module docstring, (sum_k (C_k / s_k)^2)^(-1/2): the noise
    multiplier of the single Gaussian mechanism equivalent to group noises ``noise_stds``
    (s_k) on groups clipped at ``thresholds`` (C_k) (group-wise clipping, He et al. 2023)."""
    c = _positive_array("thresholds", thresholds)
    s = _positive_array("noise_stds", noise_stds)
    if c.size != s.size:
        raise ParameterError(f"thresholds and noise_stds must have the same length, got {c.size} and {s.size}")
    return float(1.0 / math.sqrt(np.sum((c / s) ** 2)))


@dataclass(frozen=True)
class NoiseAllocation:
    """Per-group noise stds for group-wise clipping, and the mechanism that accounts them."""

    strategy: str
    thresholds: tuple[float, ...]
    noise_stds: tuple[float, ...]
    shares: tuple[float, ...]
    noise_multiplier: float

    @property
    def mechanism(self) -> Gaussian:
        """The effective Gaussian mechanism (sensitivity 1) for the accountant."""
        return Gaussian(self.noise_multiplier)


def allocate_noise(
    noise_multiplier: float,
    thresholds: Sequence[float],
    strategy: Strategy = "global",
    *,
    shares: Sequence[float] | None = None,
    group_sizes: Sequence[float] | None = None,
) -> NoiseAllocation:
    """Per-group noise stds s_k whose effective noise multiplier (1) is ``noise_multiplier``.

    ``shares`` (for "weighted") are the fractions gamma_k of the privacy budget mu^2; by
    default they are proportional to C_k sqrt(d_k) with d_k = ``group_sizes`` (the
    variance-minimising choice), or to C_k when sizes are not given.
    """
    sigma = require_positive("noise_multiplier", noise_multiplier)
    c = _positive_array("thresholds", thresholds)
    k = c.size
    if strategy not in STRATEGIES:
        raise ParameterError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy != "weighted" and (shares is not None):
        raise ParameterError(f"shares apply only to the 'weighted' strategy, not {strategy!r}")
    if strategy == "global":
        stds = np.full(k, sigma * math.sqrt(float(np.sum(c**2))))
    elif strategy == "equal_budget":
        stds = sigma * math.sqrt(k) * c
    else:
        if shares is not None:
            gamma = _positive_array("shares", shares)
            if gamma.size != k:
                raise ParameterError(f"shares must have one value per group ({k}), got {gamma.size}")
            if abs(gamma.sum() - 1.0) > 1e-9:
                raise ParameterError(f"shares must sum to 1 (within 1e-9), got sum {gamma.sum()!r}")
        else:
            sizes = np.ones(k) if group_sizes is None else _positive_array("group_sizes", group_sizes)
            if sizes.size != k:
                raise ParameterError(f"group_sizes must have one value per group ({k}), got {sizes.size}")
            gamma = c * np.sqrt(sizes)
            gamma = gamma / gamma.sum()
        stds = sigma * c / np.sqrt(gamma)
    effective = effective_noise_multiplier(c, stds)
    realised_shares = (c / stds) ** 2 * effective**2
    return NoiseAllocation(
        strategy=strategy,
        thresholds=tuple(float(x) for x in c),
        noise_stds=tuple(float(x) for x in stds),
        shares=tuple(float(x) for x in realised_shares),
        noise_multiplier=effective,
    )


def gradient_noise_multiplier(noise_multiplier: float, count_noise_std: float, groups: int = 1) -> float:
    """Equation (2): the gradient noise multiplier z that leaves the step at the budget of
    ``noise_multiplier`` once ``groups`` clipped counts with noise ``count_noise_std``
    (sigma_b) are released too (Andrew et al. 2019, Thm. 1, for groups = 1).  Refuses when
    the counts use the whole budget."""
    sigma = require_positive("noise_multiplier", noise_multiplier)
    sigma_b = require_positive("count_noise_std", count_noise_std)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ParameterError(f"groups must be an integer >= 1, got {groups!r}")
    remaining = sigma**-2 - groups * (2.0 * sigma_b) ** -2
    if remaining <= 0:
        raise ParameterError(
            f"count_noise_std={sigma_b:g} leaves no privacy budget for the gradient: with {groups} "
            f"clipped-count queries it must exceed sqrt(groups) * noise_multiplier / 2 = "
            f"{math.sqrt(groups) * sigma / 2:g}"
        )
    return float(remaining**-0.5)


def geometric_threshold_update(
    thresholds: Sequence[float],
    noisy_counts: Sequence[float],
    expected_batch_size: float,
    target_quantile: float = 0.5,
    learning_rate: float = 0.2,
) -> np.ndarray:
    """Andrew et al. (2019), eq. (3): C_k <- C_k exp(-eta (b_k - gamma)) with
    b_k = (noisy centred count)/B + 1/2 the private estimate of the fraction of
    examples whose group-k norm is at most C_k."""
    c = _positive_array("thresholds", thresholds)
    counts = np.asarray(noisy_counts, dtype=float).ravel()
    if counts.size != c.size or not np.all(np.isfinite(counts)):
        raise ParameterError(f"noisy_counts must be {c.size} finite numbers, got {noisy_counts!r}")
    batch = require_positive("expected_batch_size", expected_batch_size)
    if not (0.0 < float(target_quantile) < 1.0):
        raise ParameterError(f"target_quantile must be in (0, 1), got {target_quantile!r}")
    rate = require_positive("learning_rate", learning_rate)
    fraction = counts / batch + 0.5
    return c * np.exp(-rate * (fraction - float(target_quantile)))
