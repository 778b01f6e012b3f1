"""A certified shortcut for eps = 0: the total variation distance of the composition.

delta(0) of a pair is its total variation distance, TV(P, Q) = P(L > 0) - Q(L > 0) for the
privacy loss L = log dP/dQ.  For product measures,

    TV(P_1 x ... x P_T, Q_1 x ... x Q_T) <= 1 - prod_i (1 - TV(P_i, Q_i)),

by coupling each coordinate maximally (the coupling inequality; Lindvall 1992, Lectures
on the Coupling Method): the coordinates agree together with probability
prod_i (1 - TV_i), and the total variation of the products is at most the probability
that some coordinate differs.  So when that bound is at most delta, delta(0) <= delta and eps(delta) = 0
exactly (eps >= 0 always): both certified bounds are 0, with no grid at all.  For a
Poisson-subsampled step TV_i = q TV(base), so this answers at once the queries where
T q TV(base) <= delta, which the grids answer slowly (sigma = 0.3, q = 1e-6, T = 1e3 at
delta = 0.1: 18 s for [0, 0]).

Each TV_i is a difference of two probabilities near 1/2 when q is small; it is raised
by their modelled errors (:mod:`.rounding`) and the subtraction's rounding.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpforge.accounting.prv import rounding
from dpforge.accounting.prv.components import directions_for
from dpforge.mechanisms.combinators import Component


def one_step_total_variation(component: Component) -> float:
    """An upper bound on TV(P, Q) of one step of ``component``, the larger over its
    directions (TV is symmetric, so they agree up to rounding), at most 1."""
    values = []
    for direction in directions_for([component]):
        loss = component.privacy_loss_distribution(direction)
        zero = np.zeros(1)
        functions = tuple(np.asarray(v, dtype=float) for v in loss.distribution_functions(zero))
        errors = rounding.function_errors(loss, zero, functions)
        difference = float(functions[1][0]) - float(functions[3][0])
        margin = float(errors[1][0]) + float(errors[3][0]) + 2.0 * rounding.U * abs(difference)
        values.append(difference + margin)
    return min(1.0, max(max(values), 0.0))


def total_variation_bound(components: Sequence[Component]) -> float:
    """1 - prod_i (1 - TV_i)^{count_i} (module docstring), at least TV of the composition."""
    log_agree = 0.0
    for component in components:
        tv = one_step_total_variation(component)
        if tv >= 1.0:
            return 1.0
        log_agree += component.count * math.log1p(-tv)
    return -math.expm1(log_agree)
