"""Certified PRV/PLD accountant: discretise, compose by FFT, bound both ways.

Pipeline (per neighbouring direction, docs/design.md, "Neighbouring directions"):

1. every component's privacy-loss law is truncated to [l_lo, l_hi] (the mass outside
   is rounded up / moved to +inf for the upper bound, dropped for the lower bound);
2. it is discretised on a common grid of step h twice: a pessimistic
   "connect-the-dots" measure and an optimistic post-processing measure
   (:mod:`dpforge.accounting.prv.discretise`);
3. the composition of all components is the convolution of those measures, computed as
   one product of discrete Fourier transforms, prod_i FFT(mu_i)^{count_i}, on a window
   chosen from Chernoff bounds of the composed discrete measure:
   Pr(S >= a) <= exp(Lambda(lam) - lam a), Lambda = sum_i count_i log E[e^{lam L_i}]
   (Gopi, Lee, Wutschitz 2021 use the same aliasing argument);
4. the wrapped (aliased) mass is non-negative, so it can only raise the upper sum; the
   mass above the window is added to the upper bound and the mass outside the window
   is subtracted from the lower bound;
5. floating-point error of the FFT composition is allowed for per entry: the larger
   of 4u (T + log2 n) max(p) (the transform's relative error, amplified T times by the
   power, each complex product within sqrt(5) u) and twice the most negative composed entry, added to every entry of the upper
   sum and removed from every entry of the lower sum.  This is a model of the error,
   checked against mpmath references at delta = 1e-12, not a worst-case bound:
   worst-case FFT error bounds (Higham 2002, section 24.1) are orders of magnitude
   looser than the error actually incurred and would forbid small deltas.

The profile of the composed measures gives delta_lower(eps) <= delta(eps) <=
delta_upper(eps); epsilon bounds are their inverses, and the profile of a dataset pair
is the maximum over the two directions.

Modules, in the order a query flows through them: :mod:`.discretise` (one law onto a
grid, both ways), :mod:`.components` (truncation, staging, every component of a
description), :mod:`.compose` (FFT composition and the composed profile), :mod:`.tilt`
(exponentially tilted composition for tiny delta), :mod:`.limits` (the memory budget),
:mod:`.evaluate` (one evaluation at a grid step, the refinement loop, and the public
fixed-grid evaluator used by calibration and the search), :mod:`.engine` (the
``epsilon``/``delta`` entry points registered as engine "prv") and :mod:`.prefixes`
(epsilon after every prefix of a sequence, for ``verify``).
"""

from dpforge import _deprecated
from dpforge.accounting.prv.allocator import raise_thresholds
from dpforge.accounting.prv.compose import ComposedMeasure, ComposedProfile, compose
from dpforge.accounting.prv.discrete_loss import DiscreteLoss
from dpforge.accounting.prv.discretise import GridMeasure, lower_measure, upper_measure
from dpforge.accounting.prv.evaluate import Evaluation, FixedGridEvaluator, evaluate, initial_step

raise_thresholds()  # FFT-sized temporaries without a page fault each (see .allocator)

__all__ = [
    "ComposedMeasure",
    "ComposedProfile",
    "DiscreteLoss",
    "Evaluation",
    "FixedGridEvaluator",
    "GridMeasure",
    "compose",
    "evaluate",
    "initial_step",
    "lower_measure",
    "upper_measure",
]


def __getattr__(name: str):
    """Names that moved in 0.2 (see :mod:`dpforge._deprecated`)."""
    return _deprecated.moved_name(__name__, name)
