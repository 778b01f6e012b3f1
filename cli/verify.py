"""``dpforge verify PLAN.toml``: the certified epsilon of a plan file against its budget.

    dpforge verify plan.toml [--budget EPS] [--relative-accuracy R] [--json]

Prints the cumulative certified epsilon after each phase and exits with
:data:`~dpforge.cli.output.EXIT_OK` when it is within the budget (or there is no
budget) and :data:`~dpforge.cli.output.EXIT_OVER_BUDGET` when it is over.  ``--budget``
overrides the plan's ``[budget]``.  The plan and verify modules are imported when the
command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from dpforge.cli import flags
from dpforge.cli.output import EXIT_OK, EXIT_OVER_BUDGET, print_json, table

if TYPE_CHECKING:
    from dpforge.budget.verify import VerifyReport


def _plan_path(args: argparse.Namespace) -> str:
    positional, flag = args.plan_file, args.plan
    if positional is not None and flag is not None and positional != flag:
        raise flags.CliError(f"give the plan file once (positionally or with --plan), got {positional!r} and {flag!r}")
    path = positional if positional is not None else flag
    if path is None:
        raise flags.CliError("a plan file is required: dpforge verify PLAN.toml (or --plan PLAN.toml)")
    return path


def _print_report(path: str, report: VerifyReport) -> None:
    budget = "none" if report.budget_epsilon is None else f"epsilon <= {report.budget_epsilon:.6g}"
    print(table([("plan", path), ("delta", report.delta), ("budget", budget), ("engine", report.engine)]))
    print()
    rows = [(check.label, check.steps, check.epsilon_upper, check.epsilon_lower) for check in report.phases]
    print(table(rows, header=("phase", "steps", "cumulative epsilon (certified)", "lower")))
    print()
    if report.within_budget is None:
        print(f"certified epsilon <= {report.epsilon_upper:.6g} (no budget given)")
    elif report.within_budget:
        print(f"WITHIN BUDGET: certified epsilon {report.epsilon_upper:.6g} <= budget {report.budget_epsilon:.6g}")
    else:
        print(f"OVER BUDGET: certified epsilon {report.epsilon_upper:.6g} > budget {report.budget_epsilon:.6g}")


def _command_verify(args: argparse.Namespace) -> int:
    from dpforge.budget.integrity import load_checked_plan
    from dpforge.budget.verify import verify_plan

    path = _plan_path(args)
    relative_accuracy = flags.relative_accuracy(args.relative_accuracy)
    budget = flags.number("--budget", args.budget, flags.NON_NEGATIVE, default=None)
    plan = load_checked_plan(path)  # a sealed plan must match its checksum and totals
    if budget is not None:
        plan = dataclasses.replace(plan, budget_epsilon=budget)
    report = verify_plan(plan, relative_accuracy=relative_accuracy)
    if args.json:
        print_json({"plan": path, **report.to_dict()})
    else:
        _print_report(path, report)
    return EXIT_OVER_BUDGET if report.within_budget is False else EXIT_OK


def add_verify_command(subparsers: Any) -> None:
    """Add ``verify`` to the ``dpforge`` subcommands."""
    verify = subparsers.add_parser("verify", help="check a plan file against its budget (exit 0 within, 1 over)")
    verify.add_argument("plan_file", nargs="?", metavar="PLAN", help="TOML plan file")
    verify.add_argument("--plan", metavar="FILE", help="TOML plan file (instead of the positional argument)")
    verify.add_argument("--budget", metavar="EPS", help="budget epsilon >= 0; overrides [budget] in the plan")
    flags.add_common_flags(verify)
    verify.set_defaults(handler=_command_verify)
