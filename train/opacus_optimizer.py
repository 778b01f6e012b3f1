"""Opacus with any dpforge mechanism: Gaussian, Laplace or LMO noise in ``DPOptimizer``.

Opacus' :class:`opacus.optimizers.DPOptimizer` clips per-example gradients in L2 to
``max_grad_norm`` = C, sums them and adds N(0, (sigma C)^2) per coordinate.
:class:`MechanismDPOptimizer` keeps the clipping, the scaling and the hooks and replaces
only ``add_noise``: the summed gradient of *all* trainable parameters is one release of
d coordinates, noised with :func:`dpforge.train.noise.add_noise_`, so its vector guard
applies -- a scalar-calibrated Laplace or LMO (``dimension=1``) on a d > 1 dimensional
gradient is refused, and a Laplace/LMO mechanism must describe the release: ``dimension
= d``, ``norm="l2"`` (Opacus clips in L2) and ``sensitivity = C`` (docs/design.md §5).
Such vector releases are accounted by the RDP engine through its vector guard
(:mod:`dpforge.accounting.rdp.lmo`); Gaussian noise keeps the certified PRV engine.

:class:`MechanismAccountant` is the dpforge Opacus accountant
(:class:`dpforge.train.opacus.DpforgeAccountant`) told which mechanism each step
releases: Opacus' step hook reports only (noise_multiplier, sample_rate), so the
accountant records *its* mechanism at that rate in a ledger.  :func:`make_private` wires
module, optimizer, Poisson data loader and accountant, as ``PrivacyEngine.make_private``
does, for one process (for data parallelism use :class:`dpforge.train.hf.DPTrainer`,
whose noise is added once across ranks).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from opacus import GradSampleModule
from opacus.data_loader import DPDataLoader
from opacus.optimizers import DPOptimizer
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

from dpforge.accounting.results import EpsilonResult
from dpforge.budget.ledger import Ledger
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism
from dpforge.mechanisms.lmo import LMO
from dpforge.mechanisms.serialize import mechanism_from_dict, mechanism_to_dict
from dpforge.train.noise import add_noise_, check_release
from dpforge.train.opacus import DpforgeAccountant
from dpforge.validation import require_positive

__all__ = ["MechanismAccountant", "MechanismDPOptimizer", "make_private", "noise_mechanism"]


def _require(mechanism: object) -> Mechanism:
    if not isinstance(mechanism, (Gaussian, Laplace, LMO)):
        raise ParameterError(f"mechanism must be a dpforge Gaussian, Laplace or LMO, got {type(mechanism).__name__}")
    return mechanism


def noise_mechanism(mechanism: Mechanism, max_grad_norm: float, dimension: int) -> Mechanism:
    """The noise actually drawn for a release of ``dimension`` coordinates clipped in L2
    to ``max_grad_norm``: Gaussian(sigma, C) (std sigma C, whatever sensitivity the
    description carried: only sigma sets its privacy); a Laplace/LMO mechanism as given,
    after checking it describes this release (vector guard, norm, sensitivity)."""
    mechanism = _require(mechanism)
    clip = require_positive("max_grad_norm", max_grad_norm)
    if isinstance(mechanism, Gaussian):
        return Gaussian(mechanism.noise_multiplier, clip)
    check_release(mechanism, dimension)  # the vector guard of add_noise_
    if dimension > 1 and mechanism.norm != "l2":
        raise UnsupportedError(
            f"the {type(mechanism).__name__} mechanism has norm={mechanism.norm!r} but Opacus clips in L2; "
            "describe it with norm='l2'"
        )
    if float(mechanism.sensitivity) != clip:
        raise ParameterError(
            f"the mechanism's sensitivity ({mechanism.sensitivity}) must equal max_grad_norm ({clip}): "
            "a clipped example moves the sum by at most max_grad_norm"
        )
    return mechanism


class MechanismDPOptimizer(DPOptimizer):
    """Opacus' ``DPOptimizer`` adding the noise of a dpforge ``mechanism`` (module docstring).

    Same arguments as ``DPOptimizer`` with ``mechanism`` in place of ``noise_multiplier``
    (for a Gaussian, ``noise_multiplier`` is set from it, so Opacus' own accountants keep
    working).  ``generator`` is a ``torch.Generator`` on the parameters' device.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, mechanism: Mechanism, max_grad_norm: float, expected_batch_size: int | None, loss_reduction: str = "mean", generator: torch.Generator | None = None, **kwargs: Any) -> None:
        mechanism = _require(mechanism)
        sigma = float(mechanism.noise_multiplier) if isinstance(mechanism, Gaussian) else 0.0
        super().__init__(
            optimizer,
            noise_multiplier=sigma,
            max_grad_norm=max_grad_norm,
            expected_batch_size=expected_batch_size,
            loss_reduction=loss_reduction,
            generator=generator,
            **kwargs,
        )
        self.dimension = sum(p.numel() for p in self.params)
        self.mechanism = mechanism
        self.noise = noise_mechanism(mechanism, max_grad_norm, self.dimension)

    def add_noise(self) -> None:
        """``p.grad = summed_grad + noise`` with the d coordinates of all parameters as one
        release of :attr:`noise` (:func:`dpforge.train.noise.add_noise_`)."""
        noisy = []
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            noisy.append(p.summed_grad.clone())
        add_noise_(noisy, self.noise, self.generator)
        for p, grad in zip(self.params, noisy):
            p.grad = grad.view_as(p)
            _mark_as_processed(p.summed_grad)


