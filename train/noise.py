"""Noise samplers on any torch device: Gaussian, Laplace and LMO, seeded by a ``torch.Generator``.

These draw the noise a :mod:`dpforge.mechanisms` description calls for; they do no
accounting.  Every sampler is vectorised (torch kernels on whole tensors, no Python loop
per element) and stays on the device (mechanism parameters are Python floats, random
draws come from the given generator, no ``.item()`` or data-dependent shapes), so on a
GPU a draw never waits for the host.

Noise laws (one coordinate):

* :class:`~dpforge.mechanisms.base.Gaussian` -- N(0, (noise_multiplier * sensitivity)^2),
  drawn with ``torch.randn``.
* :class:`~dpforge.mechanisms.base.Laplace` -- Lap(0, scale), by inversion of one uniform:
  h uniform on (-1/2, 1/2), X = -scale * sign(h) * log(1 - 2|h|).
* :class:`~dpforge.mechanisms.lmo.LMO` -- X = L / eta with L standard Laplace and the
  inverse scale eta drawn from the mixture w_1 Gamma(k, theta) + w_2 Exp(lam) +
  w_3 U(lo, hi).  Vectorised by drawing, for every element, a component-selection
  uniform and one candidate eta per present component (a Gamma variate from
  ``torch._standard_gamma``; the Exponential and Uniform candidates share one uniform
  draw, which is sound because exactly one candidate is kept), then keeping the
  selected candidate with ``torch.where``.  Components with weight 0 are never drawn.

Precision.  Draws are made in float64 for float64 output and in float32 otherwise;
bfloat16 output is the float32 draw rounded to the nearest bfloat16 (torch.rand has only
8 random bits in bfloat16, far too few for inversion).  The uniforms behind Laplace and
LMO are taken on the symmetric grid of odd multiples of 2^-(p+1) in (-1/2, 1/2) (p = 24
in float32, 53 in float64) built exactly from ``torch.rand``'s grid, so 2|h| < 1 always
(no infinite draw) and the law is exactly symmetric; the price is that the standard
Laplace part is truncated at p log 2 (16.6 in float32, 36.7 in float64), a tail of
probability 2^-p per coordinate.  Gaussian draws are ``torch.randn``'s, with its own
finite-precision tails (as in every torch DP-SGD library).  For the one scalar released per DP-ZO step
the adapter samples in float64; do the same wherever tail fidelity matters more than
throughput.  LMO laws with much eta mass near 0 (Gamma shape < 1) can give draws that
overflow to +-inf in float32/bfloat16: that is the law, not a bug; such laws are useless
for training anyway (infinite mean noise).

Where the randomness comes from (docs/design.md §7).  No sampler silently derives its
noise from torch's or NumPy's global seed: ``generator=None`` means a fresh
``torch.Generator`` seeded from the operating system's entropy (:func:`fresh_generator`,
63 bits from :mod:`secrets`).  A run that wants reproducible noise passes its own
generator or seed, and :func:`noise_provenance` says which of the three it is
(``"seeded"`` with the seed, ``"os-entropy"``, ``"secure"``) for the ledger.  Passing a
:class:`SecureRandom` instead of a generator draws every uniform from the operating
system's CSPRNG (``os.urandom``) instead of a torch generator (Mersenne Twister on the
CPU, Philox on CUDA), whose outputs are predictable once enough of them are seen; the
scalar Laplace release of DP-ZO is defended against the floating-point attack of Mironov
(2012) by :func:`snapping_laplace`, see :mod:`dpforge.train.secure`.

Soundness.  :func:`add_noise_` refuses what the description does not cover: a Laplace or
LMO mechanism must describe exactly the number of coordinates it is added to, and in
particular a scalar (``dimension=1``) mechanism with an L2 sensitivity must not be added
to a vector -- Laplace-type noise on d coordinates of an L2-clipped vector is not the
scalar mechanism (docs/design.md §5).  :func:`sample_noise` is a raw sampler and does
not check this.
"""

from __future__ import annotations

import operator
import secrets
from typing import Any, Iterable, Sequence

import torch

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism
from dpforge.mechanisms.lmo import LMO
from dpforge.train.secure import SecureRandom, secure_sample

