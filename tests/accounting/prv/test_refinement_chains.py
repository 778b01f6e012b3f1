"""The refinement's per-chain levers: finer grids for the staged chunks, a smaller
truncation tail, and the evaluations they reuse.

Each case missed the width asked for in the width sweep (benchmarks/width_sweep.py) and
is checked here for the width, the flag and the bracket against an independent value."""

from __future__ import annotations

import importlib
import warnings

import pytest

from dpforge.accounting import epsilon
from dpforge.errors import DpforgeAccuracyWarning, LimitError
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled
from dpforge.mechanisms.combinators import flatten

evaluate_module = importlib.import_module("dpforge.accounting.prv.evaluate")
compose_module = importlib.import_module("dpforge.accounting.prv.compose")


def _meets_the_width(description, target: float):
    """``epsilon(description, target)`` with accuracy warnings raised as errors, checked to
    report the default width 1e-3 as reached and to have a bracket that narrow."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(description, target)
    assert result.accuracy["reached"]
    assert 0 < result.upper - result.lower <= 1e-3 * result.upper
    return result


def _whole_upper_chain(monkeypatch) -> None:
    """Compose every tilted chain whole, without the binomial split of one measure
    (:mod:`.tilt_split`): sigma = 0.6, q = 1e-6, T = 1e7 at delta = 1e-10 split meets the
    width on 2M points (``test_tilt_split``), and these tests are about the refinement of
    a chain whose window the split does not shorten (several distinct measures)."""
    tilt = importlib.import_module("dpforge.accounting.prv.tilt")
    monkeypatch.setattr(tilt, "split_composition", lambda *args, **kwargs: None)


def _recorded_evaluations(monkeypatch) -> list[dict]:
    """Every evaluation the refinement makes from now on, in order: its step, bound kinds,
    keyword options (``staged``, ``tilt_at``, ...) and grid size."""
    records: list[dict] = []
    original = evaluate_module.evaluate

    def recording(components, step, tail, kinds=("upper", "lower"), **options):
        out = original(components, step, tail, kinds, **options)
        records.append({"step": step, "kinds": tuple(kinds), "grid_size": out.grid_size, **options})
        return out

    monkeypatch.setattr(evaluate_module, "evaluate", recording)
    return records


def _overlaps_a_fixed_grid(description, target: float, step: float, result) -> None:
    """Cross-check: the certified bracket of ``epsilon(description, target, step=step)``
    (one fixed grid, no refinement; its accuracy warning ignored) overlaps ``result``'s."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpforgeAccuracyWarning)
        fixed = epsilon(description, target, step=step)
    assert fixed.lower <= result.upper and result.lower <= fixed.upper


def _without_early_direct(monkeypatch) -> None:
    """The probe of a law whose two chains the spread model stages, as before the early
    direct probe (:func:`evaluate._early_direct`): the staged lower chain, untilted,
    measures the window first.  That path still serves every call the early probe does
    not tilt; the tests of its levers force it where the early probe would take over."""
    monkeypatch.setattr(evaluate_module, "_early_direct", lambda *args, **kwargs: None)


