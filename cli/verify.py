"""``dpforge verify PLAN.toml``: the certified epsilon of a plan file against its budget.

    dpforge verify plan.toml [--budget EPS] [--rows every|last] [--relative-accuracy R] [--json]

Prints the cumulative certified epsilon after each phase (``--rows last``: after the last
phase only, the same verdict without the table's cost) and exits with
:data:`~dpforge.cli.output.EXIT_OK` when it is within the budget (or there is no
budget), :data:`~dpforge.cli.output.EXIT_OVER_BUDGET` when it is over, and
:data:`~dpforge.cli.output.EXIT_ACCURACY` when the certified bracket is wider than
``--relative-accuracy`` asks (never a silent pass on a looser bound; ``--accept-looser``
accepts it with a warning).  ``--budget``
overrides the plan's ``[budget]``.  The plan and verify modules are imported when the
command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from dpforge.cli import flags
from dpforge.cli.output import EXIT_OVER_BUDGET, accuracy_rows, accuracy_status, print_json, table
from dpforge.cli.schema import command_object

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


def _print_report(path: str, report: VerifyReport, accuracy: dict[str, Any]) -> None:
    budget = "none" if report.budget_epsilon is None else f"epsilon <= {report.budget_epsilon:.6g}"
    rows = [("plan", path), ("delta", report.delta), ("budget", budget), ("engine", report.engine)]
    if report.rows == "last":
        rows.append(("rows", "the last phase only (--rows last)"))
    print(table([*rows, *accuracy_rows(accuracy)]))
    print()
    rows = [(check.label, check.steps, check.epsilon_upper, check.epsilon_lower) for check in report.phases]
    print(table(rows, header=("phase", "steps", "cumulative epsilon (certified upper)", "certified lower")))
    from dpforge.budget.verify import row_width, wide_rows  # imported by verify_plan already

    count, widest = wide_rows(report.phases)
    if widest is not None:
        print(
            f"note: {count} of {len(report.phases)} rows are wider than the accuracy asked "
            f"(widest {row_width(widest):.3g}, after {widest.label}); the last row decides the budget"
        )
    print()
    if report.within_budget is None:
        print(f"certified epsilon <= {report.epsilon_upper:.6g} (no budget given)")
    elif report.within_budget:
        print(f"WITHIN BUDGET: certified epsilon {report.epsilon_upper:.6g} <= budget {report.budget_epsilon:.6g}")
    else:
        print(f"OVER BUDGET: certified epsilon {report.epsilon_upper:.6g} > budget {report.budget_epsilon:.6g}")


def _command_verify(args: argparse.Namespace) -> int:
    import warnings

    path = _plan_path(args)  # the flags are checked before the library is imported
    relative_accuracy = flags.relative_accuracy(args.relative_accuracy)
    budget = flags.number("--budget", args.budget, flags.NON_NEGATIVE, default=None)
    from dpforge.budget.integrity import load_checked_plan
    from dpforge.budget.verify import verify_plan
    from dpforge.errors import DpforgeAccuracyWarning

    plan = load_checked_plan(path)  # a sealed plan must match its checksum and totals
    if budget is not None:
        plan = dataclasses.replace(plan, budget_epsilon=budget)
    with warnings.catch_warnings():  # a shortfall is stated below, in one line
        warnings.simplefilter("ignore", DpforgeAccuracyWarning)
        report = verify_plan(plan, relative_accuracy=relative_accuracy, rows=args.rows)
    data = command_object("verify", report.to_dict(), plan.description(), plan=path)
    if args.json:
        print_json(data)
    else:
        _print_report(path, report, data["accuracy"])
    if report.within_budget is False:
        return EXIT_OVER_BUDGET
    # never a silent pass on a bracket wider than asked: exit 3 unless --accept-looser
    return accuracy_status(data["accuracy"], args.accept_looser, "plan")


_EXAMPLES = """examples:
  dpforge verify examples/plans/within_budget.toml
  dpforge verify plan.toml --budget 8 --json
  dpforge verify long_plan.toml --rows last"""


def add_verify_command(subparsers: Any) -> None:
    """Add ``verify`` to the ``dpforge`` subcommands."""
    verify = flags.add_command(
        subparsers,
        "verify",
        help="check a plan file against its budget (exit 0 within, 1 over)",
        description="The cumulative certified epsilon of a TOML plan file after each phase, checked against "
        "its [budget] (or --budget). A plan passes only on a bracket as tight as --relative-accuracy asks.",
        examples=_EXAMPLES,
    )
    verify.add_argument("plan_file", nargs="?", metavar="PLAN", help="TOML plan file")
    verify.add_argument("--plan", metavar="FILE", help="TOML plan file (instead of the positional argument)")
    verify.add_argument("--budget", metavar="EPS", help="budget epsilon >= 0; overrides [budget] in the plan")
    verify.add_argument(
        "--rows",
        choices=("every", "last"),  # budget.verify.ROWS, spelled here: parsing imports no library module
        default="every",
        help="cumulative rows to print: after every phase (default) or only after the last, which gives the same "
        "verdict and certified upper bound without the table's cost",
    )
    flags.add_common_flags(verify)
    verify.set_defaults(handler=_command_verify)
