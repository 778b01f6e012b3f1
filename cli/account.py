"""``dpforge epsilon``, ``dpforge delta`` and ``dpforge calibrate``.

    dpforge epsilon   --noise-multiplier 1.1 --sampling-rate 0.004 --steps 1000 --delta 1e-5
    dpforge delta     --noise laplace --scale 2 --steps 10 --epsilon 5
    dpforge calibrate --target-epsilon 8 --delta 1e-5 --sampling-rate 0.004 --steps 1000

``epsilon`` and ``delta`` account the mechanism flags, ``--plan FILE`` or ``--lmo FILE``
with any registered engine (``--engine``); ``calibrate`` finds the smallest Gaussian
noise multiplier or Laplace scale meeting a target epsilon.  ``--json`` prints exactly
one JSON object.  The accounting library is imported by each command when it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from dpforge.cli import flags
from dpforge.cli.schema import command_object
from dpforge.cli.output import (
    accuracy_rows,
    accuracy_status,
    engine_rows,
    print_json,
    summary_rows,
    table,
)


def _lower(value: float | None) -> Any:
    return "none" if value is None else value


def _result_rows(data: dict[str, Any], result: Any, summary: dict[str, Any], answer: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The table of an epsilon or delta result (``data`` is its schema dict)."""
    return [
        *answer,
        ("engine", data["engine"]),
        ("relation", data["relation"]),
        ("sampling", data["sampling"]),
        *engine_rows(result),
        *accuracy_rows(data["accuracy"]),
        *summary_rows(summary),
    ]


