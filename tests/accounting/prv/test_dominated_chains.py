"""A direction that another dominates gets no lower chain (:func:`dpforge.accounting.prv.evaluate.evaluate`).

For an epsilon query the bracket is the maximum over directions of each bound, so a
direction whose certified upper eps is at or below another's certified lower eps cannot
raise the lower bound: its lower chain (a quarter of every probe of a subsampled
Gaussian, half of a staged lower evaluation) is skipped.  The tests check that it is
skipped, that the bracket is the one composed with every chain, and that the skipped
direction's lower bound is the trivial one.
"""

from __future__ import annotations

import importlib

import pytest

from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled
from dpforge.mechanisms.combinators import flatten


def _modules():
    return importlib.import_module("dpforge.accounting.prv.evaluate"), importlib.import_module("dpforge.accounting.prv.engine")


def _lower_chains(monkeypatch) -> list[str]:
    """The directions of every lower-chain discretisation made from now on."""
    evaluate, _ = _modules()
    seen: list[str] = []
    original = evaluate.discretise_all

    def spy(components, direction, step, tail, kinds, **options):
        if "lower" in kinds:
            seen.append(direction)
        return original(components, direction, step, tail, kinds, **options)

    monkeypatch.setattr(evaluate, "discretise_all", spy)
    return seen


def test_an_evaluation_at_delta_skips_the_dominated_lower_chain(monkeypatch):
    evaluate, _ = _modules()
    components = flatten(Composed([(PoissonSampled(Gaussian(0.8 + 0.02 * i), 0.01), 10) for i in range(20)]))
    delta, step, tail = 1e-5, 1e-3, 1e-9
    seen = _lower_chains(monkeypatch)
    every = evaluate.evaluate(components, step, tail)
    assert sorted(seen) == ["add", "remove"]
    seen.clear()
    skipping = evaluate.evaluate(components, step, tail, delta=delta)
    assert seen == ["remove"]
    assert skipping.epsilon(delta) == every.epsilon(delta)
    add = skipping.directions.index("add")
    assert skipping.lower[add].grid_size == 0 and skipping.lower[add].epsilon(delta) == 0.0
    assert skipping.upper[add].epsilon(delta) <= skipping.lower[1 - add].epsilon(delta)
    # the same directions in the same order: only the skipped lower profile differs
    assert skipping.directions == every.directions
    assert skipping.upper[add].epsilon(delta) == every.upper[add].epsilon(delta)


def test_a_lower_chain_is_kept_wherever_its_direction_may_set_the_maximum(monkeypatch):
    """A lower-only evaluation goes by ``upper_bounds`` (the upper chains of another
    grid): a direction whose bound lies above the best lower eps certified keeps its
    lower chain, one at or below it gets none, and one with no bound given keeps it."""
    evaluate, _ = _modules()
    components = flatten(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 200)]))
    delta, step, tail = 1e-5, 1e-3, 1e-9
    seen = _lower_chains(monkeypatch)
    both = evaluate.evaluate(components, step, tail, kinds=("lower",), delta=delta, upper_bounds={})
    assert sorted(seen) == ["add", "remove"]
    floor = both.lower[both.directions.index("remove")].epsilon(delta)
    for ceiling, expected in ((1.01 * floor, ["remove", "add"]), (floor, ["remove"]), (0.5 * floor, ["remove"])):
        seen.clear()
        found = evaluate.evaluate(
            components, step, tail, kinds=("lower",), delta=delta, upper_bounds={"remove": 2 * floor, "add": ceiling}
        )
        assert seen == expected
        assert max(profile.epsilon(delta) for profile in found.lower) == floor


@pytest.mark.parametrize(
    "description, delta",
    [
        (Composed([(PoissonSampled(Gaussian(0.6), 1e-4), 100_000)]), 1e-5),
        (Composed([(PoissonSampled(Gaussian(1.0), 1e-3), 10_000)]), 1e-12),
        (Composed([(PoissonSampled(Laplace(2.0), 0.01), 1_000)]), 1e-10),
    ],
    ids=["gaussian-staged", "gaussian-tilted", "laplace"],
)
def test_skipping_dominated_lower_chains_leaves_the_bracket_as_it_was(monkeypatch, description, delta):
    """The whole refinement (probe, tilted and staged rounds) with the skip, and with
    every chain composed (evaluate called as a delta query would): the same bracket,
    from fewer lower chains."""
    evaluate, engine = _modules()
    seen = _lower_chains(monkeypatch)
    skipping = engine.epsilon(description, delta)
    skipped_count = len(seen)
    seen.clear()
    original = evaluate.evaluate

    def every_chain(components, step, tail, *args, **options):
        options.pop("delta", None)
        options.pop("upper_bounds", None)
        return original(components, step, tail, *args, **options)

    monkeypatch.setattr(evaluate, "evaluate", every_chain)
    every = engine.epsilon(description, delta)
    assert (skipping.lower, skipping.upper) == (every.lower, every.upper)
    assert skipped_count < len(seen)
