"""Fixtures shared by the prv engine's tests."""

from __future__ import annotations

import importlib
from typing import Callable

import mpmath as mp
import numpy as np
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


@pytest.fixture
def exact_cyclic_power() -> Callable:
    """``power(measure, count, size)``: the ``count``-fold cyclic convolution of a grid
    measure as :func:`dpforge.accounting.prv.compose.fft_window` places it (centred on its
    mean index) on ``size`` points, by an exact DFT in mpmath (40 digits)."""
    compose = importlib.import_module("dpforge.accounting.prv.compose")  # the package re-exports a function of this name

    def power(measure, count: int, size: int) -> np.ndarray:
        row = np.zeros(size)
        compose._place(row, measure.masses, measure.first_index - int(round(measure.mean_index())))
        with mp.workdps(40):
            occupied = [(j, mp.mpf(float(row[j]))) for j in np.flatnonzero(row)]
            roots = [mp.expjpi(-2 * mp.mpf(k) / size) for k in range(size)]
            spectrum = [mp.fsum(value * roots[(j * f) % size] for j, value in occupied) ** count for f in range(size)]
            return np.array(
                [float(mp.re(mp.fsum(spectrum[f] * mp.conj(roots[(f * k) % size]) for f in range(size))) / size) for k in range(size)]
            )

    return power


@pytest.fixture(scope="module")
def mixed_windows() -> dict:
    """The composed windows ('upper' and 'lower') of 300 subsampled Gaussian and 200
    subsampled Laplace steps on a grid of 2e-3 (remove direction, tail 1e-12): the
    profiles that verify's row readings are checked against."""
    from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled, flatten

    components = importlib.import_module("dpforge.accounting.prv.components")
    compose = importlib.import_module("dpforge.accounting.prv.compose")
    parts = flatten(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 300), (PoissonSampled(Laplace(2.0), 0.02), 200)]))
    measures = components.discretise_all(parts, "remove", 2e-3, 1e-12, ("upper", "lower"))
    return {kind: compose.compose(measures[kind], 1e-12) for kind in ("upper", "lower")}
