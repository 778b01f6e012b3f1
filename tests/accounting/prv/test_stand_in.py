"""The stand-in that chooses a many-component plan's grid step (:mod:`dpforge.accounting.prv.stand_in`).

It only decides where the refinement looks: every bound still comes from the plan's own
evaluations, so the tests check that the stand-in is a faithful, cheap summary (steps
kept, classes not mixed, members standing for their runs), that the step search does
what it says on width functions whose answer is known, and that a plan the step model
used to refine past its goal is now met at a coarser grid, with a bracket that agrees
with the old one.
"""

from __future__ import annotations

import importlib
import math

import pytest

from dpforge.accounting.prv import stand_in as stand_in_module
from dpforge.accounting.prv.stand_in import chosen_step, stand_in
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled
from dpforge.mechanisms.combinators import flatten


def _schedule(count: int, steps: int, low: float = 0.8, high: float = 1.2) -> list:
    """Gaussian phases with sigma rising from ``low`` to ``high`` (q = 0.01)."""
    return [(PoissonSampled(Gaussian(low + (high - low) * i / (count - 1)), 0.01), steps) for i in range(count)]


def test_stand_in_keeps_the_steps_and_takes_its_members_from_the_plan():
    components = flatten(Composed(_schedule(300, 7)))
    proxy = stand_in(components, groups=32)
    assert sum(c.count for c in proxy) == 300 * 7
    assert 16 <= len(proxy) <= 32
    members = {(c.mechanism, c.sampling_rate) for c in components}
    assert all((c.mechanism, c.sampling_rate) in members for c in proxy)
    # runs are contiguous in the loss' spread, which falls as sigma rises: the
    # representatives fall with sigma's order, and the first and last sit within their
    # runs' 10 phases of the ends (every run holds about 300 / 32 phases of equal steps)
    sigmas = [c.mechanism.noise_multiplier for c in proxy]
    assert sigmas == sorted(sigmas, reverse=True)
    assert sigmas[0] > 1.2 - 0.4 * 10 / 299 and sigmas[-1] < 0.8 + 0.4 * 10 / 299


def test_stand_in_never_mixes_mechanism_classes_and_weights_runs_by_steps():
    gaussians = _schedule(200, 1)
    laplaces = [(PoissonSampled(Laplace(2.0 + i / 100), 0.01), 30) for i in range(100)]
    components = flatten(Composed(gaussians + laplaces))
    proxy = stand_in(components, groups=32)
    by_class: dict[str, int] = {}
    for c in proxy:
        by_class[type(c.mechanism).__name__] = by_class.get(type(c.mechanism).__name__, 0) + c.count
    assert by_class == {"Gaussian": 200, "Laplace": 3000}
    # groups go by steps: the Laplace phases hold 94 % of them and most of the groups
    kinds = [type(c.mechanism).__name__ for c in proxy]
    assert kinds.count("Gaussian") >= 1 and kinds.count("Laplace") >= 25


def test_one_heavy_component_is_a_run_of_its_own():
    parts = [(PoissonSampled(Gaussian(1.0), 0.01), 10_000)] + _schedule(150, 1, 2.0, 3.0)
    proxy = stand_in(flatten(Composed(parts)), groups=8)
    heavy = [c for c in proxy if c.count >= 10_000]
    assert len(heavy) == 1 and heavy[0].count == 10_000 and heavy[0].mechanism.noise_multiplier == 1.0
    assert sum(c.count for c in proxy) == 10_150


def test_chosen_step_keeps_a_proposal_that_holds():
    calls = []

    def width(step):
        calls.append(step)
        return 0.85e-3

    assert chosen_step(width, 1e-3, 4e-3, 1e-3) == 1e-3
    assert calls == [1e-3]


def test_chosen_step_finds_the_coarsest_passing_step_of_a_smooth_width():
    # width = c h^3: the step model (order fitted) descends, the climb comes back up
    c = 1e-3 / (2e-3) ** 3  # the width asked for at h = 2e-3; aimed at 0.8 of it
    threshold = 2e-3 * 0.8 ** (1 / 3)
    found = chosen_step(lambda h: c * h**3, 8e-3, 1.2e-2, 1e-3)
    assert found is not None
    assert c * found**3 <= 0.8e-3
    assert found > threshold / stand_in_module._CLIMB


def test_chosen_step_gives_up_where_the_stand_in_cannot_be_evaluated():
    assert chosen_step(lambda h: math.inf, 1e-3, 4e-3, 1e-3) is None


def test_chosen_step_never_looks_past_one_round_of_the_refinement():
    """A width that never passes (a lower chain at first order far from the goal): the
    search stops at an eighth of the probe's step, as far as one round of the
    refinement goes, instead of evaluating ever finer stand-ins."""
    calls = []

    def width(step):
        calls.append(step)
        return 1.0

    assert chosen_step(width, 1e-3, 4e-3, 1e-3) == 0.5e-3
    assert min(calls) == 0.5e-3 and len(calls) <= 3
    assert chosen_step(width, 1e-4, 4e-3, 1e-3) == 0.5e-3  # a proposal past it is held to it


