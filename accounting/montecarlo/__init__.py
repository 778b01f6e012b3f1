"""The Monte-Carlo engine: high-probability bounds on delta(epsilon) from privacy-loss
samples of the composed dominating pair (Wang, Mahloujifar, Wu, Jia, Mittal 2023), with
exponential tilting for small delta and an empirical-Bernstein certificate.

Every result is labelled ``bound="high-probability"``: it holds with probability at least
``confidence`` over the sampling, never deterministically.

Modules, one job each: :mod:`.engine` (options, ``epsilon``, ``delta``, the accuracy
record), :mod:`.tilting` (exponential-tilting maths), :mod:`.samplers` (the step-sampler
interface and the exact built-in samplers), :mod:`.generic` (draw-only plugged-in
pairs), :mod:`.registry` (which sampler a component gets), :mod:`.directions` (the
composed loss in one direction), :mod:`.runner` (seeded chunks on an executor),
:mod:`.bounds` (empirical-Bernstein bounds and the pilot) and :mod:`.kernels` (numba).
"""

from dpforge.accounting.montecarlo.engine import DEFAULT_CONFIDENCE, DEFAULT_SAMPLES, INEQUALITY, delta, epsilon
from dpforge.accounting.montecarlo.generic import NumpyStepSampler
from dpforge.accounting.montecarlo.tilting import log_c
from dpforge.accounting.montecarlo.registry import register_pair_sampler, register_step_sampler, step_sampler
from dpforge.accounting.montecarlo.samplers import (
    GaussianStepSampler,
    LaplaceStepSampler,
    RandomizedResponseStepSampler,
    StepSampler,
    StepTable,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_SAMPLES",
    "GaussianStepSampler",
    "INEQUALITY",
    "LaplaceStepSampler",
    "NumpyStepSampler",
    "RandomizedResponseStepSampler",
    "StepSampler",
    "StepTable",
    "delta",
    "epsilon",
    "log_c",
    "register_pair_sampler",
    "register_step_sampler",
    "step_sampler",
]
