"""Ledger: recording, accounting, plan files for ``dpforge verify``, JSON."""

from __future__ import annotations

import pytest

from dpforge.accounting import epsilon
from dpforge.budget import load_plan, verify_plan
from dpforge.budget.ledger import Ledger
from dpforge.cli.main import main as cli_main
from dpforge.mechanisms import LMO, Composed, Gaussian, Laplace, PoissonSampled, PureDP


def _ledger() -> Ledger:
    ledger = Ledger()
    for _ in range(300):
        ledger.record(Gaussian(1.1), 0.01)
    ledger.record(Gaussian(0.9), 0.02, steps=200)
    ledger.record(Laplace(2.0), 0.01, steps=50)
    return ledger


def test_equal_steps_merge_and_accounting_matches_the_description():
    ledger = _ledger()
    assert len(ledger) == 3 and ledger.steps == 550
    assert ledger.entries[0].steps == 300
    direct = epsilon(
        Composed(
            [
                (PoissonSampled(Gaussian(1.1), 0.01), 300),
                (PoissonSampled(Gaussian(0.9), 0.02), 200),
                (PoissonSampled(Laplace(2.0), 0.01), 50),
            ]
        ),
        1e-5,
    )
    assert ledger.epsilon(1e-5).upper == pytest.approx(direct.upper, rel=1e-12)


def test_plan_round_trip_and_verify(tmp_path, capsys):
    ledger = _ledger()
    path = tmp_path / "run.toml"
    eps = ledger.epsilon(1e-5).upper
    plan = ledger.to_plan(path, delta=1e-5, budget_epsilon=eps * 1.01)
    assert load_plan(path) == plan
    report = verify_plan(plan)
    assert report.within_budget and report.epsilon_upper == pytest.approx(eps, rel=2e-3)
    assert cli_main(["verify", str(path)]) == 0
    ledger.to_plan(path, delta=1e-5, budget_epsilon=eps * 0.9)
    assert cli_main(["verify", str(path)]) == 1
    capsys.readouterr()


def test_json_round_trip_keeps_every_mechanism():
    ledger = _ledger()
    ledger.record(LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.5, uniform_high=2.0), 0.01, steps=10)
    again = Ledger.from_dict(ledger.to_dict())
    assert again.entries == ledger.entries
    assert Ledger.from_dict(__import__("json").loads(ledger.to_json())).entries == ledger.entries


def test_refusals():
    ledger = Ledger()
    with pytest.raises(ValueError, match="empty"):
        ledger.epsilon(1e-5)
    with pytest.raises(ValueError, match="sampling_rate"):
        ledger.record(Gaussian(1.0), 0.0)
    with pytest.raises(ValueError, match="steps"):
        ledger.record(Gaussian(1.0), 0.1, steps=0)
    with pytest.raises(ValueError, match="mechanism"):
        ledger.record("gaussian", 0.1)  # type: ignore[arg-type]
    vector = Ledger()
    vector.record(Laplace(2.0, dimension=3, norm="l2"), 0.01)
    with pytest.raises(ValueError, match="plan files hold scalar Laplace phases"):
        vector.to_plan(None, delta=1e-5)
    with pytest.raises(ValueError, match="entries\\[0\\]"):
        Ledger.from_dict({"entries": [{"mechanism": {"mechanism": "gaussian", "noise_multiplier": -1}, "sampling_rate": 0.1, "steps": 1}]})
    with pytest.raises(ValueError, match="mechanism: must be one of gaussian, laplace, pure, lmo"):
        Ledger.from_dict({"entries": [{"mechanism": {"mechanism": "cauchy"}, "sampling_rate": 0.1, "steps": 1}]})


def test_lmo_and_pure_phases_round_trip_through_plan_files(tmp_path):
    """Plan files hold every mechanism of the one serialisation: the written plan reads
    back to the same phases and accounts to the same certified bracket as the ledger."""
    ledger = Ledger()
    ledger.record(LMO(weights=(0.5, 0.0, 0.5), gamma_shape=3.0, gamma_scale=0.5, uniform_low=0.2, uniform_high=1.5), 0.01, steps=40)
    ledger.record(PureDP(0.05), 0.02, steps=10)
    ledger.record(Gaussian(1.2), 0.01, steps=30)
    path = tmp_path / "run.toml"
    plan = ledger.to_plan(path, delta=1e-5, budget_epsilon=5.0)
    assert load_plan(path) == plan
    assert [phase.noise for phase in plan.phases] == ["lmo", "pure", "gaussian"]
    assert plan.description() == ledger.description()
    from_file = verify_plan(load_plan(path)).epsilon_upper
    assert from_file == pytest.approx(ledger.epsilon(1e-5).upper, rel=1e-12)
