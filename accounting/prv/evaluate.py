"""One PRV evaluation at a grid step, the refinement loop, and the fixed-grid evaluator.

An :class:`Evaluation` holds the composed profiles of both bounds in every neighbouring
direction at one grid step; its brackets are certified at that step.  :func:`refine`
shrinks the step until the bracket is as narrow as asked.  :class:`FixedGridEvaluator`
evaluates only the certified upper bound on a grid fixed at its first call, so that
epsilon(parameter) is a smooth, monotone function a root finder can trust: calibration
(:mod:`dpforge.accounting.calibrate`) and the LMO search use it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from dpforge.accounting.prv.components import (
    _DIRECT_LIMIT,
    _DIRECT_RESOLUTION,
    atom_aligned_step,
    bulk_spread,
    directions_for,
    discretise_all,
    loss_moments,
    saddle_exponent,
    widest_span,
)
from dpforge.accounting.prv.compose import ComposedProfile, compose, extended_precision
from dpforge.accounting.prv.tilt import allowance_fits, choose_tilt, compose_tilted
from dpforge.accounting.prv.two_scale import _FINE_POINTS, _FIRST_FINE_POINTS
from dpforge.errors import DpforgeAccuracyWarning, DpforgeError, LimitError, ParameterError, warn_caller
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.mechanisms.pairs import Direction

#: largest grid (points) the refinement may ask for
MAX_GRID = 2**24


@dataclass(frozen=True)
class Evaluation:
    """Composed profiles of both bounds for every direction at one grid step."""

    step: float
    upper: tuple[ComposedProfile, ...]
    lower: tuple[ComposedProfile, ...]
    directions: tuple[str, ...] = ()

    def dominated(self, delta: float) -> "Evaluation | None":
        """The directions whose certified upper epsilon is at most another direction's
        certified lower epsilon: they cannot raise the maximum, so refining them is
        wasted work (at equality too: a tilted upper profile reports its floor, the
        certified lower end so far, for a direction whose epsilon lies below it).
        Returns them as a partial evaluation (or None)."""
        if len(self.upper) < 2 or len(self.lower) != len(self.upper):
            return None
        lows = [p.epsilon(delta) for p in self.lower]
        highs = [p.epsilon(delta) for p in self.upper]
        keep = [i for i in range(len(highs)) if highs[i] <= max(lows[:i] + lows[i + 1 :])]
        if not keep:
            return None
        return Evaluation(
            self.step,
            tuple(self.upper[i] for i in keep),
            tuple(self.lower[i] for i in keep),
            tuple(self.directions[i] for i in keep),
        )

    def epsilon(self, delta: float) -> tuple[float, float]:
        """(lower, upper) certified epsilon at ``delta``: the maximum over directions."""
        return (
            max(p.epsilon(delta) for p in self.lower),
            max(p.epsilon(delta) for p in self.upper),
        )

    def delta(self, epsilon: float) -> tuple[float, float]:
        """(lower, upper) certified delta at ``epsilon``: the maximum over directions."""
        return (
            max(p.delta(epsilon) for p in self.lower),
            min(1.0, max(p.delta(epsilon) for p in self.upper)),
        )

    def saddles(self, epsilon: float) -> dict[str, float]:
        """Per direction, the saddle exponent of its composed upper law at ``epsilon``
        (:meth:`ComposedProfile.saddle`), where it is known (inf: beyond the exponents
        composed)."""
        out = {}
        for direction, profile in zip(self.directions, self.upper):
            value = profile.saddle(epsilon)
            if value is not None:
                out[direction] = value
        return out

    @property
    def grid_size(self) -> int:
        """The largest FFT window of any composed profile."""
        return max(p.grid_size for p in self.upper + self.lower)


@dataclass(frozen=True)
class ChunkOptions:
    """How a staged evaluation builds its chunks (:func:`.components.discretise_all`):
    grids ``fine_scale`` times finer than the default, chunks about ``length_scale``^2
    times longer, and, with ``tilt`` at a tilted evaluation, two-scale sums also formed
    tilted at the saddle exponent of the eps read (:func:`.components.saddle_exponent`,
    :func:`.two_scale.two_scale_chunks`)."""

    fine_scale: float = 1.0
    tilt: bool = False
    length_scale: float = 1.0


def evaluate(
    components: Sequence[Component],
    step: float,
    tail: float,
    kinds: Sequence[str] = ("upper", "lower"),
    staged: bool = False,
    settled: Evaluation | None = None,
    tilt_at: float | None = None,
    floor: float = 0.0,
    tilt_budget: float | None = None,
    exponents: Mapping[str, float] | None = None,
    cache: dict | None = None,
    chunks: ChunkOptions = ChunkOptions(),
    only: Sequence[str] | None = None,
    delta: float | None = None,
    upper_bounds: Mapping[str, float] | None = None,
) -> Evaluation:
    """Compose every direction at ``step`` (those in ``only``, where given); directions
    already in ``settled`` (a previous, coarser evaluation of only the dominated
    directions) are reused as they are: their certified bounds stay valid.

    With ``tilt_at``, each composition is exponentially tilted so that its mean sits at
    that eps, and only losses from ``floor`` up are kept (:mod:`.tilt`): ``floor`` must be
    a certified lower bound on the eps being sought (or the eps being queried).  With
    ``tilt_budget`` (the part of delta the round-off allowance may take there) the tilt is
    the smallest that keeps the allowance within it (:func:`.tilt.choose_tilt`, which also
    decides on a long double power).

    A direction with an entry in ``exponents`` (the saddle exponent of the eps being
    sought or queried) has its one-step laws discretised on graded cells, weighted by
    their mass tilted at that exponent (:func:`.discretise.graded_lattice`).

    ``cache`` (a dict the caller keeps) holds the discretised measures by (direction,
    step, kind, staged, exponent), so that a second evaluation of the same grid (the
    tilted probe after the untilted one) composes them without discretising again.

    ``chunks``: how staged chunks are built (:class:`ChunkOptions`).

    For an epsilon query at ``delta``, the upper chains are composed first, and a
    direction whose certified upper eps (its own, or ``upper_bounds``' from another grid)
    is at or below a lower eps already certified (of a direction composed before it, or
    settled) gets no lower chain (:func:`no_lower_bound`): its lower bound could not
    raise the maximum.  The directions' lower chains go in order of their upper eps,
    so the one that may set the maximum comes first (the verify family's 'add' direction
    lies far below its 'remove' one: its lower chain was a quarter of every probe).
    Sound either way: the bracket is the maximum of certified bounds."""
    upper: list[ComposedProfile] = list(settled.upper) if settled else []
    lower: list[ComposedProfile] = list(settled.lower) if settled else []
    done = set(settled.directions) if settled else set()
    directions = list(settled.directions) if settled else []
    fresh = [d for d in directions_for(components) if d not in done and (only is None or d in only)]
    directions += fresh

    def profile(direction: str, kind: str) -> ComposedProfile:
        """One direction's composed profile of one bound."""
        direction_step = atom_aligned_step(components, direction, step)
        exponent = None if exponents is None else exponents.get(direction)
        # with chunks.tilt, a tilted evaluation's staged lower chunks are also summed
        # tilted, at the saddle exponent of the eps it reads
        chunk_theta = 0.0
        if chunks.tilt and staged and kind == "lower" and tilt_at is not None:
            chunk_theta = saddle_exponent(components, direction, tail, tilt_at)
        key = (direction, direction_step, kind, staged, exponent, chunks, chunk_theta)
        if cache is not None and key in cache:
            measures = cache[key]
        else:
            measures = discretise_all(
                components,
                direction,
                direction_step,
                tail,
                (kind,),
                staged=staged,
                exponent=exponent,
                fine_scale=chunks.fine_scale,
                chunk_theta=chunk_theta,
                length_scale=chunks.length_scale,
            )[kind]
            if cache is not None:
                cache[key] = measures
        theta, extended = choose_tilt(measures, tilt_at, floor, tilt_budget) if tilt_at is not None else (0.0, False)
        if theta > 0.0:
            composed = compose_tilted(measures, tail, theta, floor, extended)
            if (
                not extended
                and tilt_budget is not None
                and extended_precision(measures)
                and not allowance_fits(composed, measures[0][0].step, tilt_at, tilt_budget)
            ):
                # double was chosen on the estimated peak, and the composition's own
                # allowance does not fit the budget: priced at the bound 1 (long
                # double where double cannot fit), as it was before the estimate
                theta, extended = choose_tilt(measures, tilt_at, floor, tilt_budget, estimate_peak=False)
                composed = compose_tilted(measures, tail, theta, floor, extended)
        else:
            composed = compose(measures, tail)
        del measures
        return composed.upper_profile() if kind == "upper" else composed.lower_profile()

    # one kind at a time: a ledger of 10,000 steps holds a GB of one-step measures per kind
    uppers = {direction: profile(direction, "upper") for direction in fresh} if "upper" in kinds else {}
    upper += [uppers[direction] for direction in fresh if direction in uppers]
    if "lower" in kinds:
        ceilings = {direction: math.inf for direction in fresh}
        if delta is not None:
            # each a certified upper eps of its direction, from any grid: the smaller holds
            # (a tilted upper chain certifies nothing, +inf, for a direction far below its
            # tilt, where an earlier untilted grid's bound is finite)
            own = {d: p.epsilon(delta) for d, p in uppers.items()}
            known = _lowest_ceilings(upper_bounds, own) or {}
            ceilings = {direction: known.get(direction, math.inf) for direction in fresh}
        # the direction that may set the maximum first; one whose certified upper eps is
        # at or below a lower eps already certified cannot raise the lower bound
        best = max((p.epsilon(delta) for p in lower), default=0.0) if delta is not None else math.inf
        lowers = {}
        for direction in sorted(fresh, key=lambda d: -ceilings[d]):
            if delta is not None and ceilings[direction] <= best:
                lowers[direction] = no_lower_bound()
                continue
            lowers[direction] = profile(direction, "lower")
            if delta is not None:
                best = max(best, lowers[direction].epsilon(delta))
        lower += [lowers[direction] for direction in fresh]
    return Evaluation(step, tuple(upper), tuple(lower), tuple(directions))


def _moments(
    components: Sequence[Component], direction: Direction, tail: float, sized: Sequence[Component] | None = None
) -> tuple[float, float, float]:
    """:func:`.components.loss_moments` of ``components``, the mean and variance read off
    ``sized`` where given (a stand-in with the same steps, :mod:`.stand_in`); the widest
    one-step span is always the components' own (their truncations, which their
    discretisation computes anyway: a stand-in's members need not include the widest)."""
    if sized is None:
        return loss_moments(components, direction, tail)
    mean, variance, _ = loss_moments(sized, direction, tail)
    return mean, variance, widest_span(components, direction, tail)


def initial_step(
    components: Sequence[Component],
    delta: float,
    relative_accuracy: float,
    tail: float,
    sized: Sequence[Component] | None = None,
) -> float:
    """A first (probe) grid step from the composed mean/variance and the O(T h^2) error model.

    The pessimistic measure moves the mean of each step by at most h^2/8 and adds at
    most h^2/4 variance, so the width of the epsilon interval grows like c T h^2; the
    refinement then scales the step by the measured width.  ``sized``: as in
    :func:`_moments`.
    """
    steps = sum(c.count for c in components)
    mean = spread = width = 0.0
    for direction in directions_for(components):
        m, v, w = _moments(components, direction, tail, sized)
        mean, spread, width = max(mean, m), max(spread, math.sqrt(max(v, 0.0))), max(width, w)
    scale = max(mean + math.sqrt(2.0 * math.log(1.0 / delta)) * spread, 1e-2)
    from_error = math.sqrt(relative_accuracy * scale / (0.5 * steps))
    step = min(from_error, max(spread, 1e-6) / 40.0, width / 64.0)
    return max(step, 2.0 * (width + 12.0 * spread + 1.0) / MAX_GRID, 1e-9)


#: graded cells are sized by the saddle point of the composition, which describes where
#: the composed profile reads each step's law only when many steps are sampled: with
#: fewer expected sampled steps than this the cells stay uniform.  At one step
#: (sigma = 10, q = 1e-6, delta = 1e-15) the saddle-tilted weight sits beyond the window
#: and left the cells around eps 64 steps wide: width 1.6e-3 against 1.2e-4 uniform;
#: at 0.1 expected sampled steps (T = 1e5, delta = 1e-5) 1.04e-3 against 8.3e-4
_GRADED_MIN_HITS = 8.0


def expected_hits(components: Sequence[Component]) -> float:
    """Expected number of sampled steps, sum of sampling_rate x count."""
    return sum(min(c.sampling_rate, 1.0) * c.count for c in components)


def saddle_estimate(components: Sequence[Component], direction: Direction, tail: float, epsilon: float) -> float:
    """The exponent lambda at which the composed loss, tilted by e^{lambda l}, has its
    mean at ``epsilon``, under a normal approximation: (eps - mean) / variance, at least
    0 (and 0 when the variance vanishes or eps is not finite).  A right tail heavier than
    normal (subsampling) makes the true saddle point smaller, so the graded cells it
    sizes are, if anything, too fine."""
    mean, variance, _ = loss_moments(components, direction, tail)
    if not (variance > 0.0 and math.isfinite(epsilon)):
        return 0.0
    return max((epsilon - mean) / variance, 0.0)


def normal_epsilon(components: Sequence[Component], delta: float, tail: float) -> float:
    """A rough eps(delta) for sizing graded cells before any evaluation: the largest,
    over directions, of mean + sqrt(2 log(1/delta) variance) of the composed loss.  No
    bound depends on it."""
    values = []
    for direction in directions_for(components):
        mean, variance, _ = loss_moments(components, direction, tail)
        values.append(mean + math.sqrt(2.0 * math.log(1.0 / delta) * max(variance, 0.0)))
    return max(values)


#: descriptions of at least this many components are probed on a coarser grid ...
_MANY_COMPONENTS = 100
#: ... this many times the error model's step
_MANY_PROBE = 3.0


def probe_step(
    components: Sequence[Component],
    delta: float,
    relative_accuracy: float,
    tail: float,
    moments_from: Sequence[Component] | None = None,
) -> float:
    """The refinement's first grid step: :func:`initial_step`, times ``_MANY_PROBE`` for
    descriptions of ``_MANY_COMPONENTS`` components or more.  A probe only feeds the step
    model (width ~ c h^2, refitted from the second evaluation on) and the dominated-direction
    test, and every component's discretisation costs about in proportion to 1/step, so
    with many components a coarser probe saves most of its cost: 1,000 phases of 10 steps
    5.9 -> 4.8 s, with one refinement either way.  Not for fixed grids (calibration), where
    the first step is the final one.

    ``moments_from``: components whose one-step means and variances stand in for those
    of ``components`` in :func:`initial_step` (:func:`.stand_in.stand_in`, the same steps
    in all; :func:`_moments`): each component's moments come from a coarse
    discretisation of its own, which for 10,000 distinct steps took 4.2 of 31 s, for a
    step no bound depends on."""
    step = initial_step(components, delta, relative_accuracy, tail, moments_from)
    return _MANY_PROBE * step if len(components) >= _MANY_COMPONENTS else step


def _narrowest_bulk(components: Sequence[Component], minimum_count: int = 8) -> float:
    """Smallest robust one-step spread among components with at least ``minimum_count`` steps."""
    narrowest = math.inf
    for direction in directions_for(components):
        for component in components:
            if component.count >= minimum_count:
                bulk = bulk_spread(component.privacy_loss_distribution(direction))
                if bulk > 0:
                    narrowest = min(narrowest, bulk)
    return narrowest


def _needs_stages(components: Sequence[Component], step: float, tail: float, sized: Sequence[Component] | None = None) -> bool:
    """True when resolving every one-step law directly (about ``_DIRECT_RESOLUTION``
    grid steps across its bulk) would need more than ``_DIRECT_LIMIT`` grid points.  The
    FFT window covers the composed law's spread, not its mean (:func:`.compose.compose`
    centres every measure), so a large epsilon alone does not call for staging."""
    needed = min(step, _narrowest_bulk(components) / _DIRECT_RESOLUTION)
    return _direct_grid(components, needed, tail, sized) > _DIRECT_LIMIT


def _direct_grid(components: Sequence[Component], step: float, tail: float, sized: Sequence[Component] | None = None) -> float:
    """Grid points of one unstaged composition at ``step``: the composed law's spread
    (20 standard deviations plus the widest one-step span) over the step (``sized``: as
    in :func:`_moments`)."""
    window = 0.0
    for direction in directions_for(components):
        mean, variance, width = _moments(components, direction, tail, sized)
        window = max(window, 20.0 * math.sqrt(max(variance, 0.0)) + width)
    return window / step


#: the staged lower chain's grid step, in robust one-step widths of the narrowest component
_STAGED_BULKS = 0.75
#: ... and no finer than the composed spread over this many points.  A law whose bulk is
#: far narrower than any grid the composition can hold (sigma = 0.3, q = 1e-6: robust
#: width 2.8e-7 nats) took the finest step a direct grid holds (2^20 points), about 20x
#: finer than the error model's step, and paid for it in every chunk's tail grid: at
#: T = 1e3, delta = 1e-5, [0.250249, 0.250286] in 5.4 s; at 2^18 points [0.250255,
#: 0.250286] in 0.9 s (with the bulk grids of .two_scale._FIRST_FINE_POINTS).  2^17 was
#: faster there (0.6 s) but overrode S1's 0.75 bulk widths (q = 1e-4, sigma = 0.6,
#: T = 1e6: chunks of 3,650 steps against 1,405, 0.31 s against 0.25 s)
_STAGED_POINTS = _DIRECT_LIMIT // 4


def _staged_step(components: Sequence[Component], step: float, tail: float, sized: Sequence[Component] | None = None) -> float:
    """The grid step of a staged lower chain: ``_STAGED_BULKS`` bulk widths, unless the
    old choice (the larger of ``step`` and 1.5 bulk widths) is finer, and never below
    the composed spread over ``_STAGED_POINTS``.

    A chunk of c steps spans about 50 grid steps of its own law (c ~ (50 h / bulk)^2), so
    a coarse step makes few, long chunks, each composed untilted: at delta = 1e-12
    (q = 1e-3, sigma = 0.35, T = 5000) a step of 4.7 bulk widths made one chunk of all
    5,000 steps, whose round-off hid the tail that delta reads (lower bound 36.81 against
    an upper 37.142); at 0.75 widths the lower bound is 37.129 (37.140 with at least 16
    chunks, .components._MIN_PIECES).  Shorter chunks cost no more (two-scale chunks do
    most of their work on the chunk's fine grid): S1 keeps its lower bound 1.61079 and
    its time (benchmarks/results/scale_ab.json)."""
    bulk = _narrowest_bulk(components)
    old = max(step, 1.5 * bulk)
    return min(old, max(_STAGED_BULKS * bulk, _direct_grid(components, 1.0, tail, sized) / _STAGED_POINTS))


def _evaluate_chains(
    components: Sequence[Component],
    step: float,
    tail: float,
    staged: bool,
    upper_step: float | None,
    settled: Evaluation | None = None,
    tilt_at: float | None = None,
    floor: float = 0.0,
    tilt_budget: float | None = None,
    exponents: Mapping[str, float] | None = None,
    cache: dict | None = None,
    chunks: ChunkOptions = ChunkOptions(),
    delta: float | None = None,
    ceilings_from: Evaluation | None = None,
) -> Evaluation:
    """Both chains at ``step``, or, when staged with an ``upper_step``, the upper chain on
    one grid at ``upper_step`` and only the lower chain staged at ``step``; for an
    epsilon query at ``delta``, no lower chain for a direction already dominated
    (:func:`evaluate`), by its upper bounds here or in ``ceilings_from`` (an earlier
    evaluation of the same query: at a tiny delta the untilted probe's add direction
    reached at most 100 nats, certified, and its tilted chain at 250 certified nothing,
    so its staged lower chain, a third of the call, was built for nothing: sigma = 0.3,
    q = 1e-3, T = 1e5 at delta = 1e-15).

    Splitting is certified chain by chain: each chain's bound holds on any grid, so the
    pair (upper from one grid, lower from another) brackets the same true profile."""
    tilting = {"tilt_at": tilt_at, "floor": floor, "tilt_budget": tilt_budget, "exponents": exponents, "cache": cache}
    known = _ceilings(ceilings_from, delta) if ceilings_from is not None else None
    if not staged or upper_step is None:
        return evaluate(
            components, step, tail, staged=staged, settled=settled, chunks=chunks, delta=delta, upper_bounds=known, **tilting
        )
    upper = evaluate(components, upper_step, tail, kinds=("upper",), **tilting)
    ceilings = _lowest_ceilings(_ceilings(upper, delta), known)
    lower = evaluate(components, step, tail, kinds=("lower",), staged=True, chunks=chunks, delta=delta, upper_bounds=ceilings, **tilting)
    return Evaluation(step, upper.upper, lower.lower, upper.directions)


def _ceilings(evaluation: Evaluation, delta: float | None) -> dict[str, float] | None:
    """Each direction's certified upper eps at ``delta`` in ``evaluation`` (None without
    a delta): what :func:`evaluate` skips dominated lower chains by."""
    if delta is None:
        return None
    return {direction: profile.epsilon(delta) for direction, profile in zip(evaluation.directions, evaluation.upper)}


def _lowest_ceilings(*found: Mapping[str, float] | None) -> dict[str, float] | None:
    """Each direction's smallest certified upper eps among ``found`` (None where none is
    given): every one is certified for the same query, on whatever grid."""
    given = [ceilings for ceilings in found if ceilings is not None]
    if not given:
        return None
    merged: dict[str, float] = {}
    for ceilings in given:
        for direction, bound in ceilings.items():
            merged[direction] = min(merged.get(direction, math.inf), bound)
    return merged


def _tighter(evaluation: Evaluation, finer: Evaluation, delta: float | None) -> Evaluation:
    """``finer``, except that for an epsilon query (``delta`` given) a direction keeps its
    upper (lower) profile from ``evaluation`` where that one certifies the smaller
    (larger) epsilon.  Each profile is certified on its own grid, so either may be kept,
    direction by direction.  A tilted evaluation reports +inf (upper) and 0 (lower) for
    a direction whose epsilon lies far below the tilt (sigma = 0.3, q = 1e-3, T = 1e5 at
    delta = 1e-10: 'add' reaches at most 100 nats, the tilt sits at 207), and the
    maximum over directions then took +inf for the whole upper bound: the untilted
    probe's 208.01 was kept against the tilted 206.389."""
    if delta is None or set(evaluation.directions) != set(finer.directions):
        return finer
    old_upper = dict(zip(evaluation.directions, evaluation.upper))
    old_lower = dict(zip(evaluation.directions, evaluation.lower))
    upper, lower = [], []
    for direction, new_up, new_low in zip(finer.directions, finer.upper, finer.lower):
        old_up, old_low = old_upper[direction], old_lower[direction]
        upper.append(old_up if old_up.epsilon(delta) < new_up.epsilon(delta) else new_up)
        lower.append(old_low if old_low.epsilon(delta) > new_low.epsilon(delta) else new_low)
    return Evaluation(finer.step, tuple(upper), tuple(lower), finer.directions)


def no_lower_bound() -> ComposedProfile:
    """The trivial lower profile: delta = 0 at every eps, so a lower bound of 0 on eps.
    Certified for any direction (a hockey-stick divergence is never negative); it stands
    for a direction composed for its upper bound alone (:func:`_coarse_uppers`), or whose
    lower chain could not raise the maximum over directions (:func:`evaluate`)."""
    return ComposedProfile("lower", np.empty(0), np.empty(0), 0.0, 0.0, 0)


def _coarse_uppers(
    components: Sequence[Component],
    directions: Sequence[str],
    step: float,
    tail: float,
    exponents: Mapping[str, float] | None,
) -> Evaluation:
    """``directions`` composed for their upper bound alone at ``step``, each with no lower
    bound (:func:`no_lower_bound`): what a direction that another dominates needs, its
    upper bound at or below the other's lower bound (:meth:`Evaluation.dominated`)."""
    found = evaluate(components, step, tail, kinds=("upper",), exponents=exponents, only=directions)
    return Evaluation(step, found.upper, tuple(no_lower_bound() for _ in found.directions), found.directions)


def _without(evaluation: Evaluation, directions: Sequence[str]) -> Evaluation:
    """``evaluation`` less ``directions``."""
    keep = [index for index, direction in enumerate(evaluation.directions) if direction not in directions]
    return Evaluation(
        evaluation.step,
        tuple(evaluation.upper[index] for index in keep),
        tuple(evaluation.lower[index] for index in keep),
        tuple(evaluation.directions[index] for index in keep),
    )


def _with_lower(evaluation: Evaluation, lower: Evaluation) -> Evaluation:
    """``evaluation`` with the lower profiles of ``lower`` (matched by direction)."""
    by_direction = dict(zip(lower.directions, lower.lower))
    return Evaluation(
        evaluation.step,
        evaluation.upper,
        tuple(by_direction[d] for d in evaluation.directions),
        evaluation.directions,
    )


@dataclass(frozen=True)
class Refined:
    """What :func:`refine` reached: the last evaluation, the refinements made, and the
    certified bracket (the intersection of every evaluation's certified bracket)."""

    evaluation: Evaluation
    refinements: int
    low: float
    high: float
    tilted: bool = False
    #: the truncation tail of the last evaluation (cut from the caller's when the mass it
    #: leaves outside the windows moved epsilon; see :func:`tail_in_epsilon`)
    tail: float | None = None


#: a tilted evaluation is used once the round-off allowance alone would take more than
#: this share of the requested width
_ROUNDOFF_SHARE = 0.1
#: ... and then tilted no more than needed for the allowance to take at most this share
_TILT_BUDGET = 0.05
#: the refinement aims its width model at this share of the width asked for
_AIM = 0.7
#: the truncation tail is cut once the mass it leaves out moves epsilon by more than this
#: share of the width asked for ...
_TAIL_SHARE = 0.1
#: ... to this share (and to no less than _TAIL_FLOOR of the tail first given)
_TAIL_AIM = 0.02
_TAIL_FLOOR = 1e-8
#: a staged evaluation's single-grid upper chain is refined up to this many points (the
#: lower chain's chunks set the staging, not this grid; sigma = 1, q = 1e-6, T = 1e5 at
#: delta = 1e-15 converges at second order, 0.0029548 at 2^20 points, 0.0029521 at 2^21)
_UPPER_LIMIT = 2 * _DIRECT_LIMIT
#: ... and, once, as a last resort where the call would end short of the width with that
#: chain left at the limit, on up to this many: sigma = 0.6, q = 1e-6, T = 1e7 at
#: delta = 1e-10 composed its tilted upper window (13.6 nats) on 5.0M points and stopped
#: 1.24e-3 wide; composed once more on 10M points it meets the width (3.9e-4), at 1.24 GB
#: peak (2.2 GB by the budget's 224 bytes a point: a smaller memory budget leaves it
#: flagged).  Lifting the first limit instead let the step model take chains that were
#: short only on the way (the staged lower chain's next round met the width) to 13M
#: points: sigma = 1, q = 1e-6 at delta = 1e-5 took 5.2 s against 1.5 s
_UPPER_CHAIN_LIMIT = 8 * _UPPER_LIMIT
#: ... only where the call is short of the width by no more than this factor: up to 8x
#: the points cut the chain's own error up to 64x, but a call far wider is seldom set by
#: its upper chain (sigma = 175, q = 3.1e-5, T = 8 at delta = 1e-130 is 20 % wide by its
#: staged lower chain, and the 28M-point grid took 8 s for nothing; the chain's error
#: estimated at twice its step misread it, the step and tilt it was last refined at not
#: being those of the chain kept)
_PAST_LIMIT_SHORTFALL = 2.0
#: ... while a finer grid can still cut its step by this factor or more (its error by
#: the square).  It was 2: sigma = 0.3, q = 1e-5, T = 1e7 at delta = 1e-10, its upper
#: chain on 1.15M points from the probe, never refined it and stopped 1.02e-3 wide; on
#: 2M points (step x 0.55) it meets the width
_UPPER_ROOM = 1.5
#: grid steps per robust one-step spread (:func:`.components.bulk_spread`) at which a
#: stalled refinement stops before the step model's jump
_RESOLVED_CELLS = 4.0
#: the staged chunks' second build: chunks this many times _RESOLUTION steps wide
#: (.components.discretise_all's length_scale; 16x longer)
_LONGER_CHUNKS = 4.0
#: ... untilted, on bulk grids this many times finer (.two_scale: the first build's bulks
#: hold at most _FIRST_FINE_POINTS, the second's _FINE_POINTS); tilted, the tilt is what
#: the chunks lacked and their grids stay as they were (sigma = 0.3, q = 1e-6, T = 1e5 at
#: delta = 1e-15, with the staged step at 2^17 points: 2.0 s against 4.9 s at the finer
#: grids, both 4e-5 wide or less)
_UNTILTED_SECOND_SCALE = _FINE_POINTS / _FIRST_FINE_POINTS
#: chunk grids this many times finer, once, for laws without atoms when a staged
#: refinement has nothing else left to refine (:func:`refine`)
_LAST_RESORT_SCALE = 4.0
#: the chunks of a probe that tilts from the start: tilted and long, as the second round
_EARLY_CHUNKS = ChunkOptions(tilt=True, length_scale=_LONGER_CHUNKS)


def tail_in_epsilon(evaluation: Evaluation, delta: float) -> float:
    """How far the mass outside the windows (each profile's constant) moves the certified
    epsilon at ``delta``: |constant| / slope at the epsilon of the upper and of the lower
    profile that set the bracket (:meth:`ComposedProfile.slope`)."""
    effect = 0.0
    for profiles in (evaluation.upper, evaluation.lower):
        values = [p.epsilon(delta) for p in profiles]
        if not values:
            continue
        top = int(np.argmax(values))
        eps = values[top]
        if math.isfinite(eps) and eps > 0.0:
            slope = profiles[top].slope(eps)
            effect = max(effect, abs(profiles[top].constant) / slope if slope > 0.0 else math.inf)
    return effect


def roundoff_in_delta(evaluation: Evaluation, epsilon: float) -> float:
    """The largest part of any upper profile's delta(``epsilon``) that is round-off
    allowance: roundoff * sum_{x_j > eps} (1 - e^{eps - x_j})."""
    share = 0.0
    for profile in evaluation.upper:
        active = profile.positions > epsilon
        share = max(share, profile.roundoff * float(np.sum(-np.expm1(epsilon - profile.positions[active]))))
    return share


def refine(
    components: Sequence[Component],
    step: float,
    tail: float,
    relative_accuracy: float,
    bounds_of: Callable[[Evaluation], tuple[float, float]],
    max_refinements: int,
    delta: float | None = None,
    tilt: Callable[[float, float], tuple[float, float, float]] | None = None,
    negligible: float = 0.0,
    fixed: bool = False,
    weight_at: Callable[[float], float] | None = None,
    first_refinement: Callable[[float, float, float], float | None] | None = None,
    moments_from: Sequence[Component] | None = None,
    coarse_upper: tuple[Sequence[str], float] | None = None,
) -> Refined:
    """Shrink the grid step until the certified bracket is as narrow as asked (width ~ c h^2).

    ``bounds_of(evaluation)`` is the (lower, upper) bracket an evaluation certifies; the
    bracket kept is the intersection over every evaluation made (each is certified, so the
    intersection is too).  Refinement stops once upper - lower <= ``relative_accuracy`` *
    upper, or upper < ``negligible``.  For an epsilon query (``delta`` given) a direction
    that is certainly dominated by the other is kept from the coarser evaluation instead of
    being refined.

    ``tilt(lower, upper)`` gives (tilt_at, floor, delta level) for a tilted evaluation
    (:mod:`.tilt`); it is used from the probe on when the round-off allowance at ``floor``
    would take more than ``_ROUNDOFF_SHARE`` of the width asked for, which is what limits
    untilted compositions at tiny delta.

    When resolving the one-step laws directly would need more than ``_DIRECT_LIMIT``
    grid points, narrow components are composed in chunks on finer grids instead
    (``staged``, :func:`_staged_step`), and no finer final grid is tried (it would only
    add chunks).  The single-grid upper chain is refined first (at a tilted evaluation
    only while its Richardson-estimated error is at least half the width); once it stops
    gaining, the two-scale chunks (laws without atoms) are built once more, 16x longer
    and, at a tilted evaluation, with their sums tilted (untilted, on 8x finer bulk
    grids); then the chunks are composed on finer
    grids (``fine_scale``, up to 16x a round, aimed at half the width under a first-order
    model) until that stops gaining a quarter of the width.  Every direction keeps its
    tightest certified profiles across the evaluations (:func:`_tighter`).  A round that
    gained little stops at a quarter of the narrowest one-step bulk before the step
    model's jump past it (``_RESOLVED_CELLS``).  Where the probe would stage both chains
    (the spread model priced one grid over the limit), a law without atoms has its upper
    chain composed on the finest single grid that holds the window the staged lower
    chain measured (at the first round, where that grid passes a named limit at the
    probe), and refined there; at a tilted evaluation still short of the width at the
    end, that chain is composed once more, tilted at the bracket reached.  Where a grid
    holding the window measured by the upper chain alone gives a bracket that must be
    tilted whatever eps is, both chains are composed direct there instead, and the staged
    chunks are built tilted from the probe on (:func:`_early_direct`); the chunk rounds
    then gauge their gain on the staged chain's own lower end, not the bracket's (which
    may hold the direct chain's).

    For an epsilon query, the truncation tail is cut (to ``_TAIL_AIM`` of the width asked
    for, at most 1e-4x a round and 1e-8x in all) whenever the mass it leaves outside the
    windows moves epsilon by more than ``_TAIL_SHARE`` of that width
    (:func:`tail_in_epsilon`).

    ``fixed``: evaluate at ``step`` exactly (no staging, no refinement; tilting still
    applies), as a caller that passes its own grid step asks.

    ``weight_at(high)`` (high: the certified upper end so far, +inf before the probe) is
    the eps whose saddle exponent sizes the graded cells of every evaluation
    (:func:`evaluate`): before the probe a normal approximation's
    (:func:`saddle_estimate`), then the last evaluation's own (:meth:`Evaluation.saddles`,
    the normal approximation's again where the saddle lies beyond the exponents composed).
    Without it, or with fewer than ``_GRADED_MIN_HITS`` expected sampled steps, the cells
    are uniform.

    ``first_refinement(tail, proposed, probe)``, where given, is asked once, at the first
    refinement from a direct grid, for the step to refine to, given the step model's
    ``proposed`` one and the ``probe``'s (a stand-in's choice, :mod:`.stand_in`); a step
    finer than the probe's replaces the step model's, which has only the probe's width
    to go by, held like it to at most 8x finer than the probe's.

    ``moments_from``: components whose one-step moments stand in for those of
    ``components`` (a stand-in, :func:`.stand_in.stand_in`) where the refinement sizes
    grids and staging (:func:`_direct_grid`) and estimates saddle exponents: each
    component's moments come from a coarse discretisation of its own (10,000 distinct
    steps: 4.2 of 31 s), and none of these choices bounds anything.

    ``coarse_upper`` = (directions, coarse step): for an epsilon query whose probe is
    neither staged nor fixed, these directions (expected to be dominated: a stand-in's
    finding, :func:`.engine._plan_from_stand_in`) are composed at the probe for their
    upper bound alone, at the coarse step, and kept so, with no lower bound, wherever
    that upper bound is at or below another direction's lower bound at the probe
    (:meth:`Evaluation.dominated`: they cannot raise the maximum, and the lower bound is
    the other direction's); any other is composed at the probe's step as the rest are.
    The bracket stays certified either way: each bound is the maximum of certified
    bounds.  10,000 phases of the verify family at delta = 1e-5: the add direction's
    upper chain at the probe step in place of both its chains at the step refined to.
    """
    sized = components if moments_from is None else moments_from
    model_step = step  # the error model's step, before any grid limit moves it
    exponents: dict[str, float] | None = None
    if weight_at is not None and expected_hits(components) >= _GRADED_MIN_HITS:
        eps = weight_at(math.inf)
        exponents = {d: saddle_estimate(sized, d, tail, eps) for d in directions_for(components)}

    def tilt_options() -> dict:
        """The tilting arguments of a refinement's evaluation: none until the probe
        decided to tilt, then the tilt at the current bracket within the budget."""
        if not tilted:
            return {}
        tilt_at, floor, _ = tilt(low, high)
        return {"tilt_at": tilt_at, "floor": floor, "tilt_budget": budget}

    def upper_only(evaluation: Evaluation, upper_step: float, options: Mapping) -> Evaluation:
        """``evaluation`` with its upper profiles from the single grid at ``upper_step``
        (``options``: the exponents and tilting arguments of :func:`evaluate`)."""
        finer = evaluate(components, upper_step, tail, kinds=("upper",), **options)
        by_direction = dict(zip(finer.directions, finer.upper))
        return Evaluation(
            evaluation.step, tuple(by_direction[d] for d in evaluation.directions), evaluation.lower, evaluation.directions
        )

    def with_upper_on(evaluation: Evaluation, upper_step: float, options: Mapping) -> Evaluation | None:
        """``evaluation`` with the upper chain also composed on one grid at ``upper_step``
        (:func:`upper_only`), each direction keeping its tighter profile (:func:`_tighter`);
        None where that grid passes a named limit."""
        try:
            finer = upper_only(evaluation, upper_step, options)
        except LimitError:
            return None
        return _tighter(evaluation, finer, delta)

    def upper_error_estimate(evaluation: Evaluation, upper_step: float, options: Mapping) -> tuple[float, Evaluation | None]:
        """(estimate, the coarser evaluation it came from, or None): how far the upper end
        of ``evaluation`` (single grid at ``upper_step``, made with ``options``) lies above
        what that chain converges to, estimated from the same composition (same tilt and
        exponents) at twice the step: the chain's width shrinks like h^2
        (:func:`initial_step`), so (U(2h) - U(h)) / 3 (Richardson), the largest over the
        directions that can set the
        maximum (upper end above the bracket's lower end: a dominated direction's tilted
        profile reports the floor, or certifies nothing) and whose coarser end is finite.
        Only an estimate, for choosing which chain to refine; inf when the coarser grid
        passes a named limit or no direction qualifies."""
        try:
            coarser = upper_only(evaluation, 2.0 * upper_step, options)
        except LimitError:
            return math.inf, None
        bracket_low = bounds_of(evaluation)[0]
        estimates = []
        for index, direction in enumerate(evaluation.directions):
            lower = evaluation.lower[index : index + 1]
            fine_end = bounds_of(Evaluation(evaluation.step, (evaluation.upper[index],), lower, (direction,)))[1]
            coarse_end = bounds_of(Evaluation(evaluation.step, (coarser.upper[index],), lower, (direction,)))[1]
            if fine_end > bracket_low and math.isfinite(coarse_end):
                estimates.append(max(coarse_end - fine_end, 0.0) / 3.0)
        return max(estimates, default=math.inf), coarser

    def lower_chain_staged(reference: Evaluation, lower_step: float, **options) -> Evaluation:
        """The staged lower chain at ``lower_step`` (``options``: :func:`evaluate`'s), with
        no lower chain for a direction that ``reference``'s certified upper bounds show
        dominated."""
        return evaluate(
            components,
            lower_step,
            tail,
            kinds=("lower",),
            staged=True,
            delta=delta,
            upper_bounds=_ceilings(reference, delta),
            **options,
        )

    def learn(evaluation: Evaluation, high: float) -> None:
        """Take the saddle exponents from the evaluation just made."""
        nonlocal exponents
        if exponents is not None:
            eps = weight_at(high)
            found = evaluation.saddles(eps)
            for direction, value in found.items():
                if math.isinf(value):  # beyond the exponents composed: the normal estimate
                    found[direction] = saddle_estimate(sized, direction, tail, eps)
            exponents = {**exponents, **found}

    if not fixed:
        # a step finer than one direct grid can hold would force staging from the start,
        # whose coarse final grid is looser than the finest direct grid: start there
        step = max(step, _direct_grid(components, 1.0, tail, moments_from) / _DIRECT_LIMIT)
    staged = not fixed and math.isfinite(_narrowest_bulk(components)) and _needs_stages(components, step, tail, moments_from)
    upper_step = None
    if staged:
        # split chains: the connect-the-dots upper needs no staging (it is exact at grid
        # points whatever the step), so it is composed on one grid at the error model's
        # step whenever that grid fits; only the lower chain is staged
        if _direct_grid(components, 0.5 * step, tail, moments_from) <= _DIRECT_LIMIT:
            upper_step = 0.5 * step
        step = _staged_step(components, step, tail, moments_from)
    # the probe's one-step measures, kept for a tilted probe at the same step (the tilt
    # applies to the composition only; staged chunks are built untilted either way)
    # (not for many components, whose measures take hundreds of MB)
    probe_measures: dict | None = {} if len(components) < _MANY_COMPONENTS else None
    # a staged probe with a single-grid upper chain starts on that grid with both chains
    # direct (cheap, and certified): when that bracket already shows the composition must
    # be tilted, the untilted staged chunks are skipped and the tilted probe builds its
    # chunks tilted and long at once (the second round below).  Untilted, a chunk's
    # round-off hides the rare events a small delta reads, so those chunks served only as
    # the tilt's floor, which the direct lower chain gives for a seventh of the time
    # (sigma = 0.3, q = 1e-6, T = 1e3 at delta = 1e-15: 9.75 from 0.96 s of staged chunks,
    # 7.72 from 0.14 s direct; the call 2.28 s -> 1.94 s, at 1e-10 1.58 s -> 1.07 s)
    with_atoms = [
        bool(component.privacy_loss_distribution(direction).atoms)
        for component in components
        for direction in directions_for(components)
    ]
    direct_upper_tried = False  # a single-grid upper chain where both chains were staged (below)
    early_tilt = False
    # both chains direct where the spread model staged them, tilting at once (evaluation,
    # step), and the direct probe that decided it (its upper chain serves the probe below
    # where it does not tilt)
    early_direct: tuple[Evaluation, float] | None = None
    direct_probe: _DirectProbe | None = None
    # the staged lower chain's own lower end (after an early direct probe, whose direct
    # lower chain the bracket can keep above it): the chunk rounds gauge their gain on it
    chain_low: float | None = None
    if staged and upper_step is None and tilt is not None and not fixed and not any(with_atoms):
        direct_probe = _early_direct(
            components, step, model_step, tail, exponents, probe_measures, delta, tilt, bounds_of, relative_accuracy
        )
        if direct_probe is not None and direct_probe.evaluation is not None:
            early_direct = (direct_probe.evaluation, direct_probe.step)
    if early_direct is not None:
        evaluation, upper_step = early_direct
        early_tilt = direct_upper_tried = True
    elif staged and upper_step is not None and tilt is not None and not fixed:
        direct = evaluate(components, upper_step, tail, exponents=exponents, cache=probe_measures, delta=delta)
        direct_low, direct_high = bounds_of(direct)
        if math.isfinite(direct_low) and direct_low > 0.0:
            _, direct_floor, direct_level = tilt(direct_low, direct_high)
            early_tilt = roundoff_in_delta(direct, direct_floor) > _ROUNDOFF_SHARE * relative_accuracy * direct_level
        if early_tilt:
            evaluation = direct
        else:  # the direct upper chain is the probe's; its lower chain is staged as before
            staged_lower = lower_chain_staged(direct, step, exponents=exponents, cache=probe_measures)
            # (labelled with the staged step, as _evaluate_chains labels a split evaluation:
            # the step a result reports, and that verify's prefix passes use)
            evaluation = dataclasses.replace(_tighter(direct, _with_lower(direct, staged_lower), delta), step=step)
    elif staged and upper_step is None and not fixed and not any(with_atoms):
        # both chains staged on the spread model's price, which is far too wide for long
        # runs of rare heavy hits (below, at the first round): the staged lower chain
        # measures the window, and where one grid at half the error model's step holds it
        # the upper chain is composed there, as when the model prices it right, instead
        # of in staged chunks (sigma = 0.6, q = 1e-5, T = 1e7 at delta = 1e-10: the
        # staged upper chain's chunks took 9 of the call's 11 s).  Where it does not
        # hold it, the upper chain goes on the finest single grid that does (2^20
        # points), even one coarser than the staged step: connect the dots is certified
        # at any step, the rounds below refine that chain, and the staged upper chain it
        # replaces took 6-13 s that the first round then superseded with a single grid
        # of 0.1-0.2 s (sigma = 0.3, q = 1e-6, T = 1e7 at delta = 1e-5, 1e-10 and 1e-15;
        # q = 1e-4 at 1e-5: 12.2 s of 14.3).  Where the staged upper chain was cheap,
        # the single grid costs more and is tighter (eps near 157,000: 0.06 s -> 0.28 s,
        # 4.5e-4 -> 3.5e-4 wide)
        staged_lower = evaluate(components, step, tail, kinds=("lower",), staged=True, exponents=exponents, cache=probe_measures)
        span = max(profile.grid_size for profile in staged_lower.lower) * step
        upper = None
        direct_upper_tried = True
        direct_step = max(min(0.5 * model_step, step), span / _DIRECT_LIMIT)
        if direct_probe is not None:
            # the direct probe composed the upper chain already, on the finest grid within
            # the limit that holds the window that chain itself measured (the staged lower
            # chain's stands in for it here, and differs by about a percent)
            upper, upper_step = direct_probe.upper, direct_probe.step
        else:
            try:
                upper = evaluate(components, direct_step, tail, kinds=("upper",), exponents=exponents, cache=probe_measures)
                upper_step = direct_step
            except LimitError:
                upper = None
        if upper is None:
            direct_upper_tried = False
            upper = evaluate(components, step, tail, kinds=("upper",), staged=True, exponents=exponents, cache=probe_measures)
        evaluation = Evaluation(step, upper.upper, staged_lower.lower, upper.directions)
    else:
        coarse = None
        if coarse_upper is not None and delta is not None and not staged and not fixed:
            try:
                coarse = _coarse_uppers(components, coarse_upper[0], coarse_upper[1], tail, exponents)
            except LimitError:
                coarse = None
        evaluation = _evaluate_chains(
            components, step, tail, staged, upper_step, settled=coarse, exponents=exponents, cache=probe_measures, delta=delta
        )
        if coarse is not None:
            # a direction kept at its coarse upper bound must lie at or below another
            # direction's lower bound; any that does not is composed at the step
            dominated = evaluation.dominated(delta)
            kept = dominated.directions if dominated is not None else ()
            undecided = [direction for direction in coarse.directions if direction not in kept]
            if undecided:
                evaluation = _evaluate_chains(
                    components,
                    step,
                    tail,
                    staged,
                    upper_step,
                    settled=_without(evaluation, undecided),
                    exponents=exponents,
                    cache=probe_measures,
                    delta=delta,
                )
    # the tilted probe's chunks: tilted and long where a direct probe tilts at once; after
    # an early direct probe tilted only (the long chunks follow as the second round)
    probe_chunks = (ChunkOptions(tilt=True) if early_direct is not None else _EARLY_CHUNKS) if early_tilt else ChunkOptions()
    low, high = bounds_of(evaluation)
    probe_exponents = exponents
    learn(evaluation, high)
    tilted = False
    budget = None
    upper_options: dict = {"exponents": exponents}  # how the upper chain was last composed
    gave_up = False  # the probe's tilted evaluation passed a named limit
    if tilt is not None and math.isfinite(low):
        tilt_at, floor, level = tilt(low, high)
        if roundoff_in_delta(evaluation, floor) > _ROUNDOFF_SHARE * relative_accuracy * level:
            tilted = True
            budget = _TILT_BUDGET * relative_accuracy * level
            # a direction the untilted probe already shows dominated keeps its bounds
            settled = evaluation.dominated(delta) if delta is not None and not staged else None
            # a caller's fixed grid gets no refinement, but its tilt moves once to the
            # middle of the bracket the first tilted evaluation found, as a refinement's
            # next round does: the untilted probe's bracket can be far wider (sigma = 1,
            # q = 1e-6, T = 1e3 at delta = 1e-15, step 4e-7: tilted at the middle of
            # [0.00122, 0.0118], the bracket was 2.3e-2 wide)
            for again in range(2 if fixed else 1):
                if again:
                    if not math.isfinite(high):
                        break
                    tilt_at, floor, _ = tilt(low, high)
                try:
                    tilted_evaluation = _evaluate_chains(
                        components,
                        step,
                        tail,
                        staged,
                        upper_step,
                        settled=settled,
                        tilt_at=tilt_at,
                        floor=floor,
                        tilt_budget=budget,
                        exponents=probe_exponents,
                        cache=probe_measures,
                        chunks=probe_chunks,
                        delta=delta,
                        ceilings_from=evaluation,
                    )
                except LimitError:
                    # a tilted window past a named limit (sigma = 1.18, q = 1.1e-9, T = 22
                    # at delta = 1.8e-267 asked for 2.6e8 points, and the call, answered
                    # [0, 10.61] before, raised): the certified bracket reached stands, as
                    # where a finer grid passes a limit in the rounds below, which would
                    # only meet the untilted round-off again
                    tilted = tilted and again > 0
                    gave_up = True
                    break
                upper_options = {"tilt_at": tilt_at, "floor": floor, "tilt_budget": budget, "exponents": probe_exponents}
                if early_direct is not None:
                    chain_low = bounds_of(tilted_evaluation)[0]
                evaluation = _tighter(evaluation, tilted_evaluation, delta)
                tilted_low, tilted_high = bounds_of(evaluation)
                low, high = max(low, tilted_low), min(high, tilted_high)
                learn(evaluation, high)
    del probe_measures  # not kept past the probe
    # (step, upper end) of each untilted direct evaluation: when the refinement moves to
    # staging, the last two estimate how far the direct grid's upper chain still is from
    # its limit, so that the staged rounds refine the chain that sets the width
    direct_uppers: list[tuple[float, float]] = []
    if not staged and not tilted:
        direct_uppers.append((step, high))
    upper_estimate: float | None = None
    refinements = 0
    history: list[tuple[float, float]] = []  # (step, width) of the evaluations refined from
    # a staged chain that still gains from refining; finer chunk grids pay only where a
    # law piles up against an atom (.components.discretise_all): for subsampled Gaussians
    # a 16x finer chunk grid moved S1's lower bound 1.610786 -> 1.609567, and at q = 1e-6,
    # T = 1e5, delta = 1e-15 closed a tenth of the width
    upper_open = True
    upper_history: list[tuple[float, float]] = []  # (upper_step, width) of the staged upper rounds
    lower_open = any(with_atoms)
    rare_hits = not any(with_atoms) and expected_hits(components) < _GRADED_MIN_HITS
    # how staged chunks are built: finer grids (fine_scale, relative to
    # .components._FINE_RESOLUTION), and two-scale chunks (laws without atoms) built a
    # second time, tilted and longer
    chunks = probe_chunks if tilted else ChunkOptions()
    chunks_revised = all(with_atoms) or (early_tilt and tilted and early_direct is None)
    smallest_tail = _TAIL_FLOOR * tail
    last_direct: tuple[float, int] | None = None  # (step, points) of the direct grid staged from
    last_resort_taken = False  # finer chunk grids for a law without atoms, once (below)
    upper_at_limit = 0  # the grid of a single-grid upper chain the loop left at _UPPER_LIMIT
    past_limit_taken = False  # that chain composed past the limit, once (upper_past_limit)
    # the finest step that chain was composed at past its limit or aimed again after the
    # loop: neither composes it again on a grid no finer, tilted at much the same bracket,
    # which gives the same bound (10M points twice: 1.3 s more at sigma = 0.6, q = 1e-6,
    # T = 1e7 at delta = 1e-10 asked for 3e-4)
    finest_upper: float | None = None

    def finer_than_before(candidate: float) -> bool:
        """Whether a single-grid upper chain at step ``candidate`` would be finer than any
        composed past the limit or aimed again so far."""
        return finest_upper is None or candidate < finest_upper * (1.0 - 1e-9)
    # the staged lower chain's own error left after its last round on finer chunk grids,
    # estimated at first order from that round's gain (None until such a round)
    lower_estimate: float | None = None

    def upper_past_limit(evaluation: Evaluation) -> Evaluation | None:
        """``evaluation`` with its single-grid upper chain, left at ``_UPPER_LIMIT``,
        composed once more on up to ``_UPPER_CHAIN_LIMIT`` points at the step model's step;
        None where that grid passes a named limit (the memory budget)."""
        nonlocal finest_upper
        factor = min(max(_step_factor(relative_accuracy * high, high - low, upper_step, upper_history), 0.125), 0.5)
        options = {"exponents": exponents, **tilt_options()}
        candidate = upper_step * max(factor, upper_at_limit / _UPPER_CHAIN_LIMIT)
        if not finer_than_before(candidate):
            return None
        finer = with_upper_on(evaluation, candidate, options)
        if finer is not None:
            finest_upper = candidate
        return finer

    while refinements < (0 if fixed or gave_up else max_refinements):
        width = high - low
        if not math.isfinite(high) or high < negligible or width <= relative_accuracy * high:
            break
        if delta is not None and tail > smallest_tail:
            # the mass left outside the windows (about the tail, 1e-4 delta) moves epsilon
            # by tail / |d delta / d eps|, which is most of the width asked for where delta
            # is large against eps |d delta / d eps| (small eps, large delta): cut it
            effect = tail_in_epsilon(evaluation, delta)
            goal = relative_accuracy * high
            if effect > _TAIL_SHARE * goal:
                tail = max(tail * max(_TAIL_AIM * goal / effect, 1e-4), smallest_tail)
        if staged and upper_step is None and not direct_upper_tried and not any(with_atoms):
            # both chains staged (the probe's single upper grid passed a named limit): the
            # spread model (20 standard deviations of the composed law) priced a single
            # grid at the error model's step over the limit, but a law of rare heavy hits
            # has a far narrower window than its variance says, and the staged evaluation
            # just made measured it.  Connect the dots needs no staging,
            # so the upper chain is composed once on one grid, at the error model's step
            # where the measured window fits and at the finest that does otherwise, and
            # refined there from now on (sigma = 0.6, q = 1e-4, T = 1e7 at delta = 1e-12:
            # staged [9.40, 13.81] after 27 s; on one grid of 124k points, 0.1 s, the
            # upper bound is 9.59).  Not for laws with atoms, whose staged upper chain has
            # a grid point on each atom and is tight (Laplace b = 0.5, q = 1e-3, T = 1e7
            # took 3.2 s against 0.9 s, its bracket no narrower)
            direct_upper_tried = True
            span = max(profile.grid_size for profile in evaluation.upper) * step
            direct_step = min(max(0.5 * model_step, span / _DIRECT_LIMIT), step)
            options = {"exponents": exponents, **tilt_options()}
            finer = with_upper_on(evaluation, direct_step, options)
            if finer is not None:
                evaluation = finer
                upper_step, upper_options = direct_step, options
                high = min(high, bounds_of(evaluation)[1])
                refinements += 1
                continue
        if staged:
            # a finer final grid only adds chunks; the single-grid upper chain is refined
            # first (cheaply) ...
            # (sized by the windows it had: a tilted window is narrower than the untilted
            # spread _direct_grid prices; q = 1e-4, sigma = 1, T = 1e7 at delta = 1e-10 had
            # 288k points where 20 deviations price over 2^19, and stopped 1.6e-3 wide)
            # (by the step model on its own history, within 8x and the grid limit: halving
            # took 5 rounds from the probe at sigma = 1, q = 1e-6, T = 1e5, delta = 1e-15)
            upper_grid = max(profile.grid_size for profile in evaluation.upper)
            # (at a tilted evaluation the untilted chunks' round-off often sets the width:
            # refining the upper chain first cost sigma = 0.3, q = 1e-6, T = 1e5 at
            # delta = 1e-15 a 6M-point grid that moved it 17.29491 -> 17.2949, 1.9 s of
            # 5.4; so while the chunks' second round is still to come, the upper chain goes
            # first only when its own error, estimated from the composition at twice its
            # step, is at least half the width)
            upper_first = True
            if upper_estimate is not None and lower_open:
                # just moved from direct grids, whose history prices the upper chain's
                # error (the direct grid's: kept after the upper chain is refined, since a
                # finer upper chain only errs less): a subsampled Laplace (b = 1,
                # q = 1e-3, T = 1e5) at delta = 0.1
                # refined it first to 2M points (0.26 s of 0.65) for 0.0386193 ->
                # 0.0386196, where the staged lower chain was 1.03e-3 short
                upper_first = upper_estimate >= 0.5 * width
            elif tilted and not chunks_revised and upper_open and upper_step is not None:
                estimate, coarser = upper_error_estimate(evaluation, upper_step, upper_options)
                upper_first = estimate >= 0.5 * width
                if coarser is not None and delta is not None:
                    # certified on its own grid, so kept where it is the tighter (with
                    # the staged step at 2^17 points, sigma = 0.3, q = 1e-6, T = 1e3 at
                    # delta = 1e-10 had 8.470947 at 2h against 8.471095 at h)
                    evaluation = _tighter(evaluation, coarser, delta)
                    high = min(high, bounds_of(evaluation)[1])
                    if high - low <= relative_accuracy * high:
                        continue  # met: the loop's test stops
            if upper_open and upper_first and upper_step is not None and _UPPER_ROOM * upper_grid > _UPPER_LIMIT:
                upper_at_limit = upper_grid  # kept for a last resort past the limit (after the loop)
                if (
                    not past_limit_taken
                    and lower_estimate is not None
                    and lower_estimate < 0.5 * width <= 0.5 * _PAST_LIMIT_SHORTFALL * relative_accuracy * high
                ):
                    # ... taken now where the staged lower chain's last round shows that
                    # chain is not what sets the width (its error left, at first order,
                    # under half of it): the loop's next round would aim the chunk grids
                    # at the whole width, for a fraction of it (sigma = 0.6, q = 1e-6,
                    # T = 1e7 at delta = 1e-10: 4x finer chunk grids moved the lower end
                    # 0.177840 -> 0.177963, then 2.5x finer 1.5 s for 0.177966, before
                    # the upper chain's 10M points met the width from 0.178188 -> 0.178036)
                    past_limit_taken = True
                    finer = upper_past_limit(evaluation)
                    if finer is not None:
                        evaluation = finer
                        high = min(high, bounds_of(evaluation)[1])
                        refinements += 1
                        continue
            if upper_open and upper_first and upper_step is not None and _UPPER_ROOM * upper_grid <= _UPPER_LIMIT:
                factor = min(max(_step_factor(relative_accuracy * high, width, upper_step, upper_history), 0.125), 0.5)
                upper_history.append((upper_step, width))
                upper_step *= max(factor, upper_grid / _UPPER_LIMIT)
                upper_options = {"exponents": exponents, **tilt_options()}
                try:
                    finer = upper_only(evaluation, upper_step, upper_options)
                except LimitError:
                    upper_open = False
                    continue
                evaluation = _tighter(evaluation, finer, delta)
                new_high = bounds_of(evaluation)[1]
                refinements += 1
                gain = high - new_high
                high = min(high, new_high)
                if gain < 0.25 * (high - low):
                    upper_open = False  # the upper chain has converged
                continue
            # ... then, once, the two-scale chunks (laws without atoms) built again: the
            # probe's chunks are cached and usually suffice, but at a tilted evaluation their
            # sums are now formed tilted, since a chunk's round-off (1e-16 of its peak) hides
            # the rare events a tiny delta reads (sigma = 0.3, q = 1e-6, T = 1e3 at
            # delta = 1e-10: 1.2 % wide -> 2e-5) ...
            # ... and each chunk pays its rounding onto the grid once, so 16x longer chunks
            # (length_scale 4) lose less where that sets the width (sigma = 1, q = 1e-6,
            # T = 1e5 at delta = 1e-15: 0.0029468 -> 0.0029499 against the upper 0.0029521)
            second_round = not chunks_revised
            last_resort = False
            if second_round:
                chunks_revised = True
                scale = chunks.fine_scale * (1.0 if tilted else _UNTILTED_SECOND_SCALE)
                chunks = dataclasses.replace(chunks, tilt=tilted, length_scale=_LONGER_CHUNKS, fine_scale=scale)
            # ... then the staged chain(s) on finer chunk grids: the chunks' lower measures
            # lose to first order in the chunk grid where a law piles up at an end of its
            # support (.components.discretise_all), so the width is aimed at half the goal
            # under that order
            elif lower_open:
                factor = min(max(width / (0.5 * relative_accuracy * high), 2.0), 16.0)
                chunks = dataclasses.replace(chunks, fine_scale=chunks.fine_scale * factor)
            elif not last_resort_taken:
                # a law without atoms: finer chunk grids seldom pay (S1's lower bound did
                # not move), but where nothing else is left they are the last lever before
                # a shortfall: sigma = 1, q = 1e-5, T = 1e5 at delta = 1e-15 stopped
                # 1.2e-3 wide with the upper chain converged (0.0368505 staged, against
                # 0.0368703 on 4x finer chunk grids in 0.4 s)
                last_resort_taken = last_resort = True
                chunks = dataclasses.replace(chunks, fine_scale=chunks.fine_scale * _LAST_RESORT_SCALE)
            else:
                break
            try:
                if upper_step is None:  # both chains are staged
                    finer = _evaluate_chains(
                        components, step, tail, True, None, exponents=exponents, chunks=chunks, delta=delta,
                        ceilings_from=evaluation, **tilt_options(),
                    )
                else:
                    settled = evaluation.dominated(delta) if delta is not None else None
                    lower_only = lower_chain_staged(
                        evaluation, step, settled=settled, exponents=exponents, chunks=chunks, **tilt_options()
                    )
                    finer = _with_lower(evaluation, lower_only)
            except LimitError:
                break  # finer chunk grids would pass a named limit: keep the bracket reached
            new_low, new_high = bounds_of(finer)
            old_low, old_high = bounds_of(evaluation)
            if chain_low is not None:
                old_low, chain_low = chain_low, new_low
            refinements += 1
            # (first order in the chunk grid: what the chain gained over the factor
            # its grids shrank by less one, erring large where it converges faster)
            shrink = None if second_round else (_LAST_RESORT_SCALE if last_resort else factor)
            lower_estimate = None if shrink is None else max(new_low - old_low, 0.0) / (shrink - 1.0)
            # the staged chain's own progress (the bracket may still hold a better bound
            # from a direct grid that a few more rounds overtake)
            gain = max(new_low - old_low, 0.0) + max(old_high - new_high, 0.0)
            low, high = max(low, new_low), min(high, new_high)
            evaluation = _tighter(evaluation, finer, delta)
            if gain < 0.25 * width and not second_round:
                lower_open = False  # finer chunks no longer pay: the final grid sets the width
            elif last_resort:
                # the last resort paid (a quarter of the width or more): the staged lower
                # chain converges at first order in its chunk grids here, and finer ones
                # are aimed at the width as for a law with atoms, while they pay
                # (sigma = 0.3, q = 1e-5, T = 1e7 at delta = 1e-10 stopped 2.2e-3 wide,
                # the last resort having moved its lower end 50.037 -> 50.100 of 50.213)
                lower_open = True
            continue
        factor = _step_factor(relative_accuracy * high, width, step, history)
        stalled = bool(history) and width > 0.5 * history[-1][1]  # the last round gained little
        first = first_refinement is not None and not history
        history.append((step, width))
        new_step = step * min(max(factor, 1.0 / 8.0), 1.0 / 1.5)
        suggested = first_refinement(tail, new_step, step) if first else None
        if suggested is not None and suggested < step:
            new_step = max(suggested, step / 8.0)
        # a lower chain on a grid coarser than about a quarter of a one-step law's bulk
        # stalls (its quantiser loses a share of a cell per step) and then converges
        # within a few halvings: the order fitted on a stalled round (0.5) jumps 8x past
        # where the width is met (sigma = 1, q = 1e-3, T = 1e3 at delta = 1e-15: 4.5e-4 ->
        # 5.7e-5, 175k points, where 2.3e-4 and 43k points meet it), so a stalled round
        # stops first at that resolution
        resolved = _narrowest_bulk(components) / _RESOLVED_CELLS
        if stalled and new_step < resolved < step:
            new_step = resolved
        grid = evaluation.grid_size * step / new_step
        direct_limit = _DIRECT_LIMIT
        if not staged and rare_hits and 1.5 * evaluation.grid_size <= _UPPER_LIMIT:
            # with few sampled steps, eps is set by single hits, which chunks of the narrow
            # unsampled bulk do not resolve, and laws without atoms get one more round of
            # chunks and no finer chunk grids (lower_open): a direct grid goes on to the
            # upper chain's limit first.  sigma = 1, q = 1e-6, T = 1e3 (1e-3 hits) at
            # delta = 1e-15 had 0.0013939 on 760k points, 0.0013942 (the width met) on 2M,
            # and staged 0.0013796.  With many hits the staged chain is the cheaper one:
            # sigma = 1, q = 1e-3, T = 1e5 at delta = 0.1 met the width staged in 0.11 s,
            # against 0.24 s on 2M points
            direct_limit = _UPPER_LIMIT
            new_step = max(new_step, step * evaluation.grid_size / _UPPER_LIMIT)
            grid = evaluation.grid_size * step / new_step
        if grid > direct_limit:
            if not math.isfinite(_narrowest_bulk(components)):
                break  # few steps of a law narrower than the grid: report the accuracy reached
            staged, new_step = True, _staged_step(components, step, tail, moments_from)
            last_direct = (step, evaluation.grid_size)
        reuse_upper = False
        if staged and upper_step is None and (last_direct is not None or _direct_grid(components, step, tail, moments_from) <= _DIRECT_LIMIT):
            # the finest single grid reached so far serves the upper chain, and the last
            # evaluation was on it: only the lower chain is composed anew.  That holds
            # whenever the refinement has just moved from direct grids to staging, even
            # where the spread model prices the grid above the limit (it took 720k points,
            # against a 20-deviation estimate over 2^20): staged, the upper chain only
            # repeated a looser bound each round (a subsampled Laplace, b = 1, q = 1e-3,
            # T = 1e5 at delta = 0.1: 0.0386263 staged against 0.0386193 direct, half of
            # each staged round)
            upper_step, reuse_upper = step, True
            if len(direct_uppers) >= 2 and direct_uppers[-1][0] == step:
                (coarse_step, coarse_end), (fine_step, fine_end) = direct_uppers[-2:]
                if coarse_step > fine_step and math.isfinite(coarse_end):
                    # first order (the chain shows h^2): an estimate erring large
                    upper_estimate = max(coarse_end - fine_end, 0.0) / (coarse_step / fine_step - 1.0)
        step = new_step
        settled = evaluation.dominated(delta) if delta is not None and not staged else None
        try:
            if reuse_upper:
                lower_only = lower_chain_staged(evaluation, step, exponents=exponents, **tilt_options())
                finer = dataclasses.replace(_with_lower(evaluation, lower_only), step=step)
            else:
                finer = _evaluate_chains(
                    components, step, tail, staged, upper_step, settled=settled, exponents=exponents, delta=delta,
                    ceilings_from=evaluation, **tilt_options(),
                )
        except LimitError:
            break  # a finer grid would pass a named limit: keep the certified bracket reached
        if not staged and not tilted:
            direct_uppers.append((step, bounds_of(finer)[1]))
        evaluation = _tighter(evaluation, finer, delta)
        new_low, new_high = bounds_of(evaluation)
        low, high = max(low, new_low), min(high, new_high)
        learn(evaluation, high)
        refinements += 1
    if direct_upper_tried and tilted and upper_step is not None and math.isfinite(high) and high - low > relative_accuracy * high:
        # a single-grid upper chain taken where both chains were staged (above) was tilted
        # at the middle of the staged bracket, which can lie far above eps (sigma = 0.3,
        # q = 1e-6, T = 1e7 at delta = 1e-15: at 44.5 for [24.7, 64.3], its upper end
        # 25.90 with eps near 24.87), and its window was set from the staged lower end:
        # short of the width, it is composed once more, tilted at the middle of the
        # bracket reached and kept from its lower end, at half its step where that grid
        # stays within the budget (there 25.90 -> 24.886, the width met; sigma = 0.6,
        # q = 1e-5 at delta = 1e-10, whose upper chain stopped at the grid limit,
        # 1.5241 -> 1.5218); never on a grid no finer than one the chain went past its
        # limit on in the loop (half the step it was left at is about that grid again)
        options = {"exponents": exponents, **tilt_options()}
        for candidate in (0.5 * upper_step, upper_step):
            if not finer_than_before(candidate):
                break
            finer = with_upper_on(evaluation, candidate, options)
            if finer is not None:
                evaluation = finer
                high = min(high, bounds_of(evaluation)[1])
                refinements += 1
                finest_upper = candidate
                break
    if (
        upper_at_limit
        and upper_open
        and not past_limit_taken
        and upper_step is not None
        and relative_accuracy * high < high - low <= _PAST_LIMIT_SHORTFALL * relative_accuracy * high
    ):
        # the loop's levers spent and the width still short, with the single-grid upper
        # chain left at _UPPER_LIMIT (its tilted window can pass it: sigma = 0.6, q = 1e-6,
        # T = 1e7 at delta = 1e-10 reached 5.0M points and stopped 1.24e-3 wide): the chain
        # is composed once more, on up to _UPPER_CHAIN_LIMIT points at the step model's
        # step (there 10M, the width met); a grid past the memory budget leaves the
        # bracket as it is (:func:`upper_past_limit`)
        finer = upper_past_limit(evaluation)
        if finer is not None:
            evaluation = finer
            high = min(high, bounds_of(evaluation)[1])
            refinements += 1
    if last_direct is not None and not (high - low <= relative_accuracy * high) and math.isfinite(high):
        # staging from a direct grid ended short of the width: where the direct grid
        # already resolved every one-step bulk, the chunks (a bulk width or so apart) only
        # coarsen it.  The LMO search's mechanism (Laplace with its scale uniform on
        # [0.89989, 0.90079], q = 0.01, T = 1e3) piles up near +-1/b and its lower chain
        # converges at first order: staged at 4.7e-3 after 1.1e-5 direct, it stopped at
        # [0.99608, 0.99945], 3.4e-3 wide.  One direct grid at the upper chain's limit
        # (only then: staging first is the cheaper route wherever it meets the width,
        # sigma = 1, q = 1e-3, T = 1e5 at delta = 0.1 in 0.1 s against 0.18 s direct)
        last_step, last_grid = last_direct
        direct_step = last_step * last_grid / _UPPER_LIMIT
        if direct_step < last_step <= _narrowest_bulk(components) / _DIRECT_RESOLUTION:
            try:
                finer = evaluate(components, direct_step, tail, exponents=exponents, delta=delta, **tilt_options())
            except LimitError:
                finer = None
            if finer is not None:
                evaluation = _tighter(evaluation, finer, delta)
                new_low, new_high = bounds_of(evaluation)
                low, high = max(low, new_low), min(high, new_high)
                refinements += 1
    if low > high:
        # two certified bounds cannot cross: this is a defect, reported rather than hidden
        warn_caller(
            f"the prv engine's certified lower bound {low!r} exceeds its upper bound {high!r}; "
            "the lower bound is replaced by the upper bound (please report this description)",
            DpforgeAccuracyWarning,
        )
        low = high
    return Refined(evaluation, refinements, low, high, tilted, tail)


@dataclass(frozen=True)
class _DirectProbe:
    """What :func:`_early_direct` composed: the upper chain on one direct grid at ``step``
    and, where the probe tilts at once, the evaluation of both chains there."""

    step: float
    upper: Evaluation
    evaluation: Evaluation | None


def _early_direct(
    components: Sequence[Component],
    step: float,
    model_step: float,
    tail: float,
    exponents: Mapping[str, float] | None,
    cache: dict | None,
    delta: float | None,
    tilt: Callable[[float, float], tuple[float, float, float]],
    bounds_of: Callable[[Evaluation], tuple[float, float]],
    relative_accuracy: float,
) -> _DirectProbe | None:
    """The direct probe of a law whose two chains the spread model staged (a law without
    atoms): the upper chain on one direct grid that holds the window, and, where that
    chain shows the composition must be tilted whatever its eps, the evaluation of both
    chains there (``evaluation``; None otherwise: the probe goes on as before, the staged
    lower chain measuring the window untilted, :func:`refine`, which takes this upper
    chain as its single-grid one).  None where no direct grid finer than
    ``step`` holds the window or one passes a named limit.

    The window is measured by the upper chain alone on one grid at the staged ``step``
    (its span in nats hardly depends on the step); the chains are then composed direct
    at half the error model's step, or the finest step whose grid holds that window, as
    :func:`refine`'s probe does where the model prices one grid right.  Certified at any
    step: a direct lower chain on a grid coarser than a one-step bulk is only looser,
    and here serves as the tilt's floor, which the untilted staged chunks gave at three
    to ten times the cost before tilted chunks replaced them (sigma = 0.6, q = 1e-5,
    T = 1e7 at delta = 1e-10: 0.53 s of untilted chunks for a lower end of 1.372 of
    1.521).  The round-off share is read at the upper chain's own bound, the least it
    can be at any floor up to eps (:func:`roundoff_in_delta` falls with its argument), so
    a call is tilted here only where the untilted probe would tilt it too, and the lower
    chain is composed only then.  The tilted probe then builds its chunks tilted at their
    first length, and the longer ones come as the second round (:func:`refine`): built
    long at once, as where a single grid probes, they stopped short for many hits
    (sigma = 0.45, q = 1e-4, T = 1e7 at delta = 1e-5: 22.070 against 22.093 untilted, and
    1.9 s against 0.7 s to the width)."""
    try:
        window = evaluate(components, step, tail, kinds=("upper",), exponents=exponents, cache=cache)
    except LimitError:
        return None
    span = max(profile.grid_size for profile in window.upper) * step
    direct_step = max(min(0.5 * model_step, step), span / _DIRECT_LIMIT)
    if direct_step >= step:
        return None
    try:
        upper = evaluate(components, direct_step, tail, kinds=("upper",), exponents=exponents, cache=cache)
    except LimitError:
        return None
    probe = _DirectProbe(direct_step, upper, None)
    # tilted however far eps lies below the upper bound: for an epsilon query the
    # round-off share read at the upper chain's bound (the least it can be at any floor up
    # to eps) already passes the bar; a delta query's floor is its eps, known
    _, high = bounds_of(Evaluation(direct_step, upper.upper, tuple(no_lower_bound() for _ in upper.upper), upper.directions))
    _, floor, level = tilt(0.0, high)
    if not math.isfinite(high) or roundoff_in_delta(upper, high if delta is not None else floor) <= (
        _ROUNDOFF_SHARE * relative_accuracy * level
    ):
        return probe
    try:
        lower = evaluate(
            components,
            direct_step,
            tail,
            kinds=("lower",),
            exponents=exponents,
            cache=cache,
            delta=delta,
            upper_bounds=_ceilings(upper, delta),
        )
    except LimitError:
        return probe
    direct = _with_lower(upper, lower)
    low, _ = bounds_of(direct)
    if not (math.isfinite(low) and low > 0.0):
        return probe
    return dataclasses.replace(probe, evaluation=direct)


def _step_factor(goal: float, width: float, step: float, history: Sequence[tuple[float, float]]) -> float:
    """How much to shrink the step so that the width meets ``goal``.

    From the probe, the O(T h^2) model aimed at ``_AIM`` of the goal.  After that, the
    width's own order p, log(w_prev/w)/log(h_prev/h), fitted on the last two evaluations
    (within [0.5, 3]; a lower chain limited by rounding at a steep edge can shrink only
    like h), aimed at half the goal: an LMO mixture at delta = 1e-10 needed 6 refinements
    and still missed 1e-3 under the h^2 model."""
    if width <= 0:
        return 0.5
    if not history:
        return math.sqrt(_AIM * goal / width)
    last_step, last_width = history[-1]
    order = 2.0
    if last_width > width > 0 and last_step > step:
        order = min(max(math.log(last_width / width) / math.log(last_step / step), 0.5), 3.0)
    return (0.5 * goal / width) ** (1.0 / order)


class FixedGridEvaluator:
    """Certified upper epsilon(delta) of ``make_description(parameter)`` on one PRV grid.

    The grid step is set at the first call (from that description, at a quarter of
    ``relative_tolerance``) and kept for every later call, so the function is smooth and
    monotone in the parameter wherever the description's privacy loss is; only the upper
    chain is composed.  Values are cached per parameter; ``evaluations`` counts the
    compositions made.  An error of ``make_description`` comes back as a one-line
    :class:`DpforgeError` prefixed with the parameter.

    With ``target`` (the epsilon a calibration aims at), the first call also decides, once
    for all calls, whether the compositions are tilted at ``target`` (:mod:`.tilt`,
    keeping losses from ``target / 2`` up): they are when the round-off allowance would
    take more than a tenth of the tolerance, as it does at tiny delta.
    """

    def __init__(
        self,
        make_description: Callable[[float], Description],
        delta: float,
        relative_tolerance: float,
        *,
        step: float | None = None,
        target: float | None = None,
    ) -> None:
        self.make_description = make_description
        self.delta = delta
        self.relative_tolerance = relative_tolerance
        self.tail = 1e-4 * delta
        self.step: float | None = step
        self.target = target
        self.tilted: bool | None = None if target is not None else False
        self.evaluations = 0
        self.cache: dict[float, float] = {}

    def __call__(self, parameter: float) -> float:
        if parameter in self.cache:
            return self.cache[parameter]
        try:
            description = self.make_description(parameter)
        except ValueError as error:
            kind = type(error) if isinstance(error, DpforgeError) else ParameterError
            raise kind(f"make_description({parameter:g}) failed: {error}") from None
        components = flatten(description)
        if self.step is None:
            self.step = initial_step(components, self.delta, 0.25 * self.relative_tolerance, self.tail)
        if self.tilted is None:  # first call with a target: decide whether to tilt
            probe = evaluate(components, self.step, self.tail, kinds=("upper",))
            share = roundoff_in_delta(probe, 0.5 * self.target) / self.delta
            self.tilted = share > _ROUNDOFF_SHARE * self.relative_tolerance
        if self.tilted:
            evaluation = evaluate(
                components,
                self.step,
                self.tail,
                kinds=("upper",),
                tilt_at=self.target,
                floor=0.5 * self.target,
                tilt_budget=_TILT_BUDGET * self.relative_tolerance * self.delta,
            )
        else:
            evaluation = evaluate(components, self.step, self.tail, kinds=("upper",))
        value = max(profile.epsilon(self.delta) for profile in evaluation.upper)
        self.evaluations += 1
        self.cache[parameter] = value
        return value