def _engine_and_options(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The engine and its options; ``--relative-accuracy`` is passed to the prv engine
    only (the others have no grid to refine, so giving it to them is an error)."""
    engine, options = flags.engine_options(args)
    if engine == "prv":
        options["relative_accuracy"] = flags.relative_accuracy(args.relative_accuracy)
    elif args.relative_accuracy is not None:
        raise flags.CliError(f"--relative-accuracy applies only to --engine prv, not --engine {engine}")
    return engine, options


def _accounted(compute: Any) -> Any:
    """``compute()`` with the engines' accuracy warnings held back: the command states a
    shortfall itself, in one line (:func:`~dpforge.cli.output.accuracy_status`)."""
    import warnings

    from dpforge.errors import DpforgeAccuracyWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DpforgeAccuracyWarning)
        return compute()


def _command_epsilon(args: argparse.Namespace) -> int:
    given_delta = None if args.delta is None else flags.delta(args.delta)  # cheap checks before any import
    flags.relative_accuracy(args.relative_accuracy)
    description, summary, plan = flags.mechanism_description(args)
    delta = plan.delta if plan is not None and given_delta is None else flags.delta(args.delta)
    engine, options = _engine_and_options(args)
    from dpforge.accounting import epsilon

    result = _accounted(lambda: epsilon(description, delta, engine=engine, **options))
    data = command_object("epsilon", result.to_dict(), description, workload_source=summary["workload_source"])
    if args.json:
        print_json(data)
    else:
        answer = [
            ("epsilon (certified upper)", result.upper),
            ("epsilon (certified lower)", _lower(data["epsilon_lower"])),
            ("delta", result.delta),
        ]
        print(table(_result_rows(data, result, summary, answer)))
    return accuracy_status(data["accuracy"], args.accept_looser)


def _command_delta(args: argparse.Namespace) -> int:
    if args.epsilon is not None:  # cheap checks before any import
        flags.number("--epsilon", args.epsilon, flags.NON_NEGATIVE)
    flags.relative_accuracy(args.relative_accuracy)
    description, summary, _ = flags.mechanism_description(args)
    epsilon = flags.number("--epsilon", args.epsilon, flags.NON_NEGATIVE)
    engine, options = _engine_and_options(args)
    from dpforge.accounting import delta

    result = _accounted(lambda: delta(description, epsilon, engine=engine, **options))
    data = command_object("delta", result.to_dict(), description, workload_source=summary["workload_source"])
    if args.json:
        print_json(data)
    else:
        answer = [
            ("delta (certified upper)", result.upper),
            ("delta (certified lower)", result.lower),
            ("epsilon", result.epsilon),
        ]
        print(table(_result_rows(data, result, summary, answer)))
    return accuracy_status(data["accuracy"], args.accept_looser)


def _command_calibrate(args: argparse.Namespace) -> int:
    noise = args.noise or "gaussian"
    target_epsilon = flags.number("--target-epsilon", args.target_epsilon, flags.POSITIVE)
    delta = flags.delta(args.delta)
    sampling_rate = flags.sampling_rate(args.sampling_rate)
    steps = flags.steps(args.steps)
    sensitivity = flags.sensitivity(args.sensitivity)
    rel_tolerance = flags.relative_accuracy(args.relative_accuracy)
    from dpforge.accounting import calibrate_laplace_scale, calibrate_noise_multiplier
    from dpforge.budget.plan import Phase
    from dpforge.errors import CalibrationError

    try:
        if noise == "gaussian":
            result = _accounted(
                lambda: calibrate_noise_multiplier(sampling_rate, steps, target_epsilon, delta, rel_tolerance=rel_tolerance)
            )
        else:
            result = _accounted(
                lambda: calibrate_laplace_scale(
                    sampling_rate, steps, target_epsilon, delta, sensitivity=sensitivity, rel_tolerance=rel_tolerance
                )
            )
    except CalibrationError:
        raise  # its message names the target, the bracket end and the epsilon there
    except (ValueError, ArithmeticError) as error:
        raise flags.CliError(f"cannot calibrate {noise} noise to --target-epsilon {target_epsilon:g}: {error}") from None
    answer = Phase(noise=noise, parameter=result.parameter, sampling_rate=sampling_rate, steps=steps, sensitivity=sensitivity)
    data = command_object("calibrate", result.to_dict(), answer.description())
    if args.json:
        print_json(data)
    else:
        rows = [
            (result.parameter_name, result.parameter),
            ("epsilon (certified upper)", result.epsilon),
            ("epsilon (certified lower)", _lower(data["epsilon_lower"])),
            ("target epsilon", result.target_epsilon),
            ("delta", result.delta),
            ("noise", noise),
            ("sampling rate", sampling_rate),
            ("steps", steps),
            ("sensitivity", sensitivity),
            ("engine", result.engine),
            *accuracy_rows(data["accuracy"]),
            ("evaluations", result.evaluations),
        ]
        print(table(rows))
    return accuracy_status(data["accuracy"], args.accept_looser, "calibration")


_EPSILON_EXAMPLES = """examples:
  dpforge epsilon --noise-multiplier 1.1 --sampling-rate 0.004 --steps 1000 --delta 1e-5
  dpforge epsilon --plan examples/plans/within_budget.toml --json
  dpforge epsilon --lmo best.json --delta 1e-5      (workload saved in the search result)"""
_DELTA_EXAMPLES = """examples:
  dpforge delta --noise laplace --scale 2 --sampling-rate 1 --steps 10 --epsilon 5
  dpforge delta --noise-multiplier 1.1 --sampling-rate 0.004 --steps 1000 --epsilon 2 --json"""
_CALIBRATE_EXAMPLES = """examples:
  dpforge calibrate --target-epsilon 3 --delta 1e-5 --sampling-rate 0.004 --steps 1000
  dpforge calibrate --noise laplace --target-epsilon 1 --delta 1e-5 --sampling-rate 1 --steps 10 --json"""


def add_account_commands(subparsers: Any) -> None:
    """Add ``epsilon``, ``delta`` and ``calibrate`` to the ``dpforge`` subcommands."""
    epsilon = flags.add_command(
        subparsers,
        "epsilon",
        help="certified bounds on epsilon at a given delta",
        description="Certified upper and lower bounds on epsilon at a given delta for a mechanism given by "
        "flags, a plan file (--plan) or a saved LMO (--lmo). --sampling-rate and --steps are required "
        "(no silent one-step default).",
        examples=_EPSILON_EXAMPLES,
    )
    flags.add_mechanism_flags(epsilon)
    epsilon.add_argument("--delta", metavar="DELTA", help="in (0, 1); with --plan defaults to the plan's delta")
    flags.add_engine_flags(epsilon)
    flags.add_common_flags(epsilon)
    epsilon.set_defaults(handler=_command_epsilon)

    delta = flags.add_command(
        subparsers,
        "delta",
        help="certified bounds on delta at a given epsilon",
        description="Certified upper and lower bounds on delta at a given epsilon for a mechanism given by "
        "flags, a plan file (--plan) or a saved LMO (--lmo).",
        examples=_DELTA_EXAMPLES,
    )
    flags.add_mechanism_flags(delta)
    delta.add_argument("--epsilon", metavar="EPS", help=">= 0 (required)")
    flags.add_engine_flags(delta)
    flags.add_common_flags(delta)
    delta.set_defaults(handler=_command_delta)

    calibrate = flags.add_command(
        subparsers,
        "calibrate",
        help="smallest noise meeting a target epsilon",
        description="The smallest Gaussian noise multiplier (or Laplace scale) whose certified epsilon at "
        "--delta is at most --target-epsilon over --steps steps at --sampling-rate.",
        examples=_CALIBRATE_EXAMPLES,
    )
    flags.add_sampling_flags(calibrate)
    calibrate.add_argument("--target-epsilon", metavar="EPS", help="> 0 (required)")
    calibrate.add_argument("--delta", metavar="DELTA", help="in (0, 1) (required)")
    flags.add_common_flags(calibrate)
    calibrate.set_defaults(handler=_command_calibrate)