def _pld_pessimistic(scale: float, rate: float, steps: int, target: float, interval: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pldm

    pld = pldm.from_laplace_mechanism(scale, sampling_prob=rate, value_discretization_interval=interval)
    return pld.self_compose(steps).get_epsilon_for_delta(target)


def test_staged_laplace_lower_chain_refines_its_chunk_grids(dpa):
    """Subsampled Laplace piles its loss up within q e^{-1/b} of its lowest atom, and the
    optimistic measure of a chunk's steps loses to first order in the chunk's grid there:
    b = 0.3, q = 1e-3, T = 1e5 came back [6.0646, 6.1654] (1.6 %, flagged).  Finer chunk
    grids close it; dp-accounting's pessimistic PLD is an upper estimate our lower bound
    must stay below."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(Composed([(PoissonSampled(Laplace(0.3), 1e-3), 100_000)]), 1e-5)
    assert result.accuracy["reached"]
    assert (result.upper - result.lower) / result.upper <= 1e-3
    assert result.lower <= _pld_pessimistic(0.3, 1e-3, 100_000, 1e-5, 1e-4)


@pytest.mark.slow
def test_atoms_far_below_one_nat_keep_a_margin_of_their_own_size(dpa):
    """b = 10, q = 1e-6: the loss's atoms sit at about +-1e-7 nats.  The optimistic
    grid was put 256 ulps of max(1, |atom|) = 5.7e-14 nats below the first atom, so every
    step's atom labels landed 5.7e-14 below their losses, 5.4e-9 over 1e5 steps, against an
    eps of 5.2e-6: the lower bound stopped at 5.17598e-6 whatever the grid (1.19e-3 wide,
    flagged).  The margin is now 256 ulps of the atoms themselves.  dp-accounting's
    pessimistic PLD (h = 2e-9) is an upper estimate our lower bound stays below."""
    result = _meets_the_width(Composed([(PoissonSampled(Laplace(10.0), 1e-6), 100_000)]), 1e-5)
    assert result.lower <= _pld_pessimistic(10.0, 1e-6, 100_000, 1e-5, 2e-9)


def test_large_delta_small_epsilon_cuts_the_truncation_tail(dpa):
    """At delta = 0.1 and eps = 0.0386 (b = 1, q = 1e-3, T = 1e5) the mass outside the
    windows (1e-4 delta) alone moved eps by 6.5e-4 of itself: the tail is cut once it
    takes more than a tenth of the width asked for."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(Composed([(PoissonSampled(Laplace(1.0), 1e-3), 100_000)]), 0.1)
    assert (result.upper - result.lower) / result.upper <= 1e-3
    assert result.lower <= _pld_pessimistic(1.0, 1e-3, 100_000, 0.1, 1e-4)


def test_tail_in_epsilon_reads_the_constant_over_the_slope():
    """|constant| / slope is how far the mass outside the window moves the profile's eps:
    shifting delta by that much and inverting again moves eps by about that much."""
    components = flatten(Composed([(PoissonSampled(Laplace(1.0), 0.01), 1000)]))
    target = 0.01
    evaluation = evaluate_module.evaluate(components, 2e-4, 1e-4 * target)
    effect = evaluate_module.tail_in_epsilon(evaluation, target)
    moved = []
    for profiles in (evaluation.upper, evaluation.lower):
        profile = max(profiles, key=lambda p: p.epsilon(target))
        eps = profile.epsilon(target)
        assert eps > 0
        moved.append(eps - profile.epsilon(target + abs(profile.constant)))
    assert effect > 0
    assert max(moved) == pytest.approx(effect, rel=0.05)


@pytest.mark.parametrize("rate, steps, expected", [(1e-6, 1, 1e-6), (0.01, 1000, 10.0), (1.0, 3, 3.0)])
def test_expected_hits_is_rate_times_count(rate, steps, expected):
    components = flatten(Composed([(PoissonSampled(Gaussian(1.0), rate), steps)]))
    assert evaluate_module.expected_hits(components) == pytest.approx(expected)


def test_staged_upper_chain_is_refined_by_the_grid_it_had():
    """q = 1e-4, sigma = 1, T = 1e7 at delta = 1e-10 is staged from the probe on, and its
    tilted upper window held 288k points where 20 untilted deviations price over 2^19:
    the upper chain was not refined, and the call stopped 1.6e-3 wide.  The RDP engine's
    certified upper bound must stay above our lower bound."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 1e-4), 10_000_000)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(description, 1e-10)
    assert result.accuracy["reached"]
    assert (result.upper - result.lower) / result.upper <= 1e-3
    assert result.lower <= epsilon(description, 1e-10, engine="rdp").upper


def _bounds(value: float):
    from types import SimpleNamespace

    return SimpleNamespace(epsilon=lambda delta: value)


def test_a_direction_whose_upper_meets_the_others_lower_is_dominated():
    """A tilted upper profile reports its floor (the certified lower end so far) for a
    direction whose eps lies below it, so its upper can equal the other direction's
    lower exactly: it cannot raise the maximum and is not composed again (Laplace
    b = 0.3, q = 1e-3, T = 1e5 at delta = 1e-15 recomposed it in every round)."""
    evaluation = evaluate_module.Evaluation(
        1e-3, (_bounds(11.3441), _bounds(11.2437)), (_bounds(11.2437), _bounds(7.3)), ("remove", "add")
    )
    settled = evaluation.dominated(1e-15)
    assert settled is not None and settled.directions == ("add",)
    apart = evaluate_module.Evaluation(
        1e-3, (_bounds(11.3441), _bounds(11.2438)), (_bounds(11.2437), _bounds(7.3)), ("remove", "add")
    )
    assert apart.dominated(1e-15) is None


# Two staged tiny-delta cases the width sweep flagged:
# * sigma = 0.3, q = 1e-3, T = 1e5 at delta = 1e-10: eps = 206.4 comes from 'remove'; 'add'
#   reaches at most T log(1/(1 - q)) = 100 nats, so the tilted evaluations at 207 report
#   +inf for it, and the maximum over directions kept the untilted 208.01 (0.8 % wide).
#   Each direction now keeps its tightest certified profile (upper below 207).
# * sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15 (eps = 0.00295, set by single hits eight
#   standard deviations out): the chunks' sums are tilted and lengthened in a round of
#   their own (lower 0.002844 -> 0.0029497), and the single-grid upper chain is refined by
#   its step model to 2^21 points (0.0029548 at 2^20); it stopped 3.7 % wide, then 2.7e-3,
#   then 8.2e-4.  With the FFT allowance at 4u (T + log2 n) max p (1u was exceeded 1.28
#   times elsewhere) the allowance is most of the width there: 2.2e-3, and it says so.
@pytest.mark.slow
def test_staged_tiny_delta_reaches_the_width():
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-3), 100_000)])
    result = _meets_the_width(description, 1e-10)
    assert result.upper < 207.0
    assert result.upper <= epsilon(description, 1e-10, engine="rdp").upper


@pytest.mark.slow
def test_rare_hits_at_tiny_delta_reach_the_width_with_a_long_double_power():
    """sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15 stopped 2.2e-3 wide with a warning:
    the double allowance c u T max p, summed over the entries above eps, held the upper
    end 1.3e-3 above the staged lower end however fine the grid.  The tilted power is now
    taken in long double (.compose.extended_precision) where that is more precise."""
    if compose_module._U_EXTENDED >= compose_module._U:
        pytest.skip("this platform's long double is no more precise than double")
    description = Composed([(PoissonSampled(Gaussian(1.0), 1e-6), 100_000)])
    result = _meets_the_width(description, 1e-15)
    assert result.lower < 0.0029500 < result.upper < 0.00296
    assert result.upper <= epsilon(description, 1e-15, engine="rdp").upper


@pytest.mark.slow
def test_rare_hits_go_on_to_the_largest_direct_grid_before_staging():
    """sigma = 1, q = 1e-6, T = 1e3 at delta = 1e-15 (1e-3 expected sampled steps): the
    direct lower chain had 0.0013939 on 760k points and the step model's next grid passed
    the direct limit, so the chain was staged, whose chunks certified only 0.0013796: it
    stopped 1.18e-3 wide.  A rare-hit law without atoms now goes on to the upper chain's
    grid limit first (0.0013942, the width met).  With the tilted power in long double
    where the double allowance cannot fit (.tilt.choose_tilt) a direct grid of 384k points
    now meets the width (0.19 s against 0.67 s).  Cross-checks: a certified bracket on a
    fixed grid must overlap it, and RDP's upper bound lies above it."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 1e-6), 1000)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(description, 1e-15)
    assert result.accuracy["reached"]
    assert result.lower > 0.00139  # not the staged chunks' 0.0013796
    assert 0 < result.upper - result.lower <= 1e-3 * result.upper
    _overlaps_a_fixed_grid(description, 1e-15, 2e-7, result)
    assert result.upper <= epsilon(description, 1e-15, engine="rdp").upper


def test_a_fixed_grid_is_tilted_at_the_bracket_its_first_tilted_evaluation_found():
    """epsilon(..., step=h) refines nothing, but its tilt was left at the middle of the
    untilted probe's bracket: sigma = 1, q = 1e-6, T = 1e3 at delta = 1e-15, h = 4e-7,
    tilted at the middle of [0.00122, 0.0118], came back 2.3e-2 wide where a refinement
    at that step had 1.5e-3.  The tilt now moves once to the tilted bracket's middle."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 1e-6), 1000)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpforgeAccuracyWarning)
        fixed = epsilon(description, 1e-15, step=4e-7)
    assert fixed.accuracy["tilted"] and fixed.accuracy["grid_step"] == 4e-7
    assert fixed.upper - fixed.lower <= 2e-3 * fixed.upper
    assert fixed.upper <= epsilon(description, 1e-15, engine="rdp").upper


def test_a_stalled_round_stops_at_the_bulk_resolution():
    """sigma = 1, q = 1e-3, T = 1e3 at delta = 1e-15: the lower chain stalls on grids
    coarser than a quarter of one step's bulk (1.51391 at h = 9.5e-4, 1.51402 at 4.5e-4)
    and the fitted order (0.5) sent the next round to 5.7e-5 (175k points); a stalled
    round now stops at bulk / 4 (2.3e-4), where the width is met on a quarter of the
    points."""
    components = flatten(Composed([(PoissonSampled(Gaussian(1.0), 1e-3), 1000)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 1e-3), 1000)]), 1e-15)
    assert result.accuracy["reached"]
    assert result.accuracy["grid_step"] >= 0.9 * evaluate_module._narrowest_bulk(components) / 4
    assert result.accuracy["grid_size"] < 80_000


def _pld_gaussian_pessimistic(sigma: float, rate: float, steps: int, target: float, interval: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pldm

    pld = pldm.from_gaussian_mechanism(sigma, sampling_prob=rate, value_discretization_interval=interval)
    return pld.self_compose(steps).get_epsilon_for_delta(target)


@pytest.mark.slow
def test_log_normal_bulk_is_staged_on_grids_the_width_needs(dpa, monkeypatch):
    """sigma = 0.3, q = 1e-6, T = 1e3: one step's bulk is 2.8e-7 nats wide, so the staged
    lower chain took the finest step one direct grid holds (2^20 points) and 2M-point bulk
    grids in every chunk, and at delta = 1e-10 the tilted upper chain was refined first,
    onto 8.7M points that moved it 1e-5, while the untilted chunks set the width: 5.4 and
    12 s against PLD's 1.8 s.  The staged step now comes from _STAGED_POINTS points
    and the upper chain is refined first only when its estimated error is half the width.
    dp-accounting's pessimistic PLD is an upper estimate our lower bound stays below."""
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 1000)])
    records = _recorded_evaluations(monkeypatch)
    for target in (1e-5, 1e-10):
        records.clear()
        result = _meets_the_width(description, target)
        assert result.lower <= _pld_gaussian_pessimistic(0.3, 1e-6, 1000, target, 1e-4)
        assert result.upper <= epsilon(description, target, engine="rdp").upper
        assert max(r["grid_size"] for r in records if r["kinds"] == ("lower",)) <= 4 * evaluate_module._STAGED_POINTS
        assert max(r["grid_size"] for r in records if r["kinds"] == ("upper",)) <= 2**21


