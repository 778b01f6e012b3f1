"""Sealed plans: totals and checksum; no byte-prefix of a written plan passes as a plan."""

from __future__ import annotations

import pytest

from dpforge.budget.integrity import check_plan_file, check_plan_text, load_checked_plan
from dpforge.budget.ledger import Ledger
from dpforge.budget.plan import PlanError, load_plan, parse_plan, plan_to_toml
from dpforge.errors import InputFileError
from dpforge.mechanisms import Gaussian, Laplace


def _three_phase_plan(tmp_path):
    ledger = Ledger()
    ledger.record(Gaussian(1.1), 0.01, steps=2000)
    ledger.record(Gaussian(0.9), 0.02, steps=595)
    ledger.record(Laplace(3.0), 1.0, steps=5)
    path = tmp_path / "run.toml"
    plan = ledger.to_plan(path, delta=1e-5, budget_epsilon=8.0)
    return path, plan


def test_written_plan_is_sealed_and_reads_back(tmp_path):
    path, plan = _three_phase_plan(tmp_path)
    text = path.read_text()
    assert text.startswith("# dpforge-plan-integrity: v1 phases=3 steps=2600\n")
    assert load_plan(path) == plan == load_checked_plan(path)
    assert check_plan_file(path, plan) is True
    assert parse_plan(plan_to_toml(plan, seal=False)) == plan


def test_every_byte_prefix_is_refused(tmp_path):
    """Each of the file's byte-prefixes either is no plan or fails the integrity check:
    none passes as a valid plan with fewer phases or steps."""
    path, plan = _three_phase_plan(tmp_path)
    raw = path.read_bytes()
    parsed = refused_by_check = 0
    for cut in range(len(raw)):
        try:
            text = raw[:cut].decode("utf-8")
            prefix_plan = parse_plan(text)
        except (PlanError, UnicodeDecodeError):
            continue
        parsed += 1  # TOML alone would accept this prefix...
        with pytest.raises(InputFileError):
            check_plan_text(text, prefix_plan)  # ...the integrity check does not
        refused_by_check += 1
    assert parsed == refused_by_check and parsed > 0  # the check matters: some prefixes parse
    assert check_plan_text(raw.decode("utf-8"), plan)


def test_edits_and_totals_are_refused_in_one_line(tmp_path):
    path, plan = _three_phase_plan(tmp_path)
    text = path.read_text()
    edited = text.replace("steps = 2000", "steps = 1000")
    with pytest.raises(InputFileError, match="checksum mismatch") as error:
        check_plan_text(edited, parse_plan(edited), "run.toml")
    assert "\n" not in str(error.value) and str(error.value).startswith("run.toml: ")
    fewer = parse_plan(text.replace("steps = 2000", "steps = 1000"))
    with pytest.raises(InputFileError, match="states 3 phases and 2600 steps"):
        check_plan_text(text, fewer)
    damaged_header = text.replace("phases=3", "phases=x", 1)
    with pytest.raises(InputFileError, match="damaged"):
        check_plan_text(damaged_header)


def test_hand_written_plans_still_work(tmp_path):
    path, plan = _three_phase_plan(tmp_path)
    body = plan_to_toml(plan, seal=False)
    hand = tmp_path / "hand.toml"
    hand.write_text(body)
    assert check_plan_file(hand, plan) is False
    assert load_checked_plan(hand) == plan


def test_verify_cli_refuses_a_truncated_plan_with_exit_2(tmp_path, capsys):
    from dpforge.cli.main import main as cli_main

    path, plan = _three_phase_plan(tmp_path)
    text = path.read_text()
    cut = text.index("[[phases]]", text.index("[[phases]]") + 1)  # only the first phase left
    truncated = tmp_path / "cut.toml"
    truncated.write_text(text[:cut])
    assert len(parse_plan(text[:cut]).phases) == 1  # TOML alone accepts it
    assert cli_main(["verify", str(truncated)]) == 2
    err = capsys.readouterr().err
    assert "checksum line is missing" in err and err.count("\n") == 1