def test_a_plan_the_step_model_overshot_is_met_at_a_coarser_grid(monkeypatch):
    """100 phases of 1,000 steps (sigma 0.8..1.2, q = 0.01, delta = 1e-5): from the
    probe the h^2 model proposed a step whose width came back 1.57x the goal, and the
    order fitted on that pair (1.6, against 2.9 near the goal) took the next step to
    288k points and 2.1e-4.  The stand-in sees the proposal fail and refines once."""
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")
    engine = importlib.import_module("dpforge.accounting.prv.engine")
    grids: list[int] = []
    original = evaluate.evaluate

    def spy(components, step, tail, **options):
        result = original(components, step, tail, **options)
        if len(components) == 100:
            grids.append(result.grid_size)
        return result

    monkeypatch.setattr(evaluate, "evaluate", spy)
    description = Composed(_schedule(100, 1_000))
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 100)
    result = engine.epsilon(description, 1e-5)
    assert result.accuracy["reached"]
    assert len(grids) == 2  # the probe and one refinement
    assert grids[-1] < 250_000
    with_stand_in = grids[:]
    grids.clear()
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 10**9)
    without = engine.epsilon(description, 1e-5)
    assert len(grids) == 3 and grids[-1] > with_stand_in[-1]
    # two certified brackets of one epsilon: they must meet
    assert max(result.lower, without.lower) <= min(result.upper, without.upper)


def test_the_stand_in_is_not_built_for_few_components(monkeypatch):
    stand_ins = []
    original = stand_in_module.stand_in
    engine = importlib.import_module("dpforge.accounting.prv.engine")
    monkeypatch.setattr(engine, "stand_in", lambda components: stand_ins.append(len(components)) or original(components))
    engine.epsilon(Composed(_schedule(20, 50)), 1e-5)
    assert stand_ins == []
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 20)
    engine.epsilon(Composed(_schedule(20, 50)), 1e-5)
    assert stand_ins == [20]


@pytest.mark.parametrize("groups", [1, 5])
def test_stand_in_with_fewer_groups_than_classes_still_gives_each_class_one(groups):
    parts = _schedule(10, 3) + [(PoissonSampled(Laplace(2.0 + i), 0.01), 3) for i in range(10)]
    proxy = stand_in(flatten(Composed(parts)), groups=groups)
    assert {type(c.mechanism).__name__ for c in proxy} == {"Gaussian", "Laplace"}
    assert sum(c.count for c in proxy) == 60


@pytest.mark.parametrize("query", ["epsilon", "delta"])
def test_a_many_component_plan_sizes_its_grids_on_the_stand_in(monkeypatch, query):
    """The probe step, grid sizes and saddle estimates read one-step moments, each from
    a coarse discretisation of its own (10,000 distinct steps: 4.2 of 31 s): a plan of
    many components reads them off its stand-in's few members, so no more than those
    are discretised for moments; its bracket agrees with the one sized on every
    component."""
    components = importlib.import_module("dpforge.accounting.prv.components")
    engine = importlib.import_module("dpforge.accounting.prv.engine")
    components.single_step_moments.cache_clear()
    components._coarse_law.cache_clear()
    laws: set = set()
    original = components._coarse_law

    def spy(loss, tail):
        laws.add(loss)
        return original(loss, tail)

    monkeypatch.setattr(components, "_coarse_law", spy)
    description = Composed(_schedule(150, 20))
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 100)
    sized_on_stand_in = engine.epsilon(description, 1e-5) if query == "epsilon" else engine.delta(description, 2.0)
    assert 0 < len(laws) <= 2 * 32  # both directions of at most 32 members
    laws.clear()
    components.single_step_moments.cache_clear()
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 10**9)
    sized_on_all = engine.epsilon(description, 1e-5) if query == "epsilon" else engine.delta(description, 2.0)
    assert len(laws) == 2 * 150
    assert max(sized_on_stand_in.lower, sized_on_all.lower) <= min(sized_on_stand_in.upper, sized_on_all.upper)


def test_the_widest_one_step_span_is_the_plans_own_when_moments_come_from_the_stand_in():
    """The stand-in's members need not include the plan's widest one-step law (here one
    low-noise phase among 300): window estimates take the mean and variance from the
    stand-in but the widest span from every component's truncation."""
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")
    components_module = importlib.import_module("dpforge.accounting.prv.components")
    plan = flatten(Composed(_schedule(300, 10, 1.0, 1.2) + [(PoissonSampled(Gaussian(0.4), 0.01), 1)]))
    proxy = stand_in(plan, groups=8)
    assert all(c.mechanism.noise_multiplier > 0.5 for c in proxy)  # the wide phase is no member
    tail = 1e-9
    for direction in ("remove", "add"):
        own = components_module.loss_moments(plan, direction, tail)
        sized = evaluate._moments(plan, direction, tail, proxy)
        assert sized[2] == own[2] > components_module.loss_moments(proxy, direction, tail)[2]
        assert sized[0] == pytest.approx(own[0], rel=0.05) and sized[1] == pytest.approx(own[1], rel=0.05)