__all__ = [
    "SUPPORTED_DTYPES",
    "SecureRandom",
    "add_noise_",
    "check_release",
    "fresh_generator",
    "noise_provenance",
    "noise_std",
    "resolve_generator",
    "sample_noise",
]

#: dtypes the samplers produce (float16 is refused: heavy-tailed noise overflows it).
SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _require_dtype(dtype: object) -> torch.dtype:
    if dtype not in SUPPORTED_DTYPES:
        raise ParameterError(f"dtype must be one of float32, float64, bfloat16, got {dtype!r}")
    return dtype  # type: ignore[return-value]


def _require_mechanism(mechanism: object) -> Mechanism:
    if not isinstance(mechanism, (Gaussian, Laplace, LMO)):
        raise ParameterError(
            f"mechanism must be a dpforge Gaussian, Laplace or LMO mechanism, got {type(mechanism).__name__}"
        )
    return mechanism


def fresh_generator(device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with 63 bits of OS entropy (:mod:`secrets`),
    independent of ``torch.manual_seed`` and ``numpy.random.seed``."""
    generator = torch.Generator(device=device)
    generator.manual_seed(secrets.randbits(63))
    return generator


def resolve_generator(
    generator: "torch.Generator | SecureRandom | None" = None,
    seed: int | None = None,
    device: torch.device | str = "cpu",
    secure: bool = False,
) -> "tuple[torch.Generator | SecureRandom, dict[str, Any]]":
    """The noise source of a run and its provenance for the ledger.

    ``secure=True`` (or a :class:`SecureRandom`): the OS CSPRNG, ``{"kind": "secure"}``;
    a caller's generator: ``{"kind": "seeded", "seed": generator.initial_seed()}``;
    ``seed``: a new generator on ``device`` seeded with it, ``{"kind": "seeded", "seed": seed}``;
    neither: :func:`fresh_generator`, ``{"kind": "os-entropy"}``.  Giving more than one
    of ``generator``, ``seed`` and ``secure`` is a ParameterError.  The seed of a seeded
    run determines its noise: keep ledgers of seeded runs as secret as the seed.
    """
    given = [name for name, value in (("generator", generator), ("seed", seed)) if value is not None]
    if secure or isinstance(generator, SecureRandom):
        if seed is not None or (generator is not None and not isinstance(generator, SecureRandom)):
            raise ParameterError("secure noise draws from the OS CSPRNG: give neither a generator nor a seed with secure=True")
        source = generator if isinstance(generator, SecureRandom) else SecureRandom(device)
        return source, {"kind": "secure"}
    if len(given) > 1:
        raise ParameterError("give a noise generator or a seed, not both")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise ParameterError(f"generator must be a torch.Generator or SecureRandom, got {type(generator).__name__}")
        return generator, {"kind": "seeded", "seed": int(generator.initial_seed())}
    if seed is not None:
        try:
            value = None if isinstance(seed, bool) else operator.index(seed)
        except TypeError:
            value = None
        if value is None or not 0 <= value < 2**64:
            raise ParameterError(f"seed must be an integer in [0, 2^64), got {seed!r}")
        seed = value
        made = torch.Generator(device=device)
        made.manual_seed(seed)
        return made, {"kind": "seeded", "seed": int(seed)}
    return fresh_generator(device), {"kind": "os-entropy"}


def noise_provenance(generator: "torch.Generator | SecureRandom | None") -> dict[str, Any]:
    """``{"kind": "secure"}`` for a :class:`SecureRandom`, ``{"kind": "seeded", "seed": s}``
    for a generator (s its initial seed), ``{"kind": "os-entropy"}`` for None (the
    samplers then draw from a :func:`fresh_generator`)."""
    if generator is None:
        return {"kind": "os-entropy"}
    if isinstance(generator, SecureRandom):
        return {"kind": "secure"}
    return {"kind": "seeded", "seed": int(generator.initial_seed())}


def _resolve_device(generator, device: torch.device | str | None) -> torch.device:
    if device is None:
        device = generator.device if generator is not None else torch.device("cpu")
    device = torch.device(device)
    if generator is not None and generator.device.type != device.type:
        raise ParameterError(
            f"the generator lives on {generator.device} but the noise is wanted on {device}: "
            "use a torch.Generator(device=...) on the same device"
        )
    return device


def noise_std(mechanism: Mechanism) -> float:
    """Standard deviation of one noise coordinate (inf for LMO laws without a variance)."""
    mechanism = _require_mechanism(mechanism)
    if isinstance(mechanism, Gaussian):
        return float(mechanism.noise_multiplier) * float(mechanism.sensitivity)
    if isinstance(mechanism, Laplace):
        return float(mechanism.scale) * 2.0**0.5
    return mechanism.std()


def _half_uniform(shape, generator, device, dtype) -> torch.Tensor:
    """Uniform on the odd multiples of 2^-(p+1) in (-1/2, 1/2): exactly symmetric, |h| < 1/2.

    torch.rand gives k 2^-p, k uniform in [0, 2^p) (p = 24 in float32, 53 in float64);
    adding the representable constant 2^-(p+1) - 1/2 is exact because every odd multiple
    of 2^-(p+1) in (-1/2, 1/2) is representable.  So 2|h| is uniform on the odd multiples
    of 2^-p in (0, 1) and sign(h) is an independent fair sign.
    """
    u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    return u.add_(torch.finfo(dtype).eps / 4.0 - 0.5)


def _log_one_minus(h: torch.Tensor) -> torch.Tensor:
    """log(1 - 2|h|) <= 0, finite: minus a standard exponential variable (new tensor)."""
    return h.abs().mul_(-2.0).log1p_()


def _standard_laplace_parts(shape, generator, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(log(1 - 2|h|), h): the standard Laplace variable is copysign(first, h)."""
    h = _half_uniform(shape, generator, device, dtype)
    return _log_one_minus(h), h


def _lmo_eta(mechanism: LMO, shape, generator, device, dtype) -> torch.Tensor:
    w_gamma, w_exp, w_uniform = mechanism.weights
    candidates: list[tuple[float, torch.Tensor]] = []
    if w_gamma > 0:
        # a fill kernel (no host-to-device copy), expanded without allocating
        concentration = torch.full((), float(mechanism.gamma_shape), device=device, dtype=dtype).expand(shape)
        gamma = torch._standard_gamma(concentration, generator=generator).mul_(float(mechanism.gamma_scale))
        candidates.append((w_gamma, gamma))
    if w_exp > 0 or w_uniform > 0:
        # one uniform serves both candidates: only one of them is ever kept
        h = _half_uniform(shape, generator, device, dtype)
        if w_exp > 0:
            exponential = _log_one_minus(h).mul_(-1.0 / float(mechanism.exponential_rate))  # > 0
            candidates.append((w_exp, exponential))
        if w_uniform > 0:
            low, high = float(mechanism.uniform_low), float(mechanism.uniform_high)
            # 2|h| is uniform on (0, 1)
            candidates.append((w_uniform, h.abs_().mul_(2.0 * (high - low)).add_(low)))
    if len(candidates) == 1:
        return candidates[0][1]
    selector = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    eta = candidates[-1][1]
    # walk the cumulative weights from the last component back to the first
    cumulative = 1.0 - candidates[-1][0]
    for weight, candidate in reversed(candidates[:-1]):
        torch.where(selector < cumulative, candidate, eta, out=eta)  # in place: candidates are distinct
        cumulative -= weight
    return eta


def _sample(mechanism: Mechanism, shape, generator, device, dtype) -> torch.Tensor:
    """Draw in ``dtype`` (float32 or float64); ``generator`` None is a fresh OS-entropy one."""
    if isinstance(generator, SecureRandom):
        return secure_sample(mechanism, shape, device, dtype)
    if generator is None:
        generator = fresh_generator(device)
    if isinstance(mechanism, Gaussian):
        noise = torch.randn(shape, generator=generator, device=device, dtype=dtype)
        return noise.mul_(float(mechanism.noise_multiplier) * float(mechanism.sensitivity))
    magnitude, sign = _standard_laplace_parts(shape, generator, device, dtype)
    if isinstance(mechanism, Laplace):
        return magnitude.mul_(float(mechanism.scale)).copysign_(sign)
    return magnitude.div_(_lmo_eta(mechanism, shape, generator, device, dtype)).copysign_(sign)


def _as_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise ParameterError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ParameterError(f"shape must have non-negative sizes, got {shape!r}")
    return shape


def sample_noise(
    mechanism: Mechanism,
    shape: int | Sequence[int] | torch.Size,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Independent noise coordinates of ``mechanism`` with the given shape.

    ``device`` defaults to the generator's device (CPU without a generator); ``generator``
    defaults to a fresh generator seeded from OS entropy (never torch's global one); a
    :class:`SecureRandom` draws from the OS CSPRNG.  bfloat16 draws are float32
    draws rounded to bfloat16.  This raw sampler does not check that the mechanism
    describes a release of this many coordinates; :func:`add_noise_` does.
    """
    mechanism = _require_mechanism(mechanism)
    dtype = _require_dtype(dtype)
    device = _resolve_device(generator, device)
    noise = _sample(mechanism, _as_shape(shape), generator, device, _compute_dtype(dtype))
    return noise if noise.dtype == dtype else noise.to(dtype)


def check_release(mechanism: Mechanism, numel: int) -> None:
    """Refuse a release the mechanism does not describe (see the module docstring)."""
    mechanism = _require_mechanism(mechanism)
    if isinstance(mechanism, Gaussian) or numel == mechanism.dimension:
        return
    kind = type(mechanism).__name__
    if mechanism.dimension == 1 and mechanism.norm == "l2":
        raise UnsupportedError(
            f"refusing to add a scalar-calibrated {kind} mechanism (dimension=1, norm='l2') to {numel} "
            "coordinates: Laplace-type noise added independently to the coordinates of an L2-clipped "
            "vector is not the scalar mechanism, and its privacy loss grows with the dimension "
            "(docs/design.md §5). Use Gaussian noise for vectors, or describe the release with "
            f"dimension={numel} and account it with engine='rdp'"
        )
    raise UnsupportedError(
        f"the {kind} mechanism describes a release of dimension={mechanism.dimension} coordinates "
        f"but would be added to {numel}; the ledger would account a different release than the one made"
    )


def _tensor_list(tensors: torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    items = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if not items:
        raise ParameterError("tensors must contain at least one tensor")
    for index, tensor in enumerate(items):
        if not isinstance(tensor, torch.Tensor):
            raise ParameterError(f"tensors[{index}] must be a torch.Tensor, got {type(tensor).__name__}")
    devices = {tensor.device for tensor in items}
    if len(devices) > 1:
        raise ParameterError(
            f"tensors are on different devices ({', '.join(sorted(str(d) for d in devices))}); "
            "noise for one release must be drawn on one device"
        )
    dtypes = {tensor.dtype for tensor in items}
    if len(dtypes) > 1:
        raise ParameterError(f"tensors have different dtypes ({', '.join(sorted(str(d) for d in dtypes))})")
    _require_dtype(items[0].dtype)
    return items


def add_noise_(
    tensors: torch.Tensor | Iterable[torch.Tensor],
    mechanism: Mechanism,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Add independent noise of ``mechanism`` in place to every coordinate of ``tensors``.

    All tensors must share one device and one dtype (float32, float64 or bfloat16); the
    coordinates of all tensors together form one release, so a Laplace or LMO mechanism
    must have ``dimension`` equal to their total number of elements (ValueError otherwise,
    with the reason).  bfloat16 tensors receive float32 noise, rounded once on addition.
    Runs under ``torch.no_grad`` (the tensors may be leaves that require grad).
    Returns the list of tensors.
    """
    mechanism = _require_mechanism(mechanism)
    items = _tensor_list(tensors)
    check_release(mechanism, sum(tensor.numel() for tensor in items))
    device = items[0].device
    _resolve_device(generator, device)
    compute = _compute_dtype(items[0].dtype)
    with torch.no_grad():
        for tensor in items:
            tensor.add_(_sample(mechanism, tuple(tensor.shape), generator, device, compute))
    return items
