"""Shared test fixtures.  Nothing heavy happens at import time: the optional peer
accountants (dp-accounting, prv-accountant) are imported inside fixtures, so a test that
needs one is skipped, not errored, when it is not installed."""

from __future__ import annotations

import math

import pytest


@pytest.fixture(scope="session")
def dpa():
    """The ``dp_accounting`` package (skips the test when it is not installed)."""
    return pytest.importorskip("dp_accounting")


@pytest.fixture(scope="session")
def prv():
    """The ``prv_accountant`` package (skips the test when it is not installed)."""
    return pytest.importorskip("prv_accountant")


def assert_bracket(lower: float, exact: float, upper: float, what: str, slack: float = 0.0) -> None:
    """Assert lower <= exact <= upper, up to an absolute ``slack``, with a useful message."""
    assert math.isfinite(lower) and math.isfinite(upper), f"{what}: non-finite bounds [{lower}, {upper}]"
    assert lower - slack <= exact <= upper + slack, (
        f"{what}: exact value {exact!r} outside certified [{lower!r}, {upper!r}] "
        f"(below lower by {lower - exact:.3g}, above upper by {exact - upper:.3g}, slack {slack:.3g})"
    )


@pytest.fixture(scope="session")
def bracket():
    """The :func:`assert_bracket` helper, shared as a fixture (tests are not a package)."""
    return assert_bracket