def _full_discretisations(monkeypatch, size: int) -> list[tuple[str, float, tuple]]:
    """(direction, step, kinds) of every discretisation of all ``size`` components."""
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")
    calls: list[tuple[str, float, tuple]] = []
    original = evaluate.discretise_all

    def spy(components, direction, step, tail, kinds, **options):
        if len(components) == size:
            calls.append((direction, step, tuple(kinds)))
        return original(components, direction, step, tail, kinds, **options)

    monkeypatch.setattr(evaluate, "discretise_all", spy)
    return calls


def test_a_many_component_plan_is_probed_on_its_stand_in(monkeypatch):
    """The plan's own probe composed all 400 phases at a step that only fed the step
    model: the stand-in's probe chooses the step, the
    plan is composed once there in its dominant direction ('remove'), and the dominated
    one ('add') for its upper bound alone at the coarser probe step.  The bracket agrees
    with the plan probed as before and is as narrow as asked."""
    engine = importlib.import_module("dpforge.accounting.prv.engine")
    description = Composed(_schedule(400, 10))
    calls = _full_discretisations(monkeypatch, 400)
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 100)
    result = engine.epsilon(description, 1e-5)
    assert result.accuracy["reached"]
    kinds = sorted((direction, kind) for direction, _, kinds in calls for kind in kinds)
    assert kinds == [("add", "upper"), ("remove", "lower"), ("remove", "upper")]
    steps = {direction: step for direction, step, _ in calls}
    assert steps["add"] > 2 * steps["remove"]
    calls.clear()
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 10**9)
    probed = engine.epsilon(description, 1e-5)
    # probed as before: 'remove' composed at the probe step and again at the step refined to
    assert len({step for direction, step, _ in calls if direction == "remove"}) == 2 and len(calls) >= 5
    assert max(result.lower, probed.lower) <= min(result.upper, probed.upper)


def test_a_direction_the_plan_does_not_show_dominated_is_composed_at_the_step():
    """``coarse_upper`` names a direction expected to be dominated; where the plan's own
    bounds at the probe do not show it so (here the dominant 'remove' itself), it is
    composed at the probe's step for both bounds, and the bracket is the one the probe
    gives without the option."""
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")
    components = flatten(Composed(_schedule(40, 10)))
    delta, step, tail = 1e-5, 2e-3, 1e-9

    def refined(coarse_upper):
        return evaluate.refine(
            components, step, tail, 1e-3, lambda e: e.epsilon(delta), 0, delta=delta, coarse_upper=coarse_upper
        )

    plain = refined(None)
    wrongly = refined((("remove",), 4 * step))
    assert (wrongly.low, wrongly.high) == pytest.approx((plain.low, plain.high), rel=1e-12)
    assert all(profile.grid_size > 0 for profile in wrongly.evaluation.lower)
    rightly = refined((("add",), 4 * step))  # 'add' is dominated: kept at its coarse upper bound
    assert rightly.low == pytest.approx(plain.low, rel=1e-12)
    assert rightly.high == pytest.approx(plain.high, rel=1e-12)
    add = rightly.evaluation.directions.index("add")
    assert rightly.evaluation.lower[add].grid_size == 0 and rightly.evaluation.upper[add].epsilon(delta) <= rightly.low


def test_no_lower_bound_certifies_nothing_and_never_fails():
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")
    profile = evaluate.no_lower_bound()
    assert profile.kind == "lower"
    assert profile.epsilon(1e-12) == 0.0 and profile.delta(0.0) == 0.0 and profile.delta(5.0) == 0.0
    assert profile.slope(1.0) == 0.0


def test_a_stand_in_step_past_the_budget_falls_back_to_the_probe(monkeypatch):
    """The step the stand-in chooses is finer than the plan's probe step, so its one-step
    measures can pass a memory budget the probe's fit: under 8 MB, 400 phases of 10 steps
    raised a LimitError at the stand-in's step, where the probe and a refinement that
    stops at the limit answer, flagged.  The plan is then probed as before."""
    engine = importlib.import_module("dpforge.accounting.prv.engine")
    from dpforge.errors import DpforgeAccuracyWarning

    description = Composed(_schedule(400, 10))
    monkeypatch.setattr(engine, "STAND_IN_COMPONENTS", 100)
    with pytest.warns(DpforgeAccuracyWarning, match="looser than requested"):
        limited = engine.epsilon(description, 1e-5, memory_budget=8e6)
    assert not limited.accuracy["reached"] and math.isfinite(limited.upper)
    free = engine.epsilon(description, 1e-5)
    assert max(limited.lower, free.lower) <= min(limited.upper, free.upper)
