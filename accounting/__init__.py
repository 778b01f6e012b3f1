"""Accountants: certified bounds on (epsilon, delta) of mechanism descriptions."""

from dpforge.accounting.api import delta, epsilon
from dpforge.accounting.calibrate import calibrate, calibrate_laplace_scale, calibrate_noise_multiplier
from dpforge.accounting.plan import Phase, Plan, PlanError, load_plan, parse_plan, verify_plan, write_plan
from dpforge.accounting.results import CalibrationResult, DeltaResult, EpsilonResult

__all__ = [
    "CalibrationResult",
    "DeltaResult",
    "EpsilonResult",
    "Phase",
    "Plan",
    "PlanError",
    "calibrate",
    "calibrate_laplace_scale",
    "calibrate_noise_multiplier",
    "delta",
    "epsilon",
    "load_plan",
    "parse_plan",
    "verify_plan",
    "write_plan",
]
