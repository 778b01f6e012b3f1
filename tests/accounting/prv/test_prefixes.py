"""Prefix products: epsilon after each part from one composition, each row certified."""

from __future__ import annotations

import pytest

from dpforge.accounting import epsilon
from dpforge.accounting.prv.prefixes import epsilon_prefixes
from dpforge.mechanisms import LMO, Composed, Gaussian, Laplace, PoissonSampled

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
