"""verify's cumulative rows: as tight as asked, or marked (never a silent shortfall).

Rows before the last are read off the whole plan's grid. A plan's short first phases have
a small epsilon, which that grid resolves less finely: the warm-up row of
examples/plans/within_budget.toml came back 1.26e-3 wide at an accuracy of 1e-3, with
nothing saying so.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from dpforge.accounting import epsilon
from dpforge.accounting.prv import prefixes
from dpforge.budget.plan import load_plan
from dpforge.budget.verify import verify_plan
from dpforge.cli.main import main
from dpforge.cli.schema import validate
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


def test_rows_last_gives_the_whole_plans_verdict_and_upper_bound_without_the_table():
    """``rows="last"``: one row, the whole plan's epsilon; the same upper bound and
    verdict as the table's last row, and a lower bound no higher than the table's (which
    also takes the earlier rows' lower bounds)."""
    plan = load_plan(EXAMPLES / "within_budget.toml")
    every = verify_plan(plan)
    last = verify_plan(plan, rows="last")
    assert len(every.phases) == len(plan.phases) > 1 and len(last.phases) == 1
    row = last.phases[0]
    assert (row.index, row.label, row.steps) == (every.phases[-1].index, every.phases[-1].label, every.phases[-1].steps)
    assert last.epsilon_upper == every.epsilon_upper == row.epsilon_upper
    assert last.within_budget == every.within_budget
    assert last.epsilon_lower <= every.epsilon_lower <= every.epsilon_upper
    assert row.reached and last.accuracy_summary()["reached"]
    assert last.to_dict()["rows"] == "last" and every.to_dict()["rows"] == "every"


def test_rows_must_be_every_or_last():
    plan = load_plan(EXAMPLES / "within_budget.toml")
    with pytest.raises(ValueError, match="rows must be one of 'every', 'last', got 'some'"):
        verify_plan(plan, rows="some")


@pytest.mark.parametrize("plan", [None, "within_budget.toml", {"delta": 1e-5}])
def test_verify_takes_a_plan(plan):
    # an AttributeError ('... has no attribute phases') before
    with pytest.raises(ValueError, match="plan must be a Plan"):
        verify_plan(plan)


def test_verify_rows_last_on_the_command_line(capsys):
    over = str(EXAMPLES / "over_budget.toml")
    assert main(["verify", over, "--rows", "last", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert validate(data) == [] and data["rows"] == "last" and len(data["phases"]) == 1
    assert main(["verify", over, "--json"]) == 1
    table = json.loads(capsys.readouterr().out)
    assert table["rows"] == "every" and len(table["phases"]) > 1
    assert data["epsilon_upper"] == table["epsilon_upper"] == data["phases"][0]["epsilon_upper"]
    assert main(["verify", over, "--rows", "some"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("dpforge: error: ") and "--rows" in err and "'last'" in err
