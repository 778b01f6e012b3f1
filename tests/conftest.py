"""Shared test fixtures.  Nothing heavy happens at import time: the optional peer
accountants (dp-accounting, prv-accountant) are imported inside fixtures, so a test that
needs one is skipped, not errored, when it is not installed."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def dpa():
    """The ``dp_accounting`` package (skips the test when it is not installed)."""
    return pytest.importorskip("dp_accounting")


@pytest.fixture(scope="session")
def prv():
    """The ``prv_accountant`` package (skips the test when it is not installed)."""
    return pytest.importorskip("prv_accountant")
