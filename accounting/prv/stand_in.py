"""A stand-in for a composition of many distinct components, to choose its grid step.

A plan of thousands of distinct phases (a per-step noise schedule, a ledger that
``verify`` reads) costs a discretisation and a transform per component and direction at
every evaluation, and the refinement made three: 10,000 phases of 10 steps
(sigma_i = 0.8 + 0.4 i / 9999, q = 0.01, delta = 1e-5) took 12, 28 and 59 s, and the last
was twice as fine as needed (width 2.0e-4 against the 1e-3 asked: the order fitted from
the probe, 1.57, was not the order near the goal, 2.9).

The width of a certified bracket at a grid step is a sum of per-step discretisation
errors, so a composition with a few components, each a member of a group of similar
ones and carrying the group's steps, has nearly the same width at the same step.  On
that family the stand-in of 32 components had 2.464e-2, 1.568e-3 and 2.033e-4 at the
three steps the plan was evaluated at, against 2.46e-2, 1.57e-3 and 2.035e-4; on 1,000
phases 3.33e-2 and 5.80e-4 against 3.38e-2 and 5.74e-4.  Its evaluations cost a few
hundredths of the plan's.

:func:`stand_in` builds it.  For an epsilon query the stand-in also stands in for the
plan's probe (:func:`.engine._plan_from_stand_in`): its width at the probe step feeds the
step model, :func:`chosen_step` evaluates it at the step the model proposes (where its
width holds, the proposal stands; where it does not, the miss above, the search goes
on, on the stand-in alone, to a step it meets), and the directions it shows dominated
are composed for their upper bound alone at the probe step.  Where the stand-in's
probe is tilted, or the chosen step passes a named limit, the plan is probed and the
same search runs at the refinement's first step (:func:`.evaluate.refine`,
``first_refinement``); a delta query only sizes its grids on the stand-in.  Every bound reported comes from the plan's own evaluations: the
stand-in decides only where to look, so a poor likeness costs time (a further
refinement), never soundness.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from dpforge.accounting.prv.components import bulk_spread, directions_for
from dpforge.accounting.prv.evaluate import _step_factor
from dpforge.mechanisms.combinators import Component

#: descriptions of at least this many components consult a stand-in at their first
#: refinement; with fewer, its evaluations cost about what the plan's own do (100 to 400
#: phases: 0.1-0.8 s added to calls of 0.5-1.4 s, where the step model seldom missed)
STAND_IN_COMPONENTS = 1000
#: components of the stand-in (about; every mechanism class gets at least one)
GROUPS = 32
#: the step model's proposal is kept where the stand-in's width there is within this
#: share of the width asked for ...
_ACCEPT_SHARE = 0.9
#: ... otherwise the stand-in's width is aimed at this share
_AIM_SHARE = 0.8
#: evaluations of the stand-in the search may make
_ROUNDS = 12
#: ... at steps no finer than this share of the plan's probe step: one round of the
#: refinement shrinks the step by at most 8x (:func:`.evaluate.refine`), and a stand-in
#: searched without that bound went to 2M points at 10-20 s an evaluation on a plan whose
#: lower chain converges at first order (600 Gaussian and 400 Laplace phases at delta =
#: 1e-10), then proposed a grid past the direct limit, where that plan stops refining
_FINEST_SHARE = 0.125
#: ... climbing from a passing step by this factor while the width still passes
_CLIMB = 1.15


def _grouped(members: list[tuple[float, Component]], groups: int) -> list[Component]:
    """``members`` ((sort key, component), sorted) cut into at most ``groups`` runs of
    about equal steps (a member joins the run its steps' midpoint falls in); each run is
    replaced by its member at the run's step-weighted median, carrying the run's steps."""
    total = sum(component.count for _, component in members)
    runs: dict[int, list[Component]] = {}
    before = 0
    for _, component in members:
        index = min(groups - 1, int(groups * (before + 0.5 * component.count) / total))
        runs.setdefault(index, []).append(component)
        before += component.count
    out = []
    for run in runs.values():  # in sorted order
        steps = sum(component.count for component in run)
        seen = 0
        for member in run:
            seen += member.count
            if 2 * seen >= steps:
                out.append(Component(member.mechanism, member.sampling_rate, steps))
                break
    return out


def stand_in(components: Sequence[Component], groups: int = GROUPS) -> list[Component]:
    """About ``groups`` components standing in for ``components``.

    Components are split by mechanism class (a run never mixes them), each class gets
    groups in proportion to its steps (at least one), and within a class they are
    sorted by sampling rate, then by the robust spread of one step's loss
    (:func:`.components.bulk_spread`, in the first direction), and cut into runs of
    about equal steps (:func:`_grouped`).  The steps in all are those of
    ``components``."""
    direction = directions_for(components)[0]
    classes: dict[str, list[tuple[float, Component]]] = {}
    for component in components:
        spread = bulk_spread(component.privacy_loss_distribution(direction))
        classes.setdefault(type(component.mechanism).__qualname__, []).append((spread, component))
    total = sum(component.count for component in components)
    out: list[Component] = []
    for members in classes.values():
        members.sort(key=lambda item: (item[1].sampling_rate, item[0]))
        steps = sum(component.count for _, component in members)
        share = max(1, round(groups * steps / total))
        out.extend(_grouped(members, min(share, len(members))))
    return out


def chosen_step(
    width_at: Callable[[float], float], proposed: float, failing: float, relative_accuracy: float
) -> float | None:
    """The grid step to refine a plan to, from its stand-in's relative width at fixed
    steps (``width_at``: inf where it could not be evaluated); None where nothing was
    found in ``_ROUNDS`` evaluations.

    ``proposed`` (the step model's choice) is kept when the stand-in's width there is
    within ``_ACCEPT_SHARE`` of the width asked for.  Otherwise the step shrinks by the
    refinement's own model (:func:`.evaluate._step_factor`, the order fitted on the
    last two widths) until the width is within ``_AIM_SHARE``, then grows by ``_CLIMB``
    while it still is and the step stays below the last failing one (``failing`` at
    first: a step known to be too coarse, the plan's probe).  No step below
    ``_FINEST_SHARE`` of the probe's is evaluated; where that one still fails, it is
    returned."""
    aim = _AIM_SHARE * relative_accuracy
    finest = _FINEST_SHARE * failing
    step, passing = max(proposed, finest), None
    history: list[tuple[float, float]] = []
    rounds = 0
    while rounds < _ROUNDS:
        width = width_at(step)
        rounds += 1
        if rounds == 1 and width <= _ACCEPT_SHARE * relative_accuracy:
            return step  # the step model's choice holds: keep it
        if width <= aim:
            passing = step
            break
        if not math.isfinite(width):
            return None  # the stand-in could not be evaluated there: nothing to go by
        if step <= finest:
            return finest  # as far as one round goes; the refinement carries on from there
        failing = step
        factor = _step_factor(aim, width, step, history)
        history.append((step, width))
        step = max(step * min(max(factor, 0.125), 1.0 / 1.5), finest)
    if passing is None:
        return None
    # coarser while it passes: the width is not monotone in the step (a lower chain's
    # grid phase moves with it: 10,000 phases of 10 steps had 9.2e-4 at 5.0e-4 and
    # 1.56e-3 at 3.9e-4), so the search climbs from a passing step rather than bisects
    while rounds < _ROUNDS and _CLIMB * passing < failing:
        rounds += 1
        if width_at(_CLIMB * passing) > aim:
            break
        passing *= _CLIMB
    return passing
