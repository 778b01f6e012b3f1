"""Secure noise: draws from the OS CSPRNG, and the snapping mechanism for scalar Laplace.

Opt-in (``secure=True`` on :class:`~dpforge.train.dpsgd.DPSGDNoiseStep` and
:class:`~dpforge.train.dpzo.DPZero`, or a :class:`SecureRandom` passed as the generator
of :mod:`dpforge.train.noise`).  What it defends and what it does not (docs/design.md §7):

* **Predictable generators.**  torch's generators (Mersenne Twister on the CPU, Philox
  on CUDA) are not cryptographic: their state follows from their seed, or from enough
  outputs.  Secure mode takes every random bit from ``os.urandom`` (the kernel CSPRNG),
  never from a seed, so neither ``torch.manual_seed`` nor a leaked checkpoint fixes or
  reveals the noise.  The price: a secure run cannot be replayed bit for bit (its
  checkpoints hold no generator state; a resumed run draws fresh noise).
* **The floating-point attack on Laplace (Mironov 2012).**  The textbook sampler
  x + b log(U) (with a random sign) in floating point reaches only some doubles, and
  which ones depends on x: from one output an attacker can often tell x = 0 from x = 1
  with certainty.  For scalar releases (DP-ZO's one number per step) secure mode uses
  Mironov's *snapping mechanism* (:func:`snapping_laplace`, Mironov 2012, Sec. 5.2):
  clamp the input to [-B, B], add lambda LN(U*) with U* uniform over all doubles in (0, 1)
  and LN correctly rounded, round to the nearest multiple of Lambda (the smallest power
  of 2 >= lambda) and clamp again.  With sensitivity 1 it is epsilon'-DP with
  epsilon' = (1 + 12 B eta) / lambda + 2 eta, eta = 2^-53, for lambda < B < 2^46 lambda
  (Mironov 2012, Thm. 1).  **Accounting consequence**: the release is no longer the
  Laplace mechanism, so it is recorded as ``PureDP(epsilon')`` (randomised response
  dominates every epsilon'-DP mechanism, Kairouz et al. 2015), which composes a little
  worse than the Laplace privacy-loss law and costs the factor (1 + 12 B eta) (1.4e-6
  relative at the default B = 2^30 lambda).  The sensitivity bound is taken on the real
  input; the float64 sum of clipped terms can exceed it by rounding, as for every
  mechanism here.
* **Tensors (DP-SGD).**  Gaussian noise is drawn by Box-Muller in float64 from 53-bit
  CSPRNG uniforms and rounded to the tensor's dtype; Laplace noise by inversion of CSPRNG
  uniforms on the same grid as :mod:`dpforge.train.noise`.  This removes the generator's
  predictability, *not* the floating-point gaps of the output: no snapping or discrete
  sampler is applied per coordinate (the accounting of a snapped or discretised Gaussian
  vector differs from the Gaussian's; see Holohan and Braghin 2021 for the attacks and
  Canonne, Kamath, Steinke 2020 for the discrete Gaussian).  Box-Muller truncates the
  Gaussian at sqrt(2 * 53 log 2) = 8.57 standard deviations (a tail of about 1e-17).
  LMO noise (a Gamma mixture) is drawn by the ordinary sampler from a torch generator
  freshly seeded with 63 CSPRNG bits per call.  Draws happen on the CPU and are copied
  to the device: expect secure mode to be several times slower than the default
  (benchmarked in tests/train/test_secure.py's docstring and the design notes).
"""

from __future__ import annotations

import math
import os
import secrets
from typing import Any

import mpmath
import torch

from dpforge.errors import ParameterError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP
from dpforge.validation import require_positive

__all__ = [
    "ETA",
    "SecureRandom",
    "secure_sample",
    "secure_uniform",
    "snapping_epsilon",
    "snapping_laplace",
    "snapping_mechanism",
]

#: eta = 2^-53, the unit roundoff of float64 (Mironov 2012, Sec. 5.2)
ETA = 2.0**-53
#: default clamp bound B of the snapping mechanism, in units of lambda
DEFAULT_BOUND_FACTOR = 2.0**30


