"""Fixtures shared by the prv engine's tests."""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture
def extended_flags(monkeypatch) -> list[bool]:
    """The ``extended`` argument of every tilted composition made during the test, in
    order (a spy on :func:`dpforge.accounting.prv.evaluate`'s ``compose_tilted``)."""
    evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")  # the package re-exports a function of this name
    flags: list[bool] = []
    original = evaluate.compose_tilted

    def spy(measures, tail, theta, floor, extended=False):
        flags.append(extended)
        return original(measures, tail, theta, floor, extended)

    monkeypatch.setattr(evaluate, "compose_tilted", spy)
    return flags
