"""DP-ZO / DPZero: zeroth-order private fine-tuning with one privatised scalar per step.

One step (Zhang et al. 2023 "DPZero"; Tang et al. 2024 "DP-ZO"), with z ~ N(0, I) of the
parameters' shape regenerated from a per-step seed:

1. perturb in place theta <- theta + lambda z, evaluate per-example losses L_i^+;
2. theta <- theta - 2 lambda z, evaluate L_i^-;
3. clip each difference d_i = L_i^+ - L_i^- to [-C, C] and privatise their sum with a
   *scalar* mechanism of sensitivity C (adding or removing one example moves the sum by
   at most C): S~ = sum_i clip(d_i) + noise;
4. g = S~ / (B * 2 lambda) (B the batch size, or the expected batch size under Poisson
   sampling), then restore and update in one pass: theta <- theta + lambda z - lr g z.

The released quantity is one number per step, which is exactly where Laplace and LMO
noise are sound (docs/design.md §5), so Gaussian, scalar Laplace and scalar LMO
mechanisms are accepted; C is the mechanism's ``sensitivity``.  The scalar noise is
drawn in float64 on the CPU from a generator separate from the (public) seeds.

Memory: parameters are never copied; each pass regenerates z one parameter tensor at a
time, so the extra memory is one buffer the size of the largest parameter tensor
(float32 for bfloat16 parameters).  Floating point makes theta + lambda z - 2 lambda z +
lambda z differ from theta by rounding; :func:`replay` repeats the very same three
in-place passes from the ``(seed, scalar)`` history, so it reproduces the trained
parameters bit for bit on the same device and dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from dpforge.budget.ledger import Ledger
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism
from dpforge.mechanisms.lmo import LMO
from dpforge.train.noise import check_release, resolve_generator, sample_noise
from dpforge.train.secure import DEFAULT_BOUND_FACTOR, SecureRandom, snapping_laplace, snapping_mechanism
from dpforge.validation import require_positive, require_sampling_rate

__all__ = ["DPZero", "ZOStep", "clipped_difference_sum", "perturb_", "replay"]


@dataclass(frozen=True)
class ZOStep:
    """One step of the history: the public seed of z and the privatised projected
    gradient g = (clipped sum + noise) / (B * 2 lambda)."""

    seed: int
    scalar: float


def _z_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


@torch.no_grad()
def perturb_(parameters: Sequence[torch.Tensor], seed: int, alphas: Sequence[Sequence[float]]) -> None:
    """For each parameter p (with its list of coefficients a_1, a_2, ...), regenerate z from
    ``seed`` and apply p += a_1 z, then p += a_2 z, ... in place.

    z is drawn parameter by parameter from one generator per device seeded with ``seed``,
    so the same seed and parameter order give the same z.
    """
    generators: dict[torch.device, torch.Generator] = {}
    for parameter, coefficients in zip(parameters, alphas, strict=True):
        generator = generators.get(parameter.device)
        if generator is None:
            generator = torch.Generator(device=parameter.device)
            generator.manual_seed(int(seed))
            generators[parameter.device] = generator
        z = torch.randn(parameter.shape, generator=generator, device=parameter.device, dtype=_z_dtype(parameter.dtype))
        for alpha in coefficients:
            parameter.add_(z, alpha=alpha)
        del z


def clipped_difference_sum(loss_plus: torch.Tensor, loss_minus: torch.Tensor, clip: float) -> float:
    """sum_i clip(L_i^+ - L_i^-, -C, C) in float64 (each example moves it by at most C)."""
    if not isinstance(loss_plus, torch.Tensor) or not isinstance(loss_minus, torch.Tensor):
        raise ParameterError("the closure must return a tensor of per-example losses")
    if loss_plus.dim() != 1 or loss_plus.shape != loss_minus.shape:
        raise ParameterError(
            "the closure must return a 1-D tensor of per-example losses, the same length at theta + lambda z "
            f"and theta - lambda z; got shapes {tuple(loss_plus.shape)} and {tuple(loss_minus.shape)}"
        )
    differences = loss_plus.detach().to(torch.float64) - loss_minus.detach().to(torch.float64)
    return float(differences.clamp_(-clip, clip).sum())


def _update_alpha(lr: float, scalar: float) -> float:
    return -(lr * scalar)


def _require_scalar_mechanism(mechanism: Mechanism) -> Mechanism:
    if not isinstance(mechanism, (Gaussian, Laplace, LMO)):
        raise ParameterError(f"mechanism must be a Gaussian, Laplace or LMO mechanism, got {type(mechanism).__name__}")
    check_release(mechanism, 1)  # Laplace/LMO must describe a scalar release
    return mechanism


class DPZero(torch.optim.Optimizer):
    """Zeroth-order DP optimizer (DPZero, Zhang et al. 2023; DP-ZO, Tang et al. 2024);
    ``step(closure)`` where ``closure()`` returns the per-example losses (1-D tensor) of
    the current batch at the current parameters.

    ``mechanism`` privatises the clipped sum; its ``sensitivity`` is the clip C.
    ``perturbation_scale`` is lambda.  ``expected_batch_size`` divides the sum (default:
    the realised batch size, right for fixed-size batches; pass it under Poisson
    sampling).  ``seed`` seeds the public per-step seeds; ``noise_generator`` (a CPU
    generator, secret) or ``noise_seed`` draws the privacy noise, fresh from OS entropy
    when both are omitted (never torch's global generator); the ledger notes which under
    the role ``"dpzero"``.  ``secure=True`` (Laplace only) releases the clipped sum with
    the snapping mechanism from the OS CSPRNG (Mironov 2012; :mod:`dpforge.train.secure`),
    clamped to +-``secure_bound`` (default 2^30 scale), and records ``PureDP(epsilon')``.
    :meth:`state_dict` / :meth:`load_state_dict` checkpoint the ledger, both generators
    and the history, so a resumed run continues bit for bit.
    Parameters with ``requires_grad=False`` are left alone (e.g. after
    :func:`~dpforge.train.bitfit.freeze_all_but_bias`).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float,
        mechanism: Mechanism,
        perturbation_scale: float = 1e-3,
        *,
        sampling_rate: float = 1.0,
        expected_batch_size: float | None = None,
        seed: int | None = None,
        noise_generator: torch.Generator | None = None,
        ledger: Ledger | None = None,
        noise_seed: int | None = None,
        secure: bool = False,
        secure_bound: float | None = None,
    ) -> None:
        lr = require_positive("lr", lr)
        super().__init__(params, {"lr": lr})
        self.mechanism = _require_scalar_mechanism(mechanism)
        self.clip = float(mechanism.sensitivity)
        self.perturbation_scale = require_positive("perturbation_scale", perturbation_scale)
        self.sampling_rate = require_sampling_rate("sampling_rate", sampling_rate)
        self.expected_batch_size = (
            None if expected_batch_size is None else require_positive("expected_batch_size", expected_batch_size)
        )
        self._seeds, self.seed_source = resolve_generator(None, seed, device="cpu")
        if isinstance(noise_generator, torch.Generator) and noise_generator.device.type != "cpu":
            raise ParameterError("noise_generator must be a CPU generator (the scalar noise is drawn in float64 on the CPU)")
        self.noise_generator, self.noise_source = resolve_generator(noise_generator, noise_seed, device="cpu", secure=secure)
        self.secure = isinstance(self.noise_generator, SecureRandom)
        if self.secure:
            if not isinstance(mechanism, Laplace):
                raise UnsupportedError(
                    f"secure=True defends the scalar release with the snapping mechanism (Mironov 2012), which is a "
                    f"Laplace mechanism; got {type(mechanism).__name__}: use Laplace(scale, sensitivity=C)"
                )
            self.secure_bound = (
                DEFAULT_BOUND_FACTOR * float(mechanism.scale) if secure_bound is None else float(secure_bound)
            )
            # the snapped release is epsilon'-DP, not the Laplace mechanism: the ledger records PureDP(epsilon')
            self.recorded_mechanism: Mechanism = snapping_mechanism(mechanism.scale, mechanism.sensitivity, self.secure_bound)
        else:
            self.secure_bound = None
            self.recorded_mechanism = self.mechanism
        self.ledger = ledger if ledger is not None else Ledger()
        self.ledger.note_noise_source("dpzero", self.noise_source)
        self.history: list[ZOStep] = []

    def _trainable(self) -> list[tuple[torch.Tensor, float]]:
        return [(p, float(group["lr"])) for group in self.param_groups for p in group["params"] if p.requires_grad]

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        """One DP-ZO step (module docstring, steps 1-4): the two-point estimate
        g = (sum_i clip(L_i^+ - L_i^-) + noise) / (B * 2 lambda) along z, then
        theta <- theta - lr g z; returns the mean of the losses at theta +- lambda z (not
        private)."""
        if closure is None:
            raise ParameterError("DPZero.step needs a closure returning the per-example losses")
        trainable = self._trainable()
        if not trainable:
            raise ParameterError("DPZero has no parameter with requires_grad=True to train")
        params = [p for p, _ in trainable]
        lam = self.perturbation_scale
        journal = self.ledger.journal
        # a resumed run re-doing journaled steps: keep what is needed to undo a refused
        # release exactly (parameters and generator states); no copy otherwise
        repeating = journal is not None and journal.released > self.ledger.steps
        if repeating:
            backup = [p.detach().clone() for p in params]
            generator_states = (self._seeds.get_state(), None if self.secure else self.noise_generator.get_state())
        seed = int(torch.randint(0, 2**62, (1,), generator=self._seeds))
        offset = 0.0
        try:
            perturb_(params, seed, [(lam,)] * len(params))
            offset = lam
            loss_plus = closure()
            perturb_(params, seed, [(-2.0 * lam,)] * len(params))
            offset = -lam
            loss_minus = closure()
            total = clipped_difference_sum(loss_plus, loss_minus, self.clip)
        except BaseException:
            if offset:
                perturb_(params, seed, [(-offset,)] * len(params))
            raise
        batch = self.expected_batch_size if self.expected_batch_size is not None else loss_plus.shape[0]
        if batch == 0:
            perturb_(params, seed, [(lam,)] * len(params))
            raise ParameterError("empty batch: pass expected_batch_size to DPZero when batches can be empty")
        if self.secure:
            noisy_total = snapping_laplace(total, self.mechanism.scale, self.clip, self.secure_bound)
        else:
            noise = float(sample_noise(self.mechanism, (), generator=self.noise_generator, dtype=torch.float64))
            noisy_total = total + noise
        scalar = noisy_total / (batch * 2.0 * lam)
        try:  # journaled before the update is applied (released)
            self.ledger.record(self.recorded_mechanism, self.sampling_rate, release=f"{seed}:{scalar!r}")
        except BaseException:
            if repeating:
                for parameter, saved in zip(params, backup):
                    parameter.copy_(saved)
                self._seeds.set_state(generator_states[0])
                if generator_states[1] is not None:
                    self.noise_generator.set_state(generator_states[1])
            else:
                perturb_(params, seed, [(lam,)] * len(params))
            raise
        perturb_(params, seed, [(lam, _update_alpha(lr, scalar)) for _, lr in trainable])
        self.history.append(ZOStep(seed, scalar))
        return 0.5 * (loss_plus.detach().float().mean() + loss_minus.detach().float().mean())


    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """torch's optimizer state (``lr`` per group) plus ``"dpzero"``: the ledger, the
        seed and noise generator states (no noise state in secure mode), the history for
        :func:`replay`, and where the noise comes from."""
        state = super().state_dict()
        state["dpzero"] = {
            "steps": len(self.history),
            "ledger": self.ledger.state_dict(),
            "seed_generator_state": self._seeds.get_state(),
            "noise_generator_state": None if self.secure else self.noise_generator.get_state(),
            "noise_source": dict(self.noise_source),
            "history": [[step.seed, step.scalar] for step in self.history],
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # type: ignore[override]
        """Restore :meth:`state_dict` output; the seed and noise generators continue where
        the checkpoint left them, so no seed or noise draw repeats an earlier step's.
        A state without ``"dpzero"`` (an older checkpoint) is refused: resuming it would
        reuse seeds and noise and forget the spent budget."""
        state_dict = dict(state_dict)
        extra = state_dict.pop("dpzero", None)
        if not isinstance(extra, dict):
            raise ParameterError(
                "this DPZero state_dict has no 'dpzero' part (ledger, generators, history): resuming from it would "
                "reuse seeds and noise and restart the ledger"
            )
        if (extra.get("noise_generator_state") is None) != self.secure:
            raise ParameterError("the checkpoint and this optimizer disagree on secure noise (secure=True in one only)")
        super().load_state_dict(state_dict)
        self.ledger.load_state_dict(extra["ledger"])
        self._seeds.set_state(extra["seed_generator_state"])
        if not self.secure:
            self.noise_generator.set_state(extra["noise_generator_state"])
            self.noise_source = dict(extra.get("noise_source", self.noise_source))
        self.ledger.note_noise_source("dpzero", self.noise_source)
        self.history = [ZOStep(int(seed), float(scalar)) for seed, scalar in extra["history"]]


def _trainable_parameters(model: torch.nn.Module | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    params = model.parameters() if isinstance(model, torch.nn.Module) else model
    return [p for p in params if p.requires_grad]


@torch.no_grad()
def replay(
    model: torch.nn.Module | Iterable[torch.Tensor],
    history: Sequence[ZOStep],
    lr: float | Sequence[float],
    perturbation_scale: float,
) -> None:
    """Re-apply a DP-ZO ``history`` to a fresh copy of the initial model, in place.

    Repeats each step's three in-place passes (+lambda z, -2 lambda z, +lambda z - lr g z)
    without evaluating any loss, so on the same device and dtype the parameters equal
    the trained ones bit for bit.  ``model`` is a module (its parameters with
    requires_grad, in order) or the same parameter list the optimizer had; ``lr`` is the
    constant learning rate or one per step.
    """
    params = _trainable_parameters(model)
    lam = require_positive("perturbation_scale", perturbation_scale)
    steps = list(history)
    rates = [lr] * len(steps) if isinstance(lr, (int, float)) else list(lr)
    if len(rates) != len(steps):
        raise ParameterError(f"lr must be one number or one per step ({len(steps)}), got {len(rates)}")
    for step, rate in zip(steps, rates):
        if not isinstance(step, ZOStep):
            step = ZOStep(*step)
        perturb_(params, step.seed, [(lam,)] * len(params))
        perturb_(params, step.seed, [(-2.0 * lam,)] * len(params))
        perturb_(params, step.seed, [(lam, _update_alpha(float(rate), step.scalar))] * len(params))