def test_a_law_piled_near_its_atoms_falls_back_to_the_largest_direct_grid():
    """The LMO search's mechanism (Laplace with its scale uniform on a 9e-4 wide interval,
    q = 0.01, T = 1e3): its losses pile up near +-1/b, the lower chain converges at first
    order, and the refinement staged at 4.7e-3 after a 1.1e-5 direct grid that already
    resolved every one-step bulk: it stopped at [0.99608, 0.99945] (3.4e-3 wide, with a
    warning).  One direct grid at the upper chain's limit meets the width.  Cross-check:
    the RDP engine's certified upper bound lies above the bracket."""
    from dpforge.mechanisms.lmo import LMO

    mechanism = LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.8998921814218571, uniform_high=0.900792073603279)
    description = Composed([(PoissonSampled(mechanism, 0.01), 1000)])
    result = _meets_the_width(description, 1e-5)
    assert result.lower > 0.9985
    assert result.upper <= epsilon(description, 1e-5, engine="rdp").upper


def test_a_staged_probe_that_must_tilt_builds_no_untilted_chunks(monkeypatch):
    """sigma = 0.3, q = 1e-6, T = 1e3 at delta = 1e-10: the probe's direct bracket on the
    upper chain's grid already shows the composition must be tilted, so the staged lower
    chain's chunks are built tilted from the start; untilted, their round-off hid the
    single hits that set eps, and they served only as the tilt's floor (0.96 s of the
    call at delta = 1e-15).  The bracket still meets the width, below RDP's upper bound."""
    records = _recorded_evaluations(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 1000)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(description, 1e-10)
    assert any(r.get("staged") and r.get("tilt_at") is not None for r in records)
    assert not any(r.get("staged") and r.get("tilt_at") is None for r in records)
    assert result.accuracy["reached"]
    assert result.upper <= epsilon(description, 1e-10, engine="rdp").upper


