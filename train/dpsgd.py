"""The DP-SGD noise step on per-sample gradients: flat or group-wise clipping, noise
allocation, optional adaptive thresholds, and the ledger record.

All privacy math lives in :mod:`dpforge.mechanisms.allocation`; this module applies it:

1. Per-sample gradients ``g_i`` (a dict ``name -> tensor[B, *param.shape]``, e.g. from
   :func:`per_sample_gradients` (``torch.func``) or Opacus' ``GradSampleModule`` via
   :func:`opacus_per_sample_gradients`) are split into groups k (``"flat"``: one group;
   ``"per_parameter"``; ``"per_layer"``: parameters of one module; or explicit lists of
   names) and each example's group-k gradient is clipped to norm C_k:
   ``g_ik * C_k / max(||g_ik||, C_k)``.
2. The clipped gradients are summed over the batch and Gaussian noise N(0, s_k^2) is
   added once to the sum of group k, with s_k from
   :func:`~dpforge.mechanisms.allocation.allocate_noise` (strategies ``"global"``,
   ``"equal_budget"``, ``"weighted"``).  The noisy sum is divided by the expected batch
   size (Poisson sampling: the realised batch size is not private).
3. With :class:`AdaptiveClipping` (Andrew et al. 2019) each group also releases its
   centred clipped count sum_i (1[||g_ik|| <= C_k] - 1/2) + N(0, sigma_b^2); the gradient
   noise multiplier is :func:`~dpforge.mechanisms.allocation.gradient_noise_multiplier`
   (so gradient and counts together spend exactly the step's budget) and the thresholds
   for the next step come from
   :func:`~dpforge.mechanisms.allocation.geometric_threshold_update` (post-processing).
   Reading the K noisy counts back to the host is one device-to-host copy per step.
4. Each step records its effective Gaussian mechanism at the sampling rate in a
   :class:`~dpforge.budget.ledger.Ledger`.  Without adaptive clipping that is
   ``allocation.mechanism`` exactly.  With it, the recorded mechanism is
   ``Gaussian(noise_multiplier)`` and the applied stds are scaled up by the (at most
   rounding-sized) factor that makes the joint effective multiplier
   (z_eff^-2 + K (2 sigma_b)^-2)^(-1/2) no smaller than the recorded one.

Under ``torch.distributed`` each rank clips and sums its own examples and the noise is
added once per global step by :func:`dpforge.train.distributed.noisy_all_reduce_`.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.allocation import (
    STRATEGIES,
    NoiseAllocation,
    allocate_noise,
    effective_noise_multiplier,
    geometric_threshold_update,
    gradient_noise_multiplier,
)
from dpforge.budget.ledger import Ledger
from dpforge.mechanisms.base import Gaussian
from dpforge.train.distributed import noisy_all_reduce_, shared_generator
from dpforge.train.noise import resolve_generator
from dpforge.validation import require_count, require_positive, require_sampling_rate

__all__ = [
    "AdaptiveClipping",
    "ClipResult",
    "DPSGDNoiseStep",
    "clip_and_sum",
    "opacus_per_sample_gradients",
    "per_sample_gradients",
    "resolve_groups",
]

GROUPINGS = ("flat", "per_parameter", "per_layer")


def resolve_groups(names: Sequence[str], groups: str | Sequence[Sequence[str]] = "flat") -> list[list[str]]:
    """Partition parameter ``names`` into clipping groups.

    ``"flat"`` (one group), ``"per_parameter"`` (one group per tensor), ``"per_layer"``
    (parameters sharing the module prefix, e.g. ``fc1.weight`` and ``fc1.bias``), or an
    explicit list of lists of names that covers every name exactly once.
    """
    names = list(names)
    if not names:
        raise ParameterError("there are no parameters to clip (none requires grad)")
    if isinstance(groups, str):
        if groups == "flat":
            return [names]
        if groups == "per_parameter":
            return [[name] for name in names]
        if groups == "per_layer":
            layers: dict[str, list[str]] = {}
            for name in names:
                layers.setdefault(name.rsplit(".", 1)[0] if "." in name else name, []).append(name)
            return list(layers.values())
        raise ParameterError(f"groups must be one of {', '.join(GROUPINGS)} or a list of lists of names, got {groups!r}")
    resolved = [list(group) for group in groups]
    seen: dict[str, int] = {}
    known = set(names)
    for index, group in enumerate(resolved):
        if not group:
            raise ParameterError(f"groups[{index}] is empty")
        for name in group:
            if name not in known:
                raise ParameterError(f"groups[{index}] names {name!r}, which is not a trainable parameter")
            if name in seen:
                raise ParameterError(f"parameter {name!r} is in groups[{seen[name]}] and groups[{index}]")
            seen[name] = index
    missing = [name for name in names if name not in seen]
    if missing:
        raise ParameterError(f"every trainable parameter must be in a group; missing {', '.join(missing)}")
    return resolved


def _thresholds(values: float | Sequence[float], count: int) -> list[float]:
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = [float(values)] * count
    values = list(values)
    if len(values) != count:
        raise ParameterError(f"thresholds must be one number or one per group ({count}), got {len(values)}")
    out = []
    for index, value in enumerate(values):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ParameterError(f"thresholds[{index}] must be a number > 0, got {value!r}") from None
        if not (math.isfinite(value) and value > 0):
            raise ParameterError(f"clipping thresholds must be finite and > 0, got thresholds[{index}] = {value!r}")
        out.append(value)
    return out


@dataclass
class ClipResult:
    """Clipped sums per parameter, per-example group norms [B, K] (before clipping) and
    the un-noised centred counts sum_i (1[norm_ik <= C_k] - 1/2) [K]."""

    sums: dict[str, torch.Tensor]
    norms: torch.Tensor
    centred_counts: torch.Tensor


def _check_per_sample(per_sample_grads: Mapping[str, torch.Tensor], names: Iterable[str]) -> int:
    batch = None
    device = dtype = None
    for name in names:
        if name not in per_sample_grads:
            raise ParameterError(f"no per-sample gradient for parameter {name!r}")
        grad = per_sample_grads[name]
        if not isinstance(grad, torch.Tensor) or grad.dim() < 1:
            raise ParameterError(f"the per-sample gradient of {name!r} must be a tensor with a leading batch dimension")
        if batch is None:
            batch, device, dtype = grad.shape[0], grad.device, grad.dtype
        elif grad.shape[0] != batch:
            raise ParameterError(f"per-sample gradients disagree on the batch size ({batch} vs {grad.shape[0]} for {name!r})")
        elif grad.device != device or grad.dtype != dtype:
            raise ParameterError(
                f"per-sample gradients must share one device and dtype; {name!r} is {grad.dtype} on {grad.device}, "
                f"others {dtype} on {device}"
            )
    return int(batch)  # type: ignore[arg-type]


def clip_and_sum(
    per_sample_grads: Mapping[str, torch.Tensor],
    groups: Sequence[Sequence[str]],
    thresholds: Sequence[float],
) -> ClipResult:
    """Clip each example's gradient in every group k to norm C_k and sum over the batch
    (per-example clipping of DP-SGD, Abadi et al. 2016; group-wise clipping, He et al. 2023).

    The clip factor C_k / max(||g_ik||, C_k) makes each example contribute at most C_k in
    L2 norm to group k (equality up to rounding); norms are accumulated in float32 or
    better.  No noise is added.

    An empty batch (leading dimension 0, which Poisson sampling draws with probability
    (1 - q)^n) gives all-zero sums of each parameter's shape, dtype and device, norms of
    shape [0, K] and centred counts 0: the sum over no examples, so the noisy step that
    follows is noise only, exactly the mechanism the Poisson accounting analyses.
    """
    thresholds = _thresholds(thresholds, len(groups))
    names = [name for group in groups for name in group]
    batch = _check_per_sample(per_sample_grads, names)
    first = per_sample_grads[names[0]]
    acc = torch.float64 if first.dtype == torch.float64 else torch.float32
    sums: dict[str, torch.Tensor] = {}
    norms, counts = [], []
    # thresholds stay Python floats: no host-to-device copy in the step
    for group, limit in zip(groups, thresholds):
        squared = torch.zeros(batch, device=first.device, dtype=acc)
        for name in group:
            grad = per_sample_grads[name]
            # explicit width: reshape(0, -1) is ambiguous for an empty batch
            squared += grad.reshape(batch, math.prod(grad.shape[1:])).to(acc).pow(2).sum(dim=1)
        norm = squared.sqrt_()
        factor = limit / norm.clamp_min(limit)  # C / max(||g||, C)
        counts.append((norm <= limit).sum(dtype=acc) - 0.5 * batch)
        norms.append(norm)
        for name in group:
            grad = per_sample_grads[name]
            sums[name] = torch.einsum("b,b...->...", factor.to(grad.dtype), grad)
    norms = torch.stack(norms, dim=1)
    centred = torch.stack(counts)
    return ClipResult(sums=sums, norms=norms, centred_counts=centred)


@dataclass(frozen=True)
class AdaptiveClipping:
    """Private quantile estimation of the thresholds (Andrew et al. 2019).

    ``count_noise_std`` is sigma_b, the noise std of each group's centred clipped count;
    it must exceed sqrt(K) * noise_multiplier / 2 or no budget is left for the gradient.
    """

    count_noise_std: float
    target_quantile: float = 0.5
    learning_rate: float = 0.2

    def __post_init__(self) -> None:
        require_positive("count_noise_std", self.count_noise_std)
        require_positive("learning_rate", self.learning_rate)
        if not 0.0 < float(self.target_quantile) < 1.0:
            raise ParameterError(f"target_quantile must be in (0, 1), got {self.target_quantile!r}")


def _named_trainable(parameters) -> list[tuple[str, torch.Tensor]]:
    if isinstance(parameters, torch.nn.Module):
        items = list(parameters.named_parameters())
    elif isinstance(parameters, Mapping):
        items = list(parameters.items())
    else:
        items = list(parameters)
    out = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor)):
            raise ParameterError("parameters must be a Module, a name -> tensor mapping or (name, tensor) pairs")
        if item[1].requires_grad:
            out.append((str(item[0]), item[1]))
    return out


class DPSGDNoiseStep:
    """Clip, sum, add the allocated noise once, update adaptive thresholds, record the step.

    ``noise_multiplier`` is the budget of one step (the sigma of the effective Gaussian
    mechanism recorded in the ledger); ``thresholds`` is C (flat) or C_k per group;
    ``expected_batch_size`` = sampling_rate * dataset size divides the noisy sum.
    ``distributed`` ("rank0" or "shared_seed") selects how noise is added once under
    ``torch.distributed`` (ignored when it is not initialised or has one rank).

    Noise source: ``generator`` (the caller's), ``seed`` (a new generator seeded with it),
    ``secure=True`` (the OS CSPRNG, :mod:`dpforge.train.secure`) or, by default, a fresh
    generator seeded from OS entropy (never torch's global generator); the ledger notes
    which under the role ``"dpsgd"``.  :meth:`state_dict` / :meth:`load_state_dict`
    checkpoint the step (see :func:`dpforge.train.checkpoint.save_checkpoint`).
    """

    def __init__(
        self,
        parameters,
        *,
        noise_multiplier: float,
        sampling_rate: float,
        expected_batch_size: float,
        thresholds: float | Sequence[float],
        groups: str | Sequence[Sequence[str]] = "flat",
        strategy: str = "global",
        shares: Sequence[float] | None = None,
        adaptive: AdaptiveClipping | None = None,
        ledger: Ledger | None = None,
        generator: torch.Generator | None = None,
        distributed: str = "rank0",
        seed: int | None = None,
        secure: bool = False,
    ) -> None:
        self.noise_multiplier = require_positive("noise_multiplier", noise_multiplier)
        self.sampling_rate = require_sampling_rate("sampling_rate", sampling_rate)
        self.expected_batch_size = require_positive("expected_batch_size", expected_batch_size)
        if strategy not in STRATEGIES:
            raise ParameterError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if adaptive is not None and not isinstance(adaptive, AdaptiveClipping):
            raise ParameterError(f"adaptive must be an AdaptiveClipping or None, got {type(adaptive).__name__}")
        self.named = _named_trainable(parameters)
        self.groups = resolve_groups([name for name, _ in self.named], groups)
        self.thresholds = _thresholds(thresholds, len(self.groups))
        self.strategy = strategy
        self.shares = None if shares is None else tuple(shares)
        sizes = dict((name, p.numel()) for name, p in self.named)
        self.group_sizes = [sum(sizes[name] for name in group) for group in self.groups]
        self.adaptive = adaptive
        self.ledger = ledger if ledger is not None else Ledger()
        self.generator, source = self._noise_source(generator, seed, secure, distributed)
        self.noise_source = source
        self.ledger.note_noise_source("dpsgd", source)
        self.distributed = distributed
        self.steps = 0
        if adaptive is None:
            self.gradient_noise_multiplier = self.noise_multiplier
        else:
            self.gradient_noise_multiplier = gradient_noise_multiplier(
                self.noise_multiplier, adaptive.count_noise_std, len(self.groups)
            )
        self.allocation = self._allocate()
        if adaptive is None:
            self.mechanism = self.allocation.mechanism
        else:
            self.mechanism = Gaussian(self.noise_multiplier)
        self.last_counts: list[float] | None = None

    def _noise_source(self, generator, seed, secure, distributed):
        """The generator (caller's, seeded, OS entropy or CSPRNG) and its provenance.

        Without a generator or seed, a fresh one is seeded from OS entropy on the
        parameters' device; in ``"shared_seed"`` mode that seed is broadcast from rank 0
        (:func:`~dpforge.train.distributed.shared_generator`), so every rank draws the same noise.
        """
        device = self.named[0][1].device if self.named else torch.device("cpu")
        if secure and distributed == "shared_seed":
            raise UnsupportedError(
                "secure=True cannot be used with distributed='shared_seed': CSPRNG draws differ on every rank, so "
                "the shared noise would be divided by the world size; use 'rank0' or 'gaussian_split'"
            )
        if generator is None and seed is None and not secure and distributed == "shared_seed":
            return shared_generator(secrets.randbits(62), device=device), {"kind": "os-entropy"}
        return resolve_generator(generator, seed, device=device, secure=secure)

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue bit for bit: step count, ledger,
        (adaptive) thresholds, last noisy counts and the generator state (None for secure
        noise, which cannot be replayed)."""
        generator = self.generator
        return {
            "steps": self.steps,
            "ledger": self.ledger.state_dict(),
            "thresholds": list(self.thresholds),
            "last_counts": None if self.last_counts is None else list(self.last_counts),
            "noise_source": dict(self.noise_source),
            "generator_state": generator.get_state() if isinstance(generator, torch.Generator) else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (same groups; ParameterError otherwise).

        The generator continues from the saved state, so the resumed run draws the
        uninterrupted run's next noise, never an earlier draw again; a secure run keeps
        drawing fresh CSPRNG noise.
        """
        try:
            thresholds = _thresholds(state["thresholds"], len(self.groups))
            steps = require_count("steps", state["steps"], 0)
            ledger_state, generator_state = state["ledger"], state.get("generator_state")
        except KeyError as error:
            raise ParameterError(f"DPSGDNoiseStep state_dict is missing {error.args[0]!r}") from None
        if (generator_state is None) != (not isinstance(self.generator, torch.Generator)):
            raise ParameterError("the checkpoint and this noise step disagree on secure noise (secure=True in one only)")
        self.ledger.load_state_dict(ledger_state)
        if generator_state is not None:
            self.generator.set_state(generator_state)
            self.noise_source = dict(state.get("noise_source", self.noise_source))
        self.ledger.note_noise_source("dpsgd", self.noise_source)
        self.thresholds = thresholds
        self.last_counts = None if state.get("last_counts") is None else [float(c) for c in state["last_counts"]]
        self.steps = steps
        self.allocation = self._allocate()

    # -- allocation ---------------------------------------------------------------------
    def _allocate(self) -> NoiseAllocation:
        return allocate_noise(
            self.gradient_noise_multiplier,
            self.thresholds,
            self.strategy,  # type: ignore[arg-type]
            shares=self.shares if self.strategy == "weighted" else None,
            group_sizes=self.group_sizes if self.strategy == "weighted" else None,
        )

    def joint_noise_multiplier(self, noise_stds: Sequence[float]) -> float:
        """Effective multiplier of the gradient noise ``noise_stds`` plus the counts:
        (z^-2 + K (2 sigma_b)^-2)^(-1/2) with z from ``effective_noise_multiplier``
        (the joint Gaussian release of :mod:`dpforge.mechanisms.allocation`; Andrew et al.
        2019, Thm. 1, for K = 1)."""
        z = effective_noise_multiplier(self.thresholds, noise_stds)
        if self.adaptive is None:
            return z
        return (z**-2 + len(self.groups) * (2.0 * self.adaptive.count_noise_std) ** -2) ** -0.5

    def applied_noise_stds(self) -> list[float]:
        """The per-group stds this step adds: the allocation's, raised (never lowered) by the
        rounding-sized factor that keeps the joint multiplier >= the recorded one."""
        stds = list(self.allocation.noise_stds)
        if self.adaptive is None:
            return stds
        target = self.mechanism.noise_multiplier
        joint = self.joint_noise_multiplier(stds)
        if joint >= target:
            return stds
        factor = max(1.0, self.gradient_noise_multiplier / effective_noise_multiplier(self.thresholds, stds))
        while self.joint_noise_multiplier([s * factor for s in stds]) < target:
            factor = math.nextafter(factor, math.inf)
        return [s * factor for s in stds]

    # -- the step -----------------------------------------------------------------------
    def privatize(self, per_sample_grads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Noisy mean gradient per parameter name, (sum of clipped + noise) / expected batch size.

        Records the step in the ledger, and updates the thresholds when adaptive.  An empty
        batch releases noise only; with adaptive clipping its centred count is 0 plus noise,
        and the threshold update uses that noisy count like any other (post-processing of
        the release; the count's sensitivity 1/2 does not depend on the batch size).
        """
        journal = self.ledger.journal
        # a resumed run re-doing journaled steps: keep what undoes a refused release
        repeating = journal is not None and journal.released > self.ledger.steps
        if repeating:
            saved = (self.generator.get_state() if isinstance(self.generator, torch.Generator) else None, self.last_counts)
        clipped = clip_and_sum(per_sample_grads, self.groups, self.thresholds)
        stds = self.applied_noise_stds()
        for k, group in enumerate(self.groups):
            noisy_all_reduce_(
                [clipped.sums[name] for name in group], Gaussian(stds[k]), self.generator, mode=self.distributed
            )
        if self.adaptive is not None:
            counts = clipped.centred_counts
            noisy_all_reduce_([counts], Gaussian(self.adaptive.count_noise_std), self.generator, mode=self.distributed)
            self.last_counts = [float(c) for c in counts.tolist()]  # the one device-to-host copy
        release = None if journal is None else _release_digest(clipped.sums, self.last_counts)
        try:  # journaled before the noisy sums are returned (released)
            self.ledger.record(self.mechanism, self.sampling_rate, release=release)
        except BaseException:
            if repeating:
                if saved[0] is not None:
                    self.generator.set_state(saved[0])
                self.last_counts = saved[1]
            raise
        self.steps += 1
        if self.adaptive is not None:
            self.thresholds = [
                float(c)
                for c in geometric_threshold_update(
                    self.thresholds,
                    self.last_counts,
                    self.expected_batch_size,
                    self.adaptive.target_quantile,
                    self.adaptive.learning_rate,
                )
            ]
            self.allocation = self._allocate()
        scale = 1.0 / self.expected_batch_size
        return {name: clipped.sums[name].mul_(scale) for group in self.groups for name in group}

    def step(self, per_sample_grads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """:meth:`privatize` and write the result into each parameter's ``.grad``."""
        noisy = self.privatize(per_sample_grads)
        for name, parameter in self.named:
            parameter.grad = noisy[name].to(parameter.dtype)
        return noisy


def _release_digest(sums: Mapping[str, torch.Tensor], counts: Sequence[float] | None) -> str:
    """A short fingerprint of one step's release (the noisy sums and counts): the float64
    sum and sum of squares of all coordinates, one device-to-host copy.  The journal keeps
    it so that a resumed run re-doing a released step with other data (the same noise on
    other data) is refused before it releases anything."""
    total = torch.zeros(2, dtype=torch.float64, device=next(iter(sums.values())).device)
    for tensor in sums.values():
        values = tensor.detach().to(torch.float64)
        total += torch.stack([values.sum(), values.pow(2).sum()])
    first, second = total.tolist()
    extra = "" if counts is None else ":" + ",".join(repr(float(c)) for c in counts)
    return f"{first!r}:{second!r}{extra}"


def per_sample_gradients(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Per-sample gradients of the trainable parameters with ``torch.func`` (vmap of grad).

    ``loss_fn(output, target)`` is evaluated on one example at a time (batch dimension 1).
    """
    from torch.func import functional_call, grad, vmap

    trainable = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
    frozen = {name: p.detach() for name, p in model.named_parameters() if not p.requires_grad}
    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def loss_one(params, x, y):
        output = functional_call(model, {**params, **frozen, **buffers}, (x.unsqueeze(0),))
        return loss_fn(output, y.unsqueeze(0))

    return vmap(grad(loss_one), in_dims=(None, 0, 0))(trainable, inputs, targets)


def opacus_per_sample_gradients(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The ``.grad_sample`` tensors Opacus' GradSampleModule leaves on trainable parameters.

    Names are those of the wrapped module (the ``_module.`` prefix is removed).
    """
    out = {}
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad:
            continue
        sample = getattr(parameter, "grad_sample", None)
        if sample is None:
            raise ParameterError(f"parameter {name!r} has no grad_sample: run a backward pass through GradSampleModule")
        out[name[len("_module."):] if name.startswith("_module.") else name] = sample
    return out
