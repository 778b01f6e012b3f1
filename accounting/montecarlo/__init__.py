"""The Monte-Carlo engine: high-probability bounds on delta(epsilon) from privacy-loss
samples of the composed dominating pair (Wang, Mahloujifar, Wu, Jia, Mittal 2023), with
exponential tilting for small delta and an empirical-Bernstein certificate.

Every result is labelled ``bound="high-probability"``: it holds with probability at least
``confidence`` over the sampling, never deterministically.
"""

from dpforge.accounting.montecarlo.engine import (
    DEFAULT_CONFIDENCE,
    DEFAULT_SAMPLES,
    GaussianStepSampler,
    LaplaceStepSampler,
    NumpyStepSampler,
    RandomizedResponseStepSampler,
    StepSampler,
    StepTable,
    delta,
    epsilon,
    register_pair_sampler,
    register_step_sampler,
    step_sampler,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_SAMPLES",
    "GaussianStepSampler",
    "LaplaceStepSampler",
    "NumpyStepSampler",
    "RandomizedResponseStepSampler",
    "StepSampler",
    "StepTable",
    "delta",
    "epsilon",
    "register_pair_sampler",
    "register_step_sampler",
    "step_sampler",
]
