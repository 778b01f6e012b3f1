"""Count: engines that turn mechanism descriptions into certified (epsilon, delta).

``epsilon``/``delta`` dispatch to a registered engine (:mod:`.api`): ``prv`` (FFT
composition with certified lower and upper bounds, :mod:`.prv`), ``rdp`` (:mod:`.rdp`),
``montecarlo`` (high-probability bounds, :mod:`.montecarlo`) and ``pure`` (:mod:`.pure`).
One root finder calibrates noise on any of the deterministic ones (:mod:`.calibrate`);
:mod:`.profiles` reads whole privacy curves.
"""

from dpforge import _deprecated
from dpforge.accounting.api import delta, engine_names, epsilon, register_engine
from dpforge.accounting.calibrate import calibrate, calibrate_laplace_scale, calibrate_noise_multiplier
from dpforge.accounting.profiles import delta_profile
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
    "MonteCarloDeltaResult",
    "MonteCarloEpsilonResult",
    "calibrate",
    "calibrate_laplace_scale",
    "calibrate_laplace_scale_pure",
    "calibrate_noise_multiplier",
    "delta",
    "delta_profile",
    "engine_names",
    "epsilon",
    "rdp_curve",
    "register_engine",
]


def __getattr__(name: str):
    return _deprecated.moved_name(__name__, name)