def test_a_staged_probe_reports_its_staged_step(monkeypatch):
    """The staged probe that does not tilt (S1: q = 1e-4, sigma = 0.6, T = 1e6 at
    delta = 1e-5) composes a direct lower chain on the upper chain's grid beside the
    staged one; the result still reports the staged chain's step, which verify's prefix
    passes use as their grid (it reported the upper chain's, half of it, for one commit)."""
    records = _recorded_evaluations(monkeypatch)
    result = epsilon(Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 1_000_000)]), 1e-5)
    steps = [r["step"] for r in records if r.get("staged")]
    assert result.accuracy["reached"] and not result.accuracy["tilted"]
    assert steps and result.accuracy["grid_step"] == steps[-1]


def test_moving_to_staging_keeps_the_direct_upper_chain(dpa, monkeypatch):
    """A subsampled Laplace (b = 1, q = 1e-3, T = 1e5) at delta = 0.1: eps is small
    (0.0386), the direct lower chain stalls 1.1 % short on 720k points and the refinement
    moves to staged chunks.  The direct grid's upper chain was already within 2e-5 of its
    limit, but the staged rounds composed a looser staged upper chain every round, then
    refined the direct one onto 2M points for nothing (1.4 s against 0.25 s at delta =
    1e-5).  Now every staged round composes the lower chain only and the upper chain is
    not refined past the direct grid.  dp-accounting's pessimistic PLD (an upper
    estimate) lies above the lower bound."""
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(Composed([(PoissonSampled(Laplace(1.0), 1e-3), 100_000)]), 0.1)
    assert any(r.get("staged") for r in records)
    assert all(r["kinds"] == ("lower",) for r in records if r.get("staged"))
    assert max(r["grid_size"] for r in records if "upper" in r["kinds"]) <= 2**20
    assert result.lower <= _pld_pessimistic(1.0, 1e-3, 100_000, 0.1, 1e-4)