class SecureRandom:
    """Marker noise source: draw from the OS CSPRNG (``os.urandom``) for ``device``.

    It holds no state (nothing to checkpoint, nothing to seed).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def __repr__(self) -> str:
        return f"SecureRandom(device={str(self.device)!r})"

    def state_dict(self) -> dict[str, Any]:
        """``{"kind": "secure"}``: a CSPRNG has no state to save."""
        return {"kind": "secure"}


def secure_uniform(count: int) -> torch.Tensor:
    """``count`` float64 uniforms k 2^-53, k uniform in [0, 2^53), from ``os.urandom`` (CPU)."""
    if count == 0:
        return torch.zeros(0, dtype=torch.float64)
    raw = torch.frombuffer(bytearray(os.urandom(8 * count)), dtype=torch.int64)
    return raw.bitwise_and_((1 << 53) - 1).to(torch.float64).mul_(2.0**-53)


def _secure_gaussian(count: int) -> torch.Tensor:
    """Box-Muller on CSPRNG uniforms: u1 in (0, 1], u2 in [0, 1)."""
    pairs = (count + 1) // 2
    u1 = secure_uniform(pairs).add_(2.0**-53)
    u2 = secure_uniform(pairs).mul_(2.0 * math.pi)
    radius = u1.log_().mul_(-2.0).sqrt_()
    return torch.cat([radius * torch.cos(u2), radius * torch.sin(u2)])[:count]


def _secure_laplace(count: int) -> torch.Tensor:
    """Standard Laplace by inversion: h on the odd multiples of 2^-54 in (-1/2, 1/2)."""
    h = secure_uniform(count).add_(2.0**-54 - 0.5)
    return h.abs().mul_(-2.0).log1p_().copysign_(h).neg_()


def secure_sample(mechanism: Mechanism, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Noise of ``mechanism`` with every uniform from the OS CSPRNG (module docstring),
    drawn in float64 on the CPU, returned in ``dtype`` on ``device``."""
    count = math.prod(shape)
    if isinstance(mechanism, Gaussian):
        noise = _secure_gaussian(count).mul_(float(mechanism.noise_multiplier) * float(mechanism.sensitivity))
    elif isinstance(mechanism, Laplace):
        noise = _secure_laplace(count).mul_(float(mechanism.scale))
    else:
        from dpforge.train.noise import _sample, fresh_generator  # LMO: a CSPRNG-seeded generator per call

        return _sample(mechanism, shape, fresh_generator(device), device, dtype)
    return noise.reshape(shape).to(device=device, dtype=dtype)


# -- the snapping mechanism (Mironov 2012) ------------------------------------------------
def _uniform_all_doubles() -> float:
    """U* of Mironov (2012): uniform on (0, 1) with every double reachable, each with
    probability its share of the interval.  The binade [2^-(e+1), 2^-e) is chosen with
    probability 2^-(e+1) (e = the number of leading zero bits of a CSPRNG stream), then
    52 uniform mantissa bits."""
    zeros = 0
    while True:
        word = secrets.randbits(64)
        if word:
            zeros += 64 - word.bit_length()
            break
        zeros += 64
        if zeros >= 1074:  # probability 2^-1074: the smallest double
            return math.ldexp(1.0, -1074)
    return math.ldexp(1.0 + secrets.randbits(52) * 2.0**-52, -(zeros + 1))


def _log_correctly_rounded(value: float) -> float:
    """ln(value) rounded to the nearest double (computed with 120 bits by mpmath), as the
    snapping mechanism's analysis assumes of LN (libm's log is only faithful)."""
    with mpmath.workprec(120):
        return float(mpmath.log(mpmath.mpf(value)))


def _power_of_two_at_least(value: float) -> float:
    mantissa, exponent = math.frexp(value)  # value = mantissa 2^exponent, mantissa in [0.5, 1)
    return value if mantissa == 0.5 else math.ldexp(1.0, exponent)


def _snap_parameters(scale: float, sensitivity: float, bound: float | None) -> tuple[float, float]:
    lam = require_positive("scale", scale) / require_positive("sensitivity", sensitivity)
    big = DEFAULT_BOUND_FACTOR * lam if bound is None else require_positive("bound", bound) / float(sensitivity)
    if not lam < big < 2.0**46 * lam:
        raise ParameterError(
            f"the snapping mechanism needs scale < bound < 2^46 scale (in units of the sensitivity); "
            f"got lambda = {lam!r}, B = {big!r}"
        )
    return lam, big


def snapping_epsilon(scale: float, sensitivity: float = 1.0, bound: float | None = None) -> float:
    """epsilon' = (1 + 12 B eta) / lambda + 2 eta of the snapping mechanism with lambda =
    scale / sensitivity and B = bound / sensitivity (Mironov 2012, Thm. 1), rounded up."""
    lam, big = _snap_parameters(scale, sensitivity, bound)
    return math.nextafter((1.0 + 12.0 * big * ETA) / lam + 2.0 * ETA, math.inf)


def snapping_mechanism(scale: float, sensitivity: float = 1.0, bound: float | None = None) -> PureDP:
    """The ledger's description of one snapped release: ``PureDP(snapping_epsilon(...))``."""
    return PureDP(snapping_epsilon(scale, sensitivity, bound))


def snapping_laplace(value: float, scale: float, sensitivity: float = 1.0, bound: float | None = None) -> float:
    """Release ``value`` (sensitivity ``sensitivity``) with the snapping mechanism of
    Mironov (2012, Sec. 5.2): in units of the sensitivity, x = clamp(value, B),
    y = x + S lambda LN(U*) in float64 (S a fair sign, U* from :func:`_uniform_all_doubles`),
    then clamp(round(y / Lambda) Lambda, B), times the sensitivity again.

    ``scale`` is the Laplace scale b; ``bound`` the clamp B (default 2^30 b).  The result
    is epsilon'-DP with epsilon' = :func:`snapping_epsilon`; it is a multiple of
    Lambda * sensitivity, whatever the input's last bits.
    """
    lam, big = _snap_parameters(scale, sensitivity, bound)
    snap = _power_of_two_at_least(lam)
    x = min(max(float(value) / float(sensitivity), -big), big)
    magnitude = lam * _log_correctly_rounded(_uniform_all_doubles())  # <= 0
    y = x + magnitude if secrets.randbits(1) else x - magnitude
    snapped = min(max(round(y / snap) * snap, -big), big)
    return snapped * float(sensitivity)