class MechanismAccountant(DpforgeAccountant):
    """The dpforge accountant of a :class:`MechanismDPOptimizer`: each step records
    ``mechanism`` at the reported sampling rate.  ``engine`` defaults to "prv"
    (certified) for Gaussian and scalar releases and "rdp" for vector Laplace/LMO ones,
    the only engine that accounts them."""

    def __init__(self, mechanism: Mechanism, engine: str | None = None, relative_accuracy: float = 1e-3) -> None:
        mechanism = _require(mechanism)
        vector = not isinstance(mechanism, Gaussian) and mechanism.dimension > 1
        super().__init__(engine=engine or ("rdp" if vector else "prv"), relative_accuracy=relative_accuracy)
        self.mechanism_description = mechanism
        self._ledger = Ledger()

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one step of the mechanism at ``sample_rate`` (``noise_multiplier``, which
        Opacus' hook passes, is checked against a Gaussian's and otherwise ignored)."""
        if isinstance(self.mechanism_description, Gaussian) and noise_multiplier != self.mechanism_description.noise_multiplier:
            raise ParameterError(
                f"the optimizer reports noise_multiplier {noise_multiplier}, the accountant's mechanism has "
                f"{self.mechanism_description.noise_multiplier}"
            )
        self._ledger.record(self.mechanism_description, sample_rate)
        super().step(noise_multiplier=noise_multiplier, sample_rate=sample_rate)  # Opacus' history and len()

    def ledger(self) -> Ledger:
        """The recorded steps (mechanism, rate, count)."""
        return self._ledger

    def get_epsilon_result(self, delta: float) -> EpsilonResult:
        """Bounds on epsilon at ``delta`` from the engine (certified with "prv")."""
        return self._ledger.epsilon(delta, engine=self.engine, **self._options())

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """Upper bound on epsilon at ``delta`` (0 before any step)."""
        if not self._ledger.entries:
            return 0.0
        return float(self.get_epsilon_result(delta).upper)

    def state_dict(self, destination: Any = None) -> Any:
        """``destination`` with "ledger", "mechanism_description" and "mechanism" set."""
        destination = OrderedDict() if destination is None else destination
        destination["ledger"] = self._ledger.to_dict()
        destination["mechanism_description"] = mechanism_to_dict(self.mechanism_description)
        destination["mechanism"] = self.mechanism()
        return destination

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore from :meth:`state_dict`; refuses a state of another mechanism."""
        if not state_dict or "ledger" not in state_dict:
            raise ParameterError("state_dict must contain a 'ledger'")
        if mechanism_from_dict(state_dict.get("mechanism_description", {})) != self.mechanism_description:
            raise ParameterError("state_dict was recorded for another mechanism")
        self._ledger = Ledger.from_dict(state_dict["ledger"])
        sigma = float(getattr(self.mechanism_description, "noise_multiplier", 0.0))
        self.history = [(sigma, entry.sampling_rate, entry.steps) for entry in self._ledger.entries]


def make_private(module: torch.nn.Module, optimizer: torch.optim.Optimizer, data_loader: torch.utils.data.DataLoader, *, mechanism: Mechanism, max_grad_norm: float, poisson_sampling: bool = True, generator: torch.Generator | None = None, engine: str | None = None):
    """(GradSampleModule, MechanismDPOptimizer, data loader, MechanismAccountant): Opacus'
    ``make_private`` for one process with dpforge noise.  The loader becomes Opacus'
    Poisson ``DPDataLoader`` (sampling rate 1 / len(data_loader)) unless
    ``poisson_sampling=False``; the accountant records each optimizer step.

    ``poisson_sampling=False`` (keeping the caller's loader) is refused: the accountant
    records Poisson steps, and a Poisson epsilon is no upper bound for the fixed-size
    shuffled batches such a loader draws (:mod:`dpforge.accounting.shuffled`)."""
    if not poisson_sampling:
        raise UnsupportedError(
            "poisson_sampling=False keeps a fixed-size loader that the Poisson accounting does not certify; "
            "use poisson_sampling=True"
        )
    sample_rate = 1.0 / len(data_loader)
    expected_batch_size = int(len(data_loader.dataset) * sample_rate)
    if poisson_sampling:
        data_loader = DPDataLoader.from_data_loader(data_loader, generator=generator)
    wrapped = module if isinstance(module, GradSampleModule) else GradSampleModule(module)
    private = MechanismDPOptimizer(
        optimizer,
        mechanism=mechanism,
        max_grad_norm=max_grad_norm,
        expected_batch_size=expected_batch_size,
        generator=generator,
    )
    accountant = MechanismAccountant(mechanism, engine=engine)
    private.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    return wrapped, private, data_loader, accountant