def test_a_staged_law_without_atoms_takes_finer_chunk_grids_before_a_shortfall():
    """sigma = 1, q = 1e-5, T = 1e5 (one expected sampled step) at delta = 1e-15: the
    staged lower chain's chunks set the width once the upper chain had converged, and
    finer chunk grids were tried only for laws with atoms, so the call stopped at
    [0.0368505, 0.0368949], 1.2e-3 wide (flagged).  One round on 4x finer chunk grids
    meets the width.  Both brackets are certified, so a run asked for a looser width
    must overlap this one; RDP's certified upper bound lies above it."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 1e-5), 100_000)])
    result = _meets_the_width(description, 1e-15)
    looser = epsilon(description, 1e-15, relative_accuracy=3e-3)
    assert result.lower <= looser.upper and looser.lower <= result.upper
    assert result.upper <= epsilon(description, 1e-15, engine="rdp").upper


@pytest.mark.slow
@pytest.mark.parametrize(
    "sigma, rate, target, reference_step",
    [(0.6, 1e-4, 1e-12, 1.8e-4), (0.3, 1e-6, 1e-5, 5e-5)],
)
def test_both_chains_staged_compose_the_upper_chain_on_one_grid(sigma, rate, target, reference_step, monkeypatch):
    """T = 1e7 rare heavy hits: the spread model (20 standard deviations) priced one grid
    at the error model's step over the limit, so both chains were staged, and the staged
    upper chain stayed far above the limit of its bound: sigma = 0.6, q = 1e-4 at
    delta = 1e-12 stopped at [9.40, 13.81] (32 % wide) after 27 s, sigma = 0.3, q = 1e-6 at
    1e-5 at [7.6163, 7.6463] (3.9e-3).  The staged evaluation measures the real window
    (22 and 26 nats), so the upper chain is now composed once on one grid and refined
    there: both meet the width.  Cross-checks: the certified bracket of a fixed direct
    grid overlaps it, and RDP's upper bound lies above it."""
    _without_early_direct(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(sigma), rate), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, target)
    assert records[0]["staged"] and any(record["kinds"] == ("upper",) and not record.get("staged") for record in records)
    _overlaps_a_fixed_grid(description, target, reference_step, result)
    assert result.upper <= epsilon(description, target, engine="rdp").upper


@pytest.mark.slow
def test_a_probe_whose_window_needs_a_coarser_grid_composes_no_staged_upper_chain(monkeypatch):
    """sigma = 0.3, q = 1e-6, T = 1e7 at delta = 1e-10: the window the staged lower chain
    measured did not fit one grid at half the error model's step, so the probe staged the
    upper chain as well (12.8 s of the call's 21.6 s), which the first round then
    superseded with a single grid of 0.2 s.  The probe now composes the upper chain on the
    finest single grid that holds the window, and no staged upper chain is built.
    Cross-checks: the bracket overlaps a fixed grid's certified one, and RDP's certified
    upper bound lies above it."""
    _without_early_direct(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-10)
    assert records[0]["staged"] and records[0]["kinds"] == ("lower",)
    assert records[1]["kinds"] == ("upper",) and not records[1].get("staged") and records[1].get("tilt_at") is None
    assert not any(record.get("staged") and "upper" in record["kinds"] for record in records)
    _overlaps_a_fixed_grid(description, 1e-10, 5e-5, result)
    assert result.upper <= epsilon(description, 1e-10, engine="rdp").upper


