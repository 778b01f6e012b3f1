"""Accountants: certified bounds on (epsilon, delta) of mechanism descriptions."""

from dpforge.accounting.api import delta, epsilon
from dpforge.accounting.calibrate import calibrate, calibrate_laplace_scale, calibrate_noise_multiplier
from dpforge.accounting.results import CalibrationResult, DeltaResult, EpsilonResult

__all__ = [
    "CalibrationResult",
    "DeltaResult",
    "EpsilonResult",
    "calibrate",
    "calibrate_laplace_scale",
    "calibrate_noise_multiplier",
    "delta",
    "epsilon",
]
