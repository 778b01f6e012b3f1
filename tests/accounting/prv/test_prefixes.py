"""Prefix products: epsilon after each part from one composition, each row certified."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from dpforge.accounting import epsilon
from dpforge.accounting.prv.prefixes import epsilon_prefixes
from dpforge.errors import DpforgeAccuracyWarning
from dpforge.mechanisms import LMO, Composed, Gaussian, Laplace, PoissonSampled, flatten

PARTS = [
    Composed([(PoissonSampled(Gaussian(1.2), 0.01), 200)]),
    Composed([(PoissonSampled(Laplace(2.0), 0.02), 50)]),
    Composed([(PoissonSampled(Gaussian(0.9), 0.01), 300)]),
    Composed([(PoissonSampled(LMO(weights=(0.5, 0.0, 0.5), gamma_shape=3.0, uniform_low=0.2, uniform_high=1.5), 0.01), 100)]),
]


@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_every_prefix_row_overlaps_a_fresh_certified_bracket(delta):
    rows = epsilon_prefixes(PARTS, delta)
    assert len(rows) == len(PARTS)
    for count, row in enumerate(rows, start=1):
        fresh = epsilon(Composed([part for description in PARTS[:count] for part in description.parts]), delta)
        assert row.lower <= fresh.upper and fresh.lower <= row.upper, (count, row, fresh)
        assert row.upper == pytest.approx(fresh.upper, rel=3e-3)
    assert all(a.upper <= b.upper * (1 + 1e-9) for a, b in zip(rows, rows[1:]))
    last = epsilon(Composed([part for description in PARTS for part in description.parts]), delta)
    assert (rows[-1].lower, rows[-1].upper) == (last.lower, last.upper)


def test_one_part_is_plain_epsilon_and_empty_is_refused():
    single = epsilon_prefixes(PARTS[:1], 1e-5)
    assert len(single) == 1 and single[0].upper == epsilon(PARTS[0], 1e-5).upper
    with pytest.raises(ValueError, match="at least one"):
        epsilon_prefixes([], 1e-5)


def test_prefixes_of_a_plan_under_its_total_variation_are_all_zero():
    """eps = 0 of the whole plan by its total variation bound bounds every prefix: no
    grid step to compose the prefixes on, and none needed."""
    parts = [Composed([(PoissonSampled(Gaussian(1.0), 1e-4), 100)])] * 3
    rows = epsilon_prefixes(parts, 0.1)
    assert [(row.lower, row.upper) for row in rows] == [(0.0, 0.0)] * 3
    assert all(row.accuracy["total_variation"] <= 0.1 for row in rows)


def _parts_on_one_step(count: int, steps: int = 10):
    from dpforge.accounting.prv.components import discretise_all
    from dpforge.mechanisms.combinators import flatten

    groups = [flatten(Composed([(PoissonSampled(Gaussian(0.8 + 0.4 * i / max(count - 1, 1)), 0.01), steps)])) for i in range(count)]
    return [discretise_all(group, "remove", 2e-3, 1e-12, ("upper",))["upper"] for group in groups]


def test_each_prefix_is_the_composition_of_its_parts():
    """A prefix read off the running product of transforms is the composition of its parts
    on its own window: the same profile (to the window's own aliasing and round-off terms,
    which follow its size: 2e-8 here) and +inf mass."""
    from dpforge.accounting.prv.compose import compose
    from dpforge.accounting.prv.prefixes import compose_prefixes

    from dpforge.accounting.prv.spectral_rows import SpectralRow

    parts = _parts_on_one_step(5)
    for count, together in enumerate(compose_prefixes(parts, 1e-12), start=1):
        alone = compose([item for part in parts[:count] for item in part], 1e-12)
        for eps in (0.0, 0.3, 1.0):
            read = together.delta("upper", eps) if isinstance(together, SpectralRow) else together.upper_profile().delta(eps)
            assert read == pytest.approx(alone.upper_profile().delta(eps), rel=1e-6, abs=1e-15)
        assert together.infinity == pytest.approx(alone.infinity, rel=1e-12, abs=1e-300)


def test_prefixes_are_formed_one_at_a_time():
    """compose_prefixes yields each prefix before forming the next: a list of them held
    16 bytes a window point a prefix (6.6 GB added for 3,000 phases of 10 steps), so the
    traced peak over 200 prefixes stays within a few windows."""
    import tracemalloc

    from dpforge.accounting.prv.prefixes import compose_prefixes

    parts = _parts_on_one_step(200)
    held = sum(measure.masses.nbytes for part in parts for measure, _ in part)
    tracemalloc.start()
    try:
        window = 0
        for prefix in compose_prefixes(parts, 1e-12):
            window = prefix.grid_size
            del prefix
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= held + 20 * 16 * window  # the list version: over 200 * 16 * window


def test_each_phase_is_truncated_as_in_the_whole_plan():
    """A phase discretised on its own was truncated at tail / (10 x its own steps) a step,
    against tail / (10 x all the plan's steps) in the whole plan's refinement: 100 phases
    of 10 steps put 100 x the mass at +inf, and the first row (the first phase alone, on
    a grid fine enough for the whole plan) came back 4.4e-4 wide where its grid gives
    2.2e-5; at 1,000 phases 132 rows were wider than asked.  The row must also overlap a
    fresh certified bracket of the first phase."""
    phases = 100
    parts = [Composed([(PoissonSampled(Gaussian(0.8 + 0.4 * i / (phases - 1)), 0.01), 10)]) for i in range(phases)]
    rows = epsilon_prefixes(parts, 1e-5)
    first = rows[0]
    assert first.upper - first.lower <= 1e-4 * first.upper
    alone = epsilon(parts[0], 1e-5)
    assert first.lower <= alone.upper and alone.lower <= first.upper
    assert all(row.upper - row.lower <= 1e-3 * row.upper for row in rows)


def test_rows_say_whether_they_reached_the_accuracy_asked(monkeypatch):
    """A prefix row carries ``reached`` as the engine's results do: the short warm-up
    phase of examples/plans/within_budget.toml, read off the whole plan's grid and not
    refined on its own, is wider than 1e-3 and says so."""
    from dpforge.accounting.prv import prefixes
    from dpforge.budget.plan import load_plan

    monkeypatch.setattr(prefixes, "SEPARATE_ROWS", 0)
    plan = load_plan(Path(__file__).resolve().parents[3] / "examples" / "plans" / "within_budget.toml")
    rows = epsilon_prefixes([phase.description() for phase in plan.phases], plan.delta)
    for row in rows:
        assert row.accuracy["reached"] == (row.upper - row.lower <= 1e-3 * row.upper)
    assert not rows[0].accuracy["reached"]


@pytest.mark.parametrize("delta", [1e-5, 1e-10])
def test_a_profile_read_from_a_floor_gives_the_same_eps_above_it(delta, mixed_windows):
    """verify reads each row's profiles from the previous row's certified lower bound up
    (eps only grows with the prefix): from any floor at or below the answer, the upper
    and lower eps are the whole window's; from a floor above it the upper one is the
    floor (the profile is 1 below it) and the lower one is never above the whole
    window's (to rounding)."""
    import numpy as np

    for kind, composed in mixed_windows.items():
        whole = composed.upper_profile() if kind == "upper" else composed.lower_profile()
        answer = whole.epsilon(delta)
        assert 0.0 < answer < composed.positions[-1]
        for floor in (-1.0, 0.0, 0.3 * answer, answer - 1e-3, answer):
            floored = composed.upper_profile(floor) if kind == "upper" else composed.lower_profile(floor)
            assert floored.positions.size < whole.positions.size
            # equal up to rounding: the grid step is read off the first two positions kept
            assert floored.epsilon(delta) == pytest.approx(answer, rel=1e-13)
        above = composed.upper_profile(answer + 0.5) if kind == "upper" else composed.lower_profile(answer + 0.5)
        if kind == "upper":
            assert above.epsilon(delta) == answer + 0.5
        else:
            assert above.epsilon(delta) <= answer
        assert np.all(np.diff(above.positions) > 0)


@pytest.mark.parametrize("delta, tolerance", [(1e-5, 1e-7), (1e-10, 1e-4)])
def test_rows_read_off_their_band_match_rows_read_off_the_whole_window(monkeypatch, delta, tolerance):
    """verify's rows, composed at the band their bound keeps and read off that spectrum
    (.spectral_rows), against the same rows with every measure transformed on the whole
    window and every row inverse transformed and read entry by entry (the reading before
    them): each pair of certified brackets overlaps, the upper bounds agree to the sums'
    error bound and the dropped frequencies' allowance, the lower bounds are no looser
    by more than that (they can be tighter: the mass outside the window that aliases
    where the lower profile does not read is not taken off it, 1e-5 of eps at most
    here), and most rows were read off their band."""
    import importlib
    import random

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    spectral_rows = importlib.import_module("dpforge.accounting.prv.spectral_rows")
    draw = random.Random(7)
    parts = []
    for _ in range(50):
        mechanism = Gaussian(draw.uniform(0.7, 2.0)) if draw.random() < 0.6 else Laplace(draw.uniform(0.8, 4.0))
        parts.append(Composed([(PoissonSampled(mechanism, draw.uniform(0.003, 0.04)), draw.randint(1, 20))]))
    kinds = []
    compose_prefixes = prefixes.compose_prefixes

    def counted(*args):
        for row in compose_prefixes(*args):
            kinds.append(isinstance(row, spectral_rows.SpectralRow))
            yield row

    monkeypatch.setattr(prefixes, "compose_prefixes", counted)
    banded = epsilon_prefixes(parts, delta)
    assert sum(kinds) >= 0.8 * len(kinds)
    monkeypatch.setattr(prefixes, "_SPECTRAL_SHARE", 10**18)
    monkeypatch.setattr(prefixes, "_narrowed_band", lambda bound, dropped, log_mass, count, size, band: (band, dropped))
    kinds.clear()
    whole = epsilon_prefixes(parts, delta)
    assert not any(kinds)
    for row, reference in zip(banded, whole):
        assert row.lower <= reference.upper and reference.lower <= row.upper
        assert reference.lower * (1 - tolerance) <= row.lower <= reference.lower * (1 + 1e-4)
        assert row.upper == pytest.approx(reference.upper, rel=tolerance)


def test_rows_are_bounded_by_later_rows_and_still_overlap_fresh_brackets():
    """eps only grows with the prefix, so a later row's certified upper bound (the whole
    plan's, tilted, last of all) bounds every earlier row: at delta = 1e-12 the untilted
    rows' own upper bounds sat far above it (40 phases: row 20 read 6.09 against the
    whole plan's [4.6878, 4.6911], and one row 1.68 times that).  Every row's upper bound is now at most every later one's and its lower
    bound at least every earlier one's, and each still overlaps a fresh certified
    bracket of its prefix."""
    phases = 40
    parts = [Composed([(PoissonSampled(Gaussian(0.8 + 0.4 * i / (phases - 1)), 0.01), 10)]) for i in range(phases)]
    rows = epsilon_prefixes(parts, 1e-12)
    # (and, composed again tilted, every row within the 1e-3 asked: untilted, up to 2.2 %)
    assert all(row.accuracy["reached"] and row.upper - row.lower <= 1e-3 * row.upper for row in rows)
    assert all(a.upper <= b.upper for a, b in zip(rows, rows[1:]))
    assert all(a.lower <= b.lower for a, b in zip(rows, rows[1:-1]))
    assert all(row.lower <= row.upper for row in rows)
    for index in (0, 5, 20, 38):
        fresh = epsilon(Composed([part for description in parts[: index + 1] for part in description.parts]), 1e-12)
        assert rows[index].lower <= fresh.upper and fresh.lower <= rows[index].upper, (index, rows[index], fresh)


def test_tilted_rows_of_mixed_phases_overlap_fresh_brackets_at_tiny_delta(monkeypatch):
    """Below delta = 1e-8 rows wider than asked are composed again tilted (one tilt a
    direction, each row read from its certified lower bound up): 24 mixed Gaussian,
    Laplace and LMO phases at 1e-13, none refined on its own, every row within the 1e-3
    asked (untilted, up to 54 % wide) and overlapping a fresh certified bracket of its
    prefix."""
    import importlib
    import random

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    monkeypatch.setattr(prefixes, "SEPARATE_ROWS", 0)
    draw = random.Random(3)
    lmo = LMO(weights=(0.5, 0.0, 0.5), gamma_shape=3.0, uniform_low=0.2, uniform_high=1.5)
    parts = []
    for index in range(24):
        mechanism = (Gaussian(draw.uniform(0.8, 2.0)), Laplace(draw.uniform(1.0, 4.0)), lmo)[index % 3]
        parts.append(Composed([(PoissonSampled(mechanism, draw.uniform(0.005, 0.03)), draw.randint(5, 40))]))
    rows = epsilon_prefixes(parts, 1e-13)
    assert not any(row.accuracy["refined_separately"] for row in rows[:-1])
    assert all(row.accuracy["reached"] for row in rows), [row.accuracy["achieved"] for row in rows]
    for index in (0, 4, 11, 22):
        fresh = epsilon(Composed([part for description in parts[: index + 1] for part in description.parts]), 1e-13)
        assert rows[index].lower <= fresh.upper and fresh.lower <= rows[index].upper, (index, rows[index], fresh)


def test_tilted_rows_past_the_memory_budget_leave_the_untilted_rows_marked(monkeypatch):
    """The tilted pass holds a tilted copy of every one-step measure beside the measures,
    checked against the memory budget with them; past it, the pass is given up and the
    untilted rows stand, each certified and marked as short (no error: the verdict, the
    last row, is the whole plan's)."""
    import importlib

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    limits = importlib.import_module("dpforge.accounting.prv.limits")
    checked = []

    def over_budget(nbytes, what):
        checked.append(what)
        if "tilted copies" in what:
            raise limits.LimitError(f"{what}: over the budget (test)")

    monkeypatch.setattr(prefixes, "check_held", over_budget)
    monkeypatch.setattr(prefixes, "SEPARATE_ROWS", 0)
    phases = 20
    parts = [Composed([(PoissonSampled(Gaussian(0.8 + 0.4 * i / (phases - 1)), 0.01), 10)]) for i in range(phases)]
    rows = epsilon_prefixes(parts, 1e-12)
    assert any("tilted copies" in what for what in checked)
    assert rows[-1].accuracy["reached"]
    assert sum(not row.accuracy["reached"] for row in rows[:-1]) >= 10  # untilted: 19 rows wide
    assert all(row.lower <= row.upper for row in rows)


def _rows_not_refined_alone(monkeypatch):
    """The prefixes module, with rows wider than asked left as the pass gives them (none
    refined on its own)."""
    import importlib

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    monkeypatch.setattr(prefixes, "SEPARATE_ROWS", 0)
    return prefixes


def _family(phases: int):
    return [Composed([(PoissonSampled(Gaussian(0.8 + 0.4 * i / (phases - 1)), 0.01), 10)]) for i in range(phases)]


def _recorded_passes(monkeypatch, prefixes):
    """The (direction, kinds, step, tilted) of every prefix pass epsilon_prefixes makes."""
    passes = []
    original = prefixes._direction_rows

    def recorded(groups, whole, direction, kinds, step, tail, delta, floors, tilt=None):
        passes.append((direction, tuple(kinds), step, tilt is not None))
        return original(groups, whole, direction, kinds, step, tail, delta, floors, tilt)

    monkeypatch.setattr(prefixes, "_direction_rows", recorded)
    return passes


def _named(passes) -> list[str]:
    """Each recorded pass as 'direction kinds' (l: lower, u: upper), ' tilted' when it is."""
    return [f"{direction} {''.join(kind[0] for kind in kinds)}{' tilted' if tilted else ''}" for direction, kinds, _, tilted in passes]


def test_a_dominated_direction_is_bounded_on_a_coarse_grid_alone(monkeypatch):
    """A row's eps is the larger of its two directions', and the verify family's add
    direction lies far below its remove one (row 49 of 100 at 1e-5: 1.09 against 1.86):
    its rows are bounded from above on a grid 4x coarser, with no lower chain, and every
    row comes out as it does with both directions composed at the step for both bounds
    (certified either way; here not one bound moves)."""
    prefixes = _rows_not_refined_alone(monkeypatch)
    parts = _family(30)
    passes = _recorded_passes(monkeypatch, prefixes)
    rows = epsilon_prefixes(parts, 1e-5)
    step = rows[-1].accuracy["grid_step"]
    assert _named(passes) == ["remove lu", "add u"]
    assert passes[1][2] == pytest.approx(prefixes._COARSE_FACTOR * step) and prefixes._COARSE_FACTOR > 1
    monkeypatch.setattr(prefixes, "_COARSE_FACTOR", 1)
    passes.clear()
    both = epsilon_prefixes(parts, 1e-5)
    assert _named(passes) == ["remove lu", "add lu"]
    assert [(row.lower, row.upper) for row in rows] == [(row.lower, row.upper) for row in both]
    assert all(row.accuracy["reached"] for row in rows)


def test_rows_do_not_depend_on_which_direction_comes_first(monkeypatch):
    """Taken first, the add direction leaves the remove one possibly setting every row:
    its coarse upper bounds lie above the rows' lower bounds and would widen them, so it
    is composed at the step for both bounds, and every row comes out as in the usual
    order."""
    prefixes = _rows_not_refined_alone(monkeypatch)
    parts = _family(20)
    usual = epsilon_prefixes(parts, 1e-5)
    passes = _recorded_passes(monkeypatch, prefixes)
    monkeypatch.setattr(prefixes, "directions_for", lambda whole: ("add", "remove"))
    reversed_rows = epsilon_prefixes(parts, 1e-5)
    assert _named(passes) == ["add lu", "remove u", "remove lu"]
    assert [(row.lower, row.upper) for row in reversed_rows] == [(row.lower, row.upper) for row in usual]


def test_a_direction_dominated_at_every_wide_row_is_not_tilted_again(monkeypatch):
    """At delta = 1e-12 the untilted rows are wide (the tilted pass is for them), so the
    add direction of the verify family is bounded on the coarse grid alone there too,
    and the tilted pass composes only the remove direction: the add direction's coarse
    upper bounds lie below every wide row's floor, so they stand, and every row still
    reaches the 1e-3 asked and overlaps a fresh certified bracket."""
    prefixes = _rows_not_refined_alone(monkeypatch)
    parts = _family(20)
    passes = _recorded_passes(monkeypatch, prefixes)
    rows = epsilon_prefixes(parts, 1e-12)
    assert _named(passes) == ["remove lu", "add u", "remove lu tilted"]
    monkeypatch.setattr(prefixes, "_COARSE_FACTOR", 1)
    both = epsilon_prefixes(parts, 1e-12)
    assert [(row.lower, row.upper) for row in rows] == [(row.lower, row.upper) for row in both]
    assert all(row.accuracy["reached"] for row in rows)
    for index in (0, 9):
        fresh = epsilon(Composed([part for description in parts[: index + 1] for part in description.parts]), 1e-12)
        assert rows[index].lower <= fresh.upper and fresh.lower <= rows[index].upper, (index, rows[index], fresh)


def _mixed_rates(phases: int = 24):
    """Gaussian and Laplace phases in turn at q 0.01, 0.1, 0.5 and 1 (unsampled)."""
    parts = []
    for index in range(phases):
        mechanism = Gaussian(1.0 + 0.1 * index) if index % 2 == 0 else Laplace(2.0 + 0.2 * index)
        rate = (0.01, 0.1, 0.5, 1.0)[index % 4]
        parts.append(Composed([(PoissonSampled(mechanism, rate) if rate < 1.0 else mechanism, 5 + index)]))
    return parts


def test_a_direction_the_coarse_grid_leaves_open_is_tilted_again(monkeypatch):
    """24 Gaussian and Laplace phases at q from 0.01 to 1, delta = 1e-13: the add
    direction's coarse upper bounds lie above some wide row's floor, so the tilted pass
    composes it for both bounds as well, and every row reaches the 1e-3 asked and
    overlaps a fresh certified bracket."""
    prefixes = _rows_not_refined_alone(monkeypatch)
    parts = _mixed_rates()
    passes = _recorded_passes(monkeypatch, prefixes)
    rows = epsilon_prefixes(parts, 1e-13)
    assert _named(passes) == ["remove lu", "add u", "remove lu tilted", "add lu tilted"]
    assert all(row.accuracy["reached"] for row in rows), [row.accuracy["achieved"] for row in rows]
    for index in (0, 7, 16, 22):
        fresh = epsilon(Composed([part for description in parts[: index + 1] for part in description.parts]), 1e-13)
        assert rows[index].lower <= fresh.upper and fresh.lower <= rows[index].upper, (index, rows[index], fresh)


def test_rows_left_to_a_tilted_pass_that_fails_are_composed_at_the_step(monkeypatch):
    """Below delta = 1e-8 the coarse add direction leaves rows already wide, which it may
    set, to the tilted pass (the mixed phases at 1e-13 above); where that pass finds no
    tilt (forced here), that direction is composed at the step for both bounds, and the
    rows come out as they do without the coarse pass (certified, marked as short)."""
    prefixes = _rows_not_refined_alone(monkeypatch)
    monkeypatch.setattr(prefixes, "_rows_tilt", lambda measures, tilt, floors: 0.0)
    parts = _mixed_rates()
    passes = _recorded_passes(monkeypatch, prefixes)
    rows = epsilon_prefixes(parts, 1e-13)
    # the tilted pass finds no tilt (None), and the add direction is composed at the step
    # (the remove direction's rows are kept, not composed again)
    assert _named(passes) == ["remove lu", "add u", "remove lu tilted", "add lu"]
    assert sum(not row.accuracy["reached"] for row in rows[:-1]) >= 5
    monkeypatch.setattr(prefixes, "_COARSE_FACTOR", 1)
    both = epsilon_prefixes(parts, 1e-13)
    assert [(row.lower, row.upper) for row in rows] == [(row.lower, row.upper) for row in both]


def _rows_graded_and_uniform(monkeypatch, parts, delta):
    """(rows graded as the prefix pass grades them, points it evaluated; the same on
    uniform cells), rows wider than asked left as they are (none refined on its own)."""
    import importlib

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    rounding = importlib.import_module("dpforge.accounting.prv.rounding")
    monkeypatch.setattr(prefixes, "SEPARATE_ROWS", 0)
    points, inside = [], []
    original, discretise_all, grading = rounding.base_functions_and_errors, prefixes.discretise_all, prefixes.row_exponents

    def counted(loss, edges):  # points evaluated for the prefix pass (not the whole plan's refinement)
        if inside:
            points.append(edges.size)
        return original(loss, edges)

    def prefix_pass(*args, **kwargs):
        inside.append(True)
        try:
            return discretise_all(*args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(prefixes, "discretise_all", prefix_pass)
    monkeypatch.setattr(rounding, "base_functions_and_errors", counted)

    def rows_with(exponents):
        points.clear()
        monkeypatch.setattr(prefixes, "row_exponents", exponents)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DpforgeAccuracyWarning)
            rows = epsilon_prefixes(parts, delta)
        return rows, sum(points)

    graded = rows_with(grading)
    uniform = rows_with(lambda groups, *args: (None, len(groups)))
    return graded, uniform


def test_the_prefix_pass_grades_its_cells_at_the_rows_exponents_at_no_cost_in_width(monkeypatch):
    """The prefix pass discretises every phase again at the whole plan's step.  Graded at
    the range of the rows' saddle exponents (:func:`.prefixes.row_exponents`), its laws
    are evaluated at far fewer points than on uniform cells (a step's law spans about
    11,000 steps at 10,000 phases, about 1,500 of them graded), and every row's bracket is
    about as narrow as on uniform cells and overlaps it.  Phases are graded from the first
    row with 8 expected sampled steps (here one a phase: the eighth)."""
    from dpforge.accounting.prv import prefixes

    phases = 40
    parts = [Composed([(PoissonSampled(Gaussian(0.8 + 0.4 * i / (phases - 1)), 0.01), 100)]) for i in range(phases)]
    exponents, first = prefixes.row_exponents([flatten(part) for part in parts[:-1]], "remove", 1e-9 / (10 * 4000), 1e-5)
    assert first == 7 and exponents is not None and np.all(exponents > 0)
    assert np.all(exponents[1:] / exponents[:-1] <= prefixes._EXPONENT_RATIO * (1 + 1e-12))
    (graded, graded_points), (uniform, uniform_points) = _rows_graded_and_uniform(monkeypatch, parts, 1e-5)
    assert graded_points < 0.5 * uniform_points
    for row, plain in zip(graded, uniform):
        assert row.lower <= plain.upper and plain.lower <= row.upper
        assert row.upper - row.lower <= 1.05 * (plain.upper - plain.lower) + 1e-9 * plain.upper


def test_rows_with_few_sampled_steps_keep_uniform_cells(monkeypatch):
    """A row whose prefix has fewer than 8 expected sampled steps reads single hits far
    out in one step's tail, which a saddle exponent does not describe (as for the
    refinement's graded cells).  Graded from the first row, this plan's first row (50
    steps of a Gaussian at q = 1e-4, 0.005 hits) read [0.28202, 0.32166] against
    [0.32160, 0.32162] on uniform cells at delta = 1e-12; its phases before the eighth
    Laplace phase now keep uniform cells, and every row is as narrow as on uniform cells."""
    parts = [Composed([(PoissonSampled(Gaussian(0.8), 1e-4), 50)]), Composed([(PoissonSampled(Laplace(2.0), 0.02), 50)])] * 10
    (graded, _), (uniform, _) = _rows_graded_and_uniform(monkeypatch, parts, 1e-12)
    for row, plain in zip(graded, uniform):
        assert row.lower <= plain.upper and plain.lower <= row.upper
        assert row.upper - row.lower <= 1.05 * (plain.upper - plain.lower) + 1e-9 * plain.upper


def _random_measure(rng, step):
    """A one-step measure of 20-200 points (a bump, a two-sided exponential or cubed
    noise), of mass 0.6-1, placed and shifted at random."""
    from dpforge.accounting.prv.discretise import GridMeasure

    size = int(rng.integers(20, 200))
    x = np.arange(size) * step
    kind = rng.integers(3)
    centre, width = rng.uniform(0.1, 0.9) * size * step, rng.uniform(0.05, 0.5) * size * step
    if kind == 0:
        masses = np.exp(-0.5 * ((x - centre) / width) ** 2)
    elif kind == 1:
        masses = np.exp(-np.abs(x - centre) / width)
    else:
        masses = rng.random(size) ** 3
    masses = masses / masses.sum() * rng.uniform(0.6, 1.0)
    masses[masses < 1e-300] = 0.0
    first = int(rng.integers(-60, 120))
    shift = float(rng.choice([0.0, rng.uniform(0, step)]))
    return GridMeasure(first, masses, step, shift)


def test_tilted_prefix_rows_bracket_the_exact_prefixes_within_the_rounding_of_the_tilt():
    """verify's tilted rows (spectral rows and whole windows) against exact prefix
    compositions in long double, at each row's floor and above: 60 parts alternating two
    random measures, tilted at theta = 2.  Before the rows carried the rounding of the
    tilted masses' logarithms and of S(y) (:func:`.tilt.log_space_error`,
    :func:`.tilt.untilting_error`), 51 upper readings of spectral rows lay below the
    exact delta (found by a review's harness); every reading must now be bracketed."""
    from dpforge.accounting.prv.prefixes import compose_prefixes
    from dpforge.accounting.prv.spectral_rows import SpectralRow

    rng = np.random.default_rng(1)
    step = 0.02
    measures = [_random_measure(rng, step) for _ in range(2)]
    parts = [[(measures[k % 2], int(rng.integers(1, 4)))] for k in range(60)]
    exact, first, shift, prefixes, floors = np.array([1.0], dtype=np.longdouble), 0, np.longdouble(0.0), [], []
    for part in parts:
        for measure, count in part:
            for _ in range(count):
                exact = np.convolve(exact, measure.masses.astype(np.longdouble))
            first += measure.first_index * count
            shift += np.longdouble(measure.shift) * count
        positions = (first + np.arange(exact.size)) * np.longdouble(step) - shift
        prefixes.append((positions, exact.copy()))
        beyond = np.flatnonzero(np.cumsum(exact[::-1])[::-1] < 1e-9)
        floors.append(float(positions[beyond[0]]) if beyond.size else float(positions[-1]))
    kinds, readings = set(), 0
    for index, row in enumerate(compose_prefixes(parts, 1e-12, 2.0, floors)):
        kinds.add(type(row).__name__)
        positions, masses = prefixes[index]
        for at in (floors[index], floors[index] + 0.3, floors[index] + 1.0):
            beyond = positions > at
            true = float(np.sum(masses[beyond] * (1 - np.exp(np.longdouble(at) - positions[beyond]))))
            if not true > 0.0:
                continue
            if isinstance(row, SpectralRow):
                lower, upper = row.delta("lower", at), row.delta("upper", at)
            else:
                lower, upper = row.lower_profile().delta(at), row.upper_profile().delta(at)
            assert lower <= true <= upper, (index, at, lower, true, upper)
            readings += 1
    assert kinds == {"SpectralRow", "TiltedComposition"} and readings > 100