@pytest.mark.slow
def test_a_single_grid_upper_chain_short_of_the_width_is_aimed_again(monkeypatch):
    """sigma = 0.3, q = 1e-6, T = 1e7 at delta = 1e-15, where the probe's single upper grid
    passes a named limit (forced here) and the probe stages the upper chain instead: the
    single-grid upper chain the first round takes was tilted at the middle of the staged
    bracket [24.7, 64.3], far above eps, and stopped at 25.90 against a lower end of
    24.87 (4 % wide).  Short of the width, it is composed once more, tilted at the middle
    of the bracket reached and kept from its lower end: the width is met.  Cross-check:
    RDP's upper bound lies above it."""
    _without_early_direct(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    recording = evaluate_module.evaluate
    refused = []

    def refusing_the_probe_upper_grid(components, step, tail, kinds=("upper", "lower"), **options):
        if not refused and tuple(kinds) == ("upper",) and not options.get("staged"):
            refused.append(step)
            raise LimitError("the probe's single upper grid (refused by the test)")
        return recording(components, step, tail, kinds, **options)

    monkeypatch.setattr(evaluate_module, "evaluate", refusing_the_probe_upper_grid)
    result = _meets_the_width(description, 1e-15)
    assert refused and any(record.get("staged") and record["kinds"] == ("upper",) for record in records)
    upper_chains = [record for record in records if record["kinds"] == ("upper",) and not record.get("staged")]
    assert upper_chains[-1]["tilt_at"] < 0.5 * (upper_chains[0]["tilt_at"] + result.upper)
    assert 24.8 < result.lower and result.upper < 25.0
    assert result.upper <= epsilon(description, 1e-15, engine="rdp").upper


@pytest.mark.slow
def test_a_last_resort_that_pays_is_followed_by_finer_chunk_grids(monkeypatch):
    """sigma = 0.3, q = 1e-5, T = 1e7 at delta = 1e-10: with the upper chain converged,
    the last resort (4x finer chunk grids, once) moved the staged lower end 50.037 ->
    50.100, and the call stopped there, [50.1003, 50.2128] (2.2e-3 wide, flagged).  A
    last resort that pays a quarter of the width or more is now followed by finer chunk
    grids aimed at the width while they pay: the width is met.  Cross-check: RDP's
    certified upper bound lies above it."""
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-5), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-10)
    staged_lower = [record for record in records if record.get("staged") and record["kinds"] == ("lower",)]
    assert len(staged_lower) >= 4  # the probe's, the second round's, the last resort's, one more
    assert 50.16 < result.lower and result.upper < 50.22
    assert result.upper <= epsilon(description, 1e-10, engine="rdp").upper


def test_a_staged_probe_composes_the_upper_chain_on_one_grid_where_the_measured_window_fits(monkeypatch):
    """sigma = 0.6, q = 1e-4, T = 1e7 at delta = 1e-5: the spread model priced one grid at
    half the error model's step over the limit, so the probe staged both chains, and the
    staged upper chain's chunks took most of the call (3.1 s).  The staged lower chain
    measures the window (22 nats): one grid at half the error model's step holds it, so
    the probe composes the upper chain there and builds no staged upper chunks (0.6 s).
    Cross-check: a fixed direct grid's certified bracket overlaps it."""
    _without_early_direct(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-5)
    assert records[0]["staged"] and records[0]["kinds"] == ("lower",)
    assert not any(record.get("staged") and "upper" in record["kinds"] for record in records)
    _overlaps_a_fixed_grid(description, 1e-5, 5e-5, result)


def test_a_tilted_probe_past_a_named_limit_leaves_the_certified_bracket_flagged(monkeypatch):
    """sigma = 1.18, q = 1.1e-9, T = 22 at delta = 1.8e-267 (the domain sweep): the probe's
    tilted evaluation asked for a window of 2.6e8 points and its LimitError ended the
    call, where it had answered [0, 10.61] (flagged).  Such a failure (forced here, at
    delta = 1e-12, where the probe tilts) now leaves the untilted probe's certified
    bracket, marked short with a warning, and refines no further; it overlaps the
    bracket of the call that tilts."""
    description = Composed([(PoissonSampled(Gaussian(1.1), 0.004), 1000)])
    tilted = epsilon(description, 1e-12)
    assert tilted.accuracy["tilted"]
    original = evaluate_module._evaluate_chains
    calls = []

    def failing(components, step, tail, staged, upper_step, **options):
        calls.append(options.get("tilt_at"))
        if options.get("tilt_at") is not None:
            raise LimitError("the FFT window of the composition needs 2.61e+08 grid points (test)")
        return original(components, step, tail, staged, upper_step, **options)

    monkeypatch.setattr(evaluate_module, "_evaluate_chains", failing)
    with pytest.warns(DpforgeAccuracyWarning, match="relative width"):
        result = epsilon(description, 1e-12)
    assert calls == [None, calls[1]] and calls[1] is not None  # the probe, its tilted try
    assert not result.accuracy["reached"] and not result.accuracy["tilted"]
    assert result.accuracy["refinements"] == 0
    assert result.lower <= tilted.upper and tilted.lower <= result.upper
    assert result.upper - result.lower > tilted.upper - tilted.lower


