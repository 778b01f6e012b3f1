"""verify's cumulative rows: as tight as asked, or marked (never a silent shortfall).

Rows before the last are read off the whole plan's grid. A plan's short first phases have
a small epsilon, which that grid resolves less finely: the warm-up row of
examples/plans/within_budget.toml came back 1.26e-3 wide at an accuracy of 1e-3, with
nothing saying so.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from dpforge.accounting import epsilon
from dpforge.accounting.prv import prefixes
from dpforge.budget.plan import load_plan
from dpforge.budget.verify import verify_plan
from dpforge.cli.main import main
from dpforge.errors import DpforgeAccuracyWarning

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plans"


def test_a_few_wide_rows_are_refined_on_their_own():
    plan = load_plan(EXAMPLES / "within_budget.toml")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        report = verify_plan(plan)
    assert all(check.reached for check in report.phases)
    for check in report.phases:
        assert check.epsilon_upper - check.epsilon_lower <= 1e-3 * check.epsilon_upper
    # the first row is the first phase alone: its bracket must overlap epsilon()'s
    alone = epsilon(plan.phases[0].description(), plan.delta)
    first = report.phases[0]
    assert first.epsilon_lower <= alone.upper and alone.lower <= first.epsilon_upper


def test_rows_left_wider_than_asked_are_marked_and_counted(monkeypatch, capsys):
    monkeypatch.setattr(prefixes, "SEPARATE_ROWS", 0)
    plan = load_plan(EXAMPLES / "within_budget.toml")
    with pytest.warns(DpforgeAccuracyWarning, match=r"1 of 3 cumulative rows are wider than"):
        report = verify_plan(plan)
    assert [check.reached for check in report.phases] == [False, True, True]
    for check in report.phases:
        width = check.epsilon_upper - check.epsilon_lower
        assert check.reached == (width <= 1e-3 * check.epsilon_upper)
    assert [row["reached"] for row in report.to_dict()["phases"]] == [False, True, True]
    # the command says so under its table, and still passes on the last row
    assert main(["verify", str(EXAMPLES / "within_budget.toml")]) == 0
    assert "note: 1 of 3 rows are wider than the accuracy asked" in capsys.readouterr().out
