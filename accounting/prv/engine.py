"""The PRV engine's entry points: certified ``epsilon(delta)`` and ``delta(epsilon)``.

Both refine one :class:`~dpforge.accounting.prv.evaluate.Evaluation` until the certified
bracket is as narrow as ``relative_accuracy`` asks (or a grid limit is reached, which
``accuracy["achieved"]`` then shows), and report the bracket with how it was obtained.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from dpforge.accounting.prv import limits
from dpforge.accounting.prv.evaluate import Evaluation, Refined, _step_factor, normal_epsilon, probe_step, refine
from dpforge.accounting.prv.exact import exact_delta, exact_epsilon
from dpforge.accounting.prv.stand_in import STAND_IN_COMPONENTS, chosen_step, stand_in
from dpforge.accounting.prv.total_variation import total_variation_bound
from dpforge.accounting.results import DeltaResult, EpsilonResult
from dpforge.errors import DpforgeAccuracyWarning, LimitError, ParameterError, warn_caller
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.validation import require_count, require_non_negative, require_positive, require_probability_open

#: the engine's name in the registry of :mod:`dpforge.accounting.api`
NAME = "prv"

#: the coarsest grid step the ``step=`` option takes, in nats: a point of the grid at
#: 1,000 nats put e^1000 into a cell's error cover (inf), and the call ended in a math
#: domain error
LARGEST_STEP = 64.0


def _fixed_step(step: object) -> float:
    """The ``step=`` option checked: a finite number in (0, ``LARGEST_STEP``]."""
    value = require_positive("step", step)
    if value > LARGEST_STEP:
        raise ParameterError(f"step must be a finite number in (0, {LARGEST_STEP:g}] (nats), got {step!r}")
    return value


def _components(description: Description) -> list[Component]:
    return flatten(description)


def _reject_options(options: dict) -> None:
    if options:
        raise ParameterError(f"{sorted(options)[0]} is not an option of the prv engine")


def _require_flag(name: str, value: object) -> bool:
    """``value`` if it is a bool, else a one-line :class:`ParameterError` naming ``name``."""
    if not isinstance(value, bool):
        raise ParameterError(f"{name} must be True or False, got {value!r}")
    return value


#: deltas below this are not refined for: a bracket [0, 1e-15] answers "negligible"
NEGLIGIBLE_DELTA = 1e-14


def _accuracy(
    relative_accuracy: float,
    low: float,
    high: float,
    evaluation: Evaluation,
    refinements: int,
    tilted: bool,
    negligible: float = 0.0,
    warn: bool = True,
    tail: float | None = None,
) -> dict:
    """What the bracket [low, high] achieved and the grid it came from; warns
    (:class:`~dpforge.errors.DpforgeAccuracyWarning`) when it is wider than asked (a delta
    upper bound below ``negligible`` counts as reached); no warning when the caller fixed
    the grid (``warn`` false): it asked for a grid, not an accuracy.  ``tail``: the
    truncation tail the last grids were built for (``truncation_tail``; a table of
    prefixes read at that grid needs the same tail, :mod:`.prefixes`)."""
    achieved = (high - low) / high if high > 0 else 0.0
    if high < negligible:
        achieved_ok = True
    else:
        achieved_ok = achieved <= relative_accuracy
    if not achieved_ok and warn:
        warn_caller(
            f"the prv engine reached a relative width of {achieved:.3g}, not the {relative_accuracy:g} asked "
            f"(grid of {evaluation.grid_size} points after {refinements} refinements); the bounds are certified "
            "but looser than requested",
            DpforgeAccuracyWarning,
        )
    return {
        "relative_accuracy": relative_accuracy,
        "achieved": achieved,
        "reached": achieved_ok,
        "grid_step": evaluation.step,
        "grid_size": evaluation.grid_size,
        "refinements": refinements,
        "tilted": tilted,
        **({} if tail is None else {"truncation_tail": tail}),
    }


def _epsilon(
    description: Description,
    delta: float,
    *,
    relative_accuracy: float = 1e-3,
    step: float | None = None,
    max_refinements: int = 6,
    closed_form: bool = True,
    **options,
) -> EpsilonResult:
    """Certified bounds on epsilon(delta) of a composed, possibly subsampled, description.

    ``upper`` and ``lower`` are certified for the add-or-remove relation under Poisson
    subsampling (the maximum over both directions).  The grid step is refined until
    (upper - lower) / upper <= ``relative_accuracy`` (or the grid limit is reached;
    ``accuracy['achieved']`` reports what was reached).  Pass ``step`` to fix the grid.
    Every grid is checked against ``memory_budget`` bytes (default 6 GiB) before it is
    allocated (:mod:`.limits`).  A description of ``STAND_IN_COMPONENTS`` components or
    more has the first refinement's step checked, and where needed chosen, on a stand-in
    of a few of them (:mod:`.stand_in`); its bounds come from its own evaluations only.
    Where no grid is needed (eps = 0 by the total variation
    bound, a single step, unsampled Gaussians) none is built (:func:`_without_grid`);
    ``closed_form=False`` builds the grids all the same (to cross-check them).
    """
    _reject_options(options)
    closed_form = _require_flag("closed_form", closed_form)
    delta = require_probability_open("delta", delta)
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    max_refinements = require_count("max_refinements", max_refinements, minimum=0)
    components = _components(description)
    tail = 1e-4 * delta
    first_refinement = None

    def tilt(low: float, high: float) -> tuple[float, float, float]:
        """Tilt at the middle of the bracket, keep losses from its certified lower end."""
        return (0.5 * (low + high) if math.isfinite(high) else max(2.0 * low, low + 1.0)), low, delta

    def refined_from(
        parts: list[Component],
        first: float,
        refinements: int,
        fixed: bool,
        tail: float,
        first_refinement: Callable[[float, float, float], float | None] | None = None,
        moments_from: list[Component] | None = None,
        coarse_upper: tuple[tuple[str, ...], float] | None = None,
    ) -> Refined:
        """:func:`.evaluate.refine` of ``parts`` for this query (the plan, or its stand-in)."""
        sized = parts if moments_from is None else moments_from
        return refine(
            parts,
            first,
            tail,
            relative_accuracy,
            lambda e: e.epsilon(delta),
            refinements,
            delta=delta,
            tilt=tilt,
            fixed=fixed,
            weight_at=lambda high: high if math.isfinite(high) else normal_epsilon(sized, delta, tail),
            first_refinement=first_refinement,
            moments_from=moments_from,
            coarse_upper=coarse_upper,
        )

    if step is None:
        shortcut = _without_grid(components, delta, relative_accuracy) if closed_form else None
        if shortcut is not None:
            return shortcut
    # a plan of many components sizes its grids, and chooses its first refinement's step,
    # on a stand-in of a few of them (:mod:`.stand_in`); its bounds are its own
    proxy = stand_in(components) if len(components) >= STAND_IN_COMPONENTS else None
    planned = None  # (first step, coarse_upper) chosen on the stand-in (_plan_from_stand_in)
    if step is not None:
        step = _fixed_step(step)
        first, max_refinements = step, 0
    else:
        first = probe_step(components, delta, relative_accuracy, tail, moments_from=proxy)
        if proxy is not None:

            def first_refinement(tail: float, proposed: float, failing: float) -> float | None:
                return _step_from_stand_in(proxy, relative_accuracy, tail, proposed, failing, refined_from)

            planned = _plan_from_stand_in(proxy, first, tail, delta, relative_accuracy, refined_from)

    refined = None
    if planned is not None:
        try:
            refined = refined_from(components, planned[0], max_refinements, False, tail, first_refinement, proxy, planned[1])
        except LimitError:
            # the step the stand-in chose is finer than the probe's, and its grids can pass
            # a named limit the probe's fit (400 phases of 10 steps under an 8 MB budget):
            # the plan is probed as before, and a refinement past the limit keeps the
            # bracket reached, flagged, as it did
            refined = None
    if refined is None:
        refined = refined_from(components, first, max_refinements, step is not None, tail, first_refinement, proxy)
    evaluation, refinements, low, high = refined.evaluation, refined.refinements, refined.low, refined.high
    if not math.isfinite(high):
        raise LimitError(
            f"delta={delta:g} is below what the prv engine can certify for this description "
            "(the truncated and round-off mass alone exceeds it); use a larger delta"
        )
    return EpsilonResult(
        lower=low,
        upper=high,
        estimate=0.5 * (low + high),
        delta=delta,
        engine=NAME,
        accuracy=_accuracy(
            relative_accuracy, low, high, evaluation, refinements, refined.tilted, warn=step is None, tail=refined.tail
        ),
    )


def _step_from_stand_in(
    proxy: list[Component],
    relative_accuracy: float,
    tail: float,
    proposed: float,
    failing: float,
    refined_from: Callable[..., Refined],
) -> float | None:
    """The grid step to refine a many-component plan to, chosen on its stand-in
    ``proxy`` (:mod:`.stand_in`) evaluated at fixed steps, at the plan's truncation
    ``tail``, from the step model's ``proposed`` step and below the ``failing`` probe
    step (:func:`.stand_in.chosen_step`); None where the stand-in gives nothing to go
    by.  No bound comes from it."""

    def width_at(step: float) -> float:
        try:
            refined = refined_from(proxy, step, 0, True, tail)
        except LimitError:
            return math.inf
        if not (math.isfinite(refined.high) and refined.high > 0.0):
            return math.inf
        return (refined.high - refined.low) / refined.high

    return chosen_step(width_at, proposed, failing, relative_accuracy)


def _plan_from_stand_in(
    proxy: list[Component],
    probe: float,
    tail: float,
    delta: float,
    relative_accuracy: float,
    refined_from: Callable[..., Refined],
) -> tuple[float, tuple[tuple[str, ...], float] | None] | None:
    """(the step a many-component plan is first evaluated at, (the directions its
    stand-in ``proxy`` shows dominated, the ``probe`` step) or None), chosen on the
    stand-in (:mod:`.stand_in`) in place of the plan's own probe; None (the plan is
    probed as before) where the stand-in's evaluation at the probe step is tilted (the
    plan's own probe decides tilting) or certifies no finite positive eps.

    The plan's probe composed every component in every direction for both bounds at a
    step that only fed the step model, whose proposal the stand-in then corrected
    (:func:`_step_from_stand_in`): the stand-in's width at the probe step feeds the same
    model and the same correction here, and the plan is evaluated once, at the step
    chosen, with each dominated direction composed for its upper bound alone at the
    probe step (:func:`.evaluate.refine`'s ``coarse_upper``, which composes it in full
    where the plan's own bounds do not show it dominated).  10,000 phases of 10 steps
    (the verify family) at delta = 1e-5: the probe took 8.6 of the call's 33 s.  No bound
    comes from the stand-in: a poor likeness costs a further refinement of the plan,
    which goes on as before (``first_refinement``)."""
    try:
        probed = refined_from(proxy, probe, 0, True, tail)
    except LimitError:
        return None
    low, high = probed.low, probed.high
    if probed.tilted or not (math.isfinite(high) and high > 0.0):
        return None
    dominated = probed.evaluation.dominated(delta)
    coarse_upper = (dominated.directions, probe) if dominated is not None else None
    if high - low <= relative_accuracy * high:
        return probe, coarse_upper
    # as the refinement's first round: the step model's proposal within 8x of the probe,
    # corrected on the stand-in
    proposed = probe * min(max(_step_factor(relative_accuracy * high, high - low, probe, []), 0.125), 1.0 / 1.5)
    suggested = _step_from_stand_in(proxy, relative_accuracy, tail, proposed, probe, refined_from)
    step = max(suggested, 0.125 * probe) if suggested is not None and suggested < probe else proposed
    return step, coarse_upper


def _without_grid(components: list[Component], delta: float, relative_accuracy: float) -> EpsilonResult | None:
    """eps(delta) where no grid is needed: 0 when the total variation bound is at most
    delta (:mod:`.total_variation`; ``accuracy["total_variation"]``), or read off a
    closed-form profile (:mod:`.exact`: one step, or unsampled Gaussians;
    ``accuracy["closed_form"]``); None otherwise."""
    accuracy = {"relative_accuracy": relative_accuracy, "grid_step": None, "grid_size": 0, "refinements": 0, "tilted": False}
    bound = total_variation_bound(components)
    if bound <= delta:  # delta(0) <= delta: eps = 0 exactly
        accuracy |= {"achieved": 0.0, "reached": True, "total_variation": bound}
        return EpsilonResult(lower=0.0, upper=0.0, estimate=0.0, delta=delta, engine=NAME, accuracy=accuracy)
    exact = exact_epsilon(components, delta)
    if exact is None:
        return None
    name, low, high = exact
    achieved = (high - low) / high if high > 0 else 0.0
    if achieved > relative_accuracy:
        return None  # wider than asked (its error model, near an atom): the grids answer
    accuracy |= {"achieved": achieved, "reached": True, "closed_form": name}
    return EpsilonResult(lower=low, upper=high, estimate=0.5 * (low + high), delta=delta, engine=NAME, accuracy=accuracy)


def delta_evaluation(
    description: Description,
    epsilons: Sequence[float],
    relative_accuracy: float,
    step: float | None,
    max_refinements: int,
) -> Refined:
    """The composed profiles, refined until delta at every one of ``epsilons`` has the
    relative accuracy (deltas below 1e-14 are not refined for).  With one epsilon the
    composition may be tilted there (:mod:`.tilt`) when round-off would limit it."""
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    max_refinements = require_count("max_refinements", max_refinements, minimum=0)
    components = _components(description)
    tail = 1e-16

    def bounds_of(evaluation: Evaluation) -> tuple[float, float]:
        """The bracket of the point with the widest relative bracket (the others are as
        accurate or more)."""
        worst, worst_ratio = (0.0, 0.0), -1.0
        for value in epsilons:
            low, high = evaluation.delta(value)
            ratio = (high - low) / high if high >= 1e-14 else 0.0
            if ratio > worst_ratio:
                worst, worst_ratio = (low, high), ratio
        return worst

    tilt = None
    proxy = stand_in(components) if len(components) >= STAND_IN_COMPONENTS else None  # sizes grids (refine)
    if len(epsilons) == 1:
        point = float(epsilons[0])

        def tilt(low: float, high: float) -> tuple[float, float, float]:
            """Tilt at the queried eps; the profile is needed there only."""
            return point, point, max(high, 1e-300)

    if step is not None:
        first, max_refinements = _fixed_step(step), 0
    else:
        first = probe_step(components, 1e-6, relative_accuracy, tail, moments_from=proxy)
    return refine(
        components,
        first,
        tail,
        relative_accuracy,
        bounds_of,
        max_refinements,
        tilt=tilt,
        negligible=NEGLIGIBLE_DELTA,
        fixed=step is not None,
        weight_at=lambda high: max(float(e) for e in epsilons),
        moments_from=proxy,
    )


def _delta(
    description: Description,
    epsilon: float,
    *,
    relative_accuracy: float = 1e-3,
    step: float | None = None,
    max_refinements: int = 6,
    closed_form: bool = True,
    **options,
) -> DeltaResult:
    """Certified bounds on delta(epsilon); refined until (upper - lower)/upper <= relative_accuracy.
    Read off a closed form where there is one (one step, unsampled Gaussians,
    :mod:`.exact`; ``accuracy["closed_form"]``) unless ``closed_form=False`` or a
    ``step`` is given."""
    _reject_options(options)
    closed_form = _require_flag("closed_form", closed_form)
    epsilon = require_non_negative("epsilon", epsilon)
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    exact = exact_delta(_components(description), epsilon) if closed_form and step is None else None
    achieved = (exact[2] - exact[1]) / exact[2] if exact is not None and exact[2] > 0 else 0.0
    if exact is not None and (achieved <= relative_accuracy or exact[2] < NEGLIGIBLE_DELTA):
        name, low, high = exact  # (wider than asked: the grids answer)
        accuracy = {"relative_accuracy": relative_accuracy, "achieved": achieved, "reached": True}
        accuracy |= {"grid_step": None, "grid_size": 0, "refinements": 0, "tilted": False, "closed_form": name}
        return DeltaResult(lower=low, upper=high, estimate=0.5 * (low + high), epsilon=epsilon, engine=NAME, accuracy=accuracy)
    refined = delta_evaluation(description, (epsilon,), relative_accuracy, step, max_refinements)
    evaluation, refinements, low, high = refined.evaluation, refined.refinements, refined.low, refined.high
    return DeltaResult(
        lower=low,
        upper=high,
        estimate=0.5 * (low + high),
        epsilon=epsilon,
        engine=NAME,
        accuracy=_accuracy(
            relative_accuracy,
            low,
            high,
            evaluation,
            refinements,
            refined.tilted,
            NEGLIGIBLE_DELTA,
            warn=step is None,
            tail=refined.tail,
        ),
    )


def epsilon(description: Description, delta: float, *, memory_budget: float | None = None, **options) -> EpsilonResult:
    """Certified bounds on epsilon(delta) (see :func:`_epsilon`), every grid within
    ``memory_budget`` bytes (default :data:`.limits.DEFAULT_MEMORY_BUDGET`)."""
    with limits.memory_budget(memory_budget):
        return _epsilon(description, delta, **options)


def delta(description: Description, epsilon: float, *, memory_budget: float | None = None, **options) -> DeltaResult:
    """Certified bounds on delta(epsilon) (see :func:`_delta`), every grid within
    ``memory_budget`` bytes (default :data:`.limits.DEFAULT_MEMORY_BUDGET`)."""
    with limits.memory_budget(memory_budget):
        return _delta(description, epsilon, **options)