@pytest.mark.slow
def test_an_upper_chain_short_of_the_width_is_refined_past_two_million_points(monkeypatch):
    """sigma = 0.6, q = 1e-6, T = 1e7 at delta = 1e-10 (the corner sweep's one miss): its
    tilted upper window spans 13.6 nats, and the upper chain was refined only up to 2^21
    points (it reached 5.0M through the window) and the call stopped 1.24e-3 wide,
    flagged.  Where the loop's levers are spent and the width is still short, the chain
    is composed once more on up to ``_UPPER_CHAIN_LIMIT`` points (15.6M here), and the
    width is met.  Under a memory budget that cannot hold that grid the call ends where
    it did, flagged and certified (never a silent shortfall).  Cross-checks: the two
    brackets overlap, and RDP's upper bound lies above both."""
    _whole_upper_chain(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.6), 1e-6), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-10)
    assert max(record["grid_size"] for record in records if record["kinds"] == ("upper",)) > 8 * 2**20
    with pytest.warns(DpforgeAccuracyWarning, match="relative width"):
        limited = epsilon(description, 1e-10, memory_budget=1.5 * 2**30)
    assert not limited.accuracy["reached"]
    assert limited.lower <= result.upper and result.lower <= limited.upper
    assert max(result.upper, limited.upper) <= epsilon(description, 1e-10, engine="rdp").upper


@pytest.mark.slow
def test_the_upper_chain_goes_past_its_limit_once_the_lower_chain_is_not_what_sets_the_width(monkeypatch):
    """sigma = 0.6, q = 1e-6, T = 1e7 at delta = 1e-10: with the upper chain at its grid
    limit, the staged lower chain took its last resort (4x finer chunk grids: 0.177840 ->
    0.177963) and then a round aimed at the whole width (2.5x finer again, 1.5 s for
    0.177966), though its first-order error left (4e-5) was a fifth of the width and the
    upper chain set the rest (0.178188 -> 0.178036 past its limit).  The chain past its
    limit now comes before any chunk round finer than the last resort, and the width is
    met with no such round.  Cross-check: RDP's upper bound lies above the bracket."""
    _whole_upper_chain(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.6), 1e-6), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-10)
    past_limit = [i for i, record in enumerate(records) if record["kinds"] == ("upper",) and record["grid_size"] > 8 * 2**20]
    assert past_limit, "the upper chain was never composed past its limit"
    scales = [record["chunks"].fine_scale for record in records if "chunks" in record and record["kinds"] == ("lower",)]
    assert max(scales) <= evaluate_module._LAST_RESORT_SCALE
    assert result.upper <= epsilon(description, 1e-10, engine="rdp").upper


@pytest.mark.slow
def test_an_upper_chain_is_not_composed_twice_on_one_grid_after_the_loop(monkeypatch):
    """sigma = 0.6, q = 1e-6, T = 1e7 at delta = 1e-10, asked for 3e-4 with the step past
    the limit allowed where the call is up to 4x short: after the loop the upper chain,
    left at its limit, is aimed again at half its step (10M points), and the call is still
    short.  The step past the limit then took the step model's step, clipped to that same
    half, and composed the same 10M-point grid a second time (1.3 s) for the same bracket;
    a grid no finer than the one just composed is now skipped, so the call composes one
    grid past the limit.  The bracket is certified and flagged, and RDP's upper bound lies
    above it."""
    _whole_upper_chain(monkeypatch)
    description = Composed([(PoissonSampled(Gaussian(0.6), 1e-6), 10_000_000)])
    monkeypatch.setattr(evaluate_module, "_PAST_LIMIT_SHORTFALL", 4.0)
    records = _recorded_evaluations(monkeypatch)
    with pytest.warns(DpforgeAccuracyWarning, match="relative width"):
        result = epsilon(description, 1e-10, relative_accuracy=3e-4)
    past_limit = [record for record in records if record["kinds"] == ("upper",) and record["grid_size"] > 8 * 2**20]
    assert len(past_limit) == 1
    assert not result.accuracy["reached"] and result.upper - result.lower > 3e-4 * result.upper
    assert 0.17 < result.lower <= result.upper <= epsilon(description, 1e-10, engine="rdp").upper


