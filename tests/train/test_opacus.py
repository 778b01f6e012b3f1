"""The Opacus accountant interface, with and without Opacus installed."""

from __future__ import annotations

import math

import pytest

from dpforge.accounting import epsilon
from dpforge.train.opacus import DpforgeAccountant
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled


def _history(accountant):
    for _ in range(100):
        accountant.step(noise_multiplier=1.0, sample_rate=0.01)
    for _ in range(50):
        accountant.step(noise_multiplier=0.8, sample_rate=0.02)


def test_agrees_with_dpforge_on_the_same_history():
    accountant = DpforgeAccountant()
    assert accountant.get_epsilon(1e-5) == 0.0
    _history(accountant)
    assert accountant.history == [(1.0, 0.01, 100), (0.8, 0.02, 50)] and len(accountant) == 150
    direct = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 100), (PoissonSampled(Gaussian(0.8), 0.02), 50)]), 1e-5)
    assert accountant.get_epsilon(1e-5) == pytest.approx(direct.upper, rel=1e-12)
    restored = DpforgeAccountant()
    restored.load_state_dict(accountant.state_dict())
    assert restored.history == accountant.history
    accountant.step(noise_multiplier=0.0, sample_rate=0.01)
    assert math.isinf(accountant.get_epsilon(1e-5))
    with pytest.raises(ValueError, match="sample_rate"):
        accountant.step(noise_multiplier=1.0, sample_rate=1.5)


def test_opacus_registration_and_agreement():
    opacus = pytest.importorskip("opacus")
    from opacus.accountants import create_accountant

    accountant = create_accountant("dpforge")
    assert isinstance(accountant, DpforgeAccountant) and isinstance(accountant, opacus.accountants.IAccountant)
    engine = opacus.PrivacyEngine(accountant="dpforge")
    assert engine.accountant.mechanism() == "dpforge"
    _history(accountant)
    # Opacus' own PRV accountant on the same history is an estimate; ours is certified
    theirs = create_accountant("prv")
    _history(theirs)
    ours = accountant.get_epsilon_result(1e-5)
    assert ours.lower * 0.99 <= theirs.get_epsilon(1e-5) <= ours.upper * 1.01


@pytest.mark.parametrize(
    "history, match",
    [
        ([(-1.0, 0.01, 3)], r"history'\]\[0\] noise_multiplier"),
        ([(1.0, 0.01, 3), (1.0, 1.5, 3)], r"history'\]\[1\] sample_rate"),
        ([(1.0, 0.01, 0)], r"steps must be an integer >= 1"),
        ([(1.0, 0.01, 2.5)], r"steps must be an integer >= 1"),
        ([(1.0, 0.01)], r"must be \(noise_multiplier, sample_rate, steps\)"),
        ([(float("nan"), 0.01, 3)], r"noise_multiplier"),
    ],
)
def test_load_state_dict_checks_every_entry(history, match):
    accountant = DpforgeAccountant()
    with pytest.raises(ValueError, match=match):
        accountant.load_state_dict({"history": history, "mechanism": "dpforge"})
    assert accountant.history == []
