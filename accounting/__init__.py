"""Accountants: certified bounds on (epsilon, delta) of mechanism descriptions."""

from dpforge.accounting.api import delta, epsilon
from dpforge.accounting.results import CalibrationResult, DeltaResult, EpsilonResult

__all__ = ["CalibrationResult", "DeltaResult", "EpsilonResult", "delta", "epsilon"]