@pytest.mark.slow
@pytest.mark.parametrize(
    "sigma, rate, target, fixed_step",
    [(0.6, 1e-5, 1e-10, 2e-5), (0.45, 1e-4, 1e-5, 5e-5)],
)
def test_a_probe_that_must_tilt_builds_no_untilted_staged_chunks(sigma, rate, target, fixed_step, monkeypatch):
    """T = 1e7, both chains priced over the limit by the spread model: the probe built
    the staged lower chain untilted to measure the window, and at delta = 1e-10 (sigma =
    0.6, q = 1e-5) those chunks gave only the tilt's floor (1.372 of 1.521, 0.53 s of
    2.2 s).  The window is now measured by the upper chain alone on one grid (the first
    evaluation: upper only, untilted, not staged); where the upper chain on the grid
    that holds it shows the call must be tilted, the lower chain is composed there too
    and every staged chunk is built tilted, at their first
    length in the probe (sigma = 0.45, q = 1e-4 at 1e-5, 1,000 expected sampled steps:
    chunks built long at once stopped short of the untilted ones).  The width is met;
    a fixed grid's certified bracket overlaps it and RDP's upper bound lies above it."""
    description = Composed([(PoissonSampled(Gaussian(sigma), rate), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, target)
    assert result.accuracy["tilted"]
    assert records[0]["kinds"] == ("upper",) and not records[0].get("staged") and records[0].get("tilt_at") is None
    # both chains direct on one finer grid: the upper chain, then (tilting) the lower one
    assert [record["kinds"] for record in records[1:3]] == [("upper",), ("lower",)]
    assert records[1]["step"] == records[2]["step"] < records[0]["step"] and not records[2].get("staged")
    staged = [record for record in records if record.get("staged")]
    chunks = [record.get("chunks", evaluate_module.ChunkOptions()) for record in staged]
    assert staged and all(record.get("tilt_at") is not None for record in staged)
    assert all(options.tilt for options in chunks) and chunks[0].length_scale == 1.0
    _overlaps_a_fixed_grid(description, target, fixed_step, result)
    assert result.upper <= epsilon(description, target, engine="rdp").upper


@pytest.mark.slow
def test_chunk_rounds_after_a_direct_probe_gauge_the_staged_chain_itself(monkeypatch):
    """sigma = 0.3, q = 1e-5, T = 1e7 at delta = 1e-5: after the early direct probe the
    bracket's lower end is the direct chain's (31.2325), above the staged chain's own
    (31.102, then 31.228 on 4x finer chunk grids).  Gauged on the bracket, the last
    resort gained nothing, the chunk rounds stopped, and the call ended 1.1e-3 wide
    (flagged); gauged on the chain itself it goes on to finer grids and meets the width
    (31.2424).  RDP's upper bound lies above it."""
    description = Composed([(PoissonSampled(Gaussian(0.3), 1e-5), 10_000_000)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-5)
    assert records[0]["kinds"] == ("upper",) and not records[0].get("staged")
    # the direct probe tilted: both chains direct on one grid, whose lower end the
    # bracket keeps above the staged chain's
    assert [record["kinds"] for record in records[1:3]] == [("upper",), ("lower",)]
    assert records[1]["step"] == records[2]["step"] and not records[2].get("staged")
    scales = [record.get("chunks", evaluate_module.ChunkOptions()).fine_scale for record in records if record.get("staged")]
    assert max(scales) > evaluate_module._LAST_RESORT_SCALE
    assert result.upper <= epsilon(description, 1e-5, engine="rdp").upper


def test_a_direct_probe_that_does_not_tilt_hands_its_upper_chain_to_the_probe(monkeypatch):
    """sigma = 0.567, q = 0.21, T = 1.2M at delta = 1e-5 (the random sweep; eps near
    157,000): both chains staged, and the direct probe finds no tilt needed.  It had
    composed both chains on its direct grid, and the probe then composed the upper chain
    again on a grid 1 % finer (the staged lower chain's window): 2.4x the call's time
    without the direct probe.  Now only the upper chain is composed there, and the probe
    takes it: after the window's and that one, the only evaluation is the staged lower
    chain.  Cross-check: the bracket overlaps the one the probe gives without the direct
    probe (each certified), and both meet the width."""
    description = Composed([(PoissonSampled(Gaussian(0.5672349161773901), 0.21183911897067656), 1_198_807)])
    records = _recorded_evaluations(monkeypatch)
    result = _meets_the_width(description, 1e-5)
    assert not result.accuracy["tilted"]
    assert [record["kinds"] for record in records] == [("upper",), ("upper",), ("lower",)]
    assert records[1]["step"] < records[0]["step"] and records[2].get("staged")
    _without_early_direct(monkeypatch)
    before = _meets_the_width(description, 1e-5)
    assert before.lower <= result.upper and result.lower <= before.upper
