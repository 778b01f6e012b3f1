"""Accountants: certified bounds on (epsilon, delta) of mechanism descriptions."""

from dpforge.accounting.api import delta, epsilon
from dpforge.accounting.calibrate import calibrate, calibrate_laplace_scale, calibrate_noise_multiplier
from dpforge.accounting.plan import Phase, Plan, PlanError, load_plan, parse_plan, verify_plan, write_plan
from dpforge.accounting.allocation import (
    allocate_noise,
    effective_noise_multiplier,
    geometric_threshold_update,
    gradient_noise_multiplier,
)
from dpforge.accounting.ledger import Ledger
from dpforge.accounting.pure import calibrate_laplace_scale_pure
from dpforge.accounting.rdp import rdp_curve
from dpforge.accounting.results import (
    CalibrationResult,
    DeltaResult,
    EpsilonResult,
    MonteCarloDeltaResult,
    MonteCarloEpsilonResult,
)

__all__ = [
    "CalibrationResult",
    "DeltaResult",
    "EpsilonResult",
    "Ledger",
    "MonteCarloDeltaResult",
    "MonteCarloEpsilonResult",
    "Phase",
    "Plan",
    "PlanError",
    "calibrate",
    "allocate_noise",
    "calibrate_laplace_scale",
    "calibrate_laplace_scale_pure",
    "calibrate_noise_multiplier",
    "delta",
    "effective_noise_multiplier",
    "epsilon",
    "geometric_threshold_update",
    "gradient_noise_multiplier",
    "load_plan",
    "parse_plan",
    "rdp_curve",
    "verify_plan",
    "write_plan",
]
