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
from dpforge.cli.output import (
    EXIT_OK,
    accuracy_rows,
    engine_rows,
    print_json,
    summary_rows,
    table,
)


def _rows(result: Any, summary: dict[str, Any], first: tuple[str, Any], given: tuple[str, Any]) -> list[tuple[str, Any]]:
    """The table of an epsilon or delta result."""
    return [
        first,
        ("lower", result.lower),
        ("estimate", result.estimate),
        given,
        ("engine", result.engine),
        ("neighbouring", result.neighbouring),
        ("sampling", result.sampling),
        *engine_rows(result),
        *accuracy_rows(result.accuracy),
        *summary_rows(summary),
    ]


def _engine_and_options(args: argparse.Namespace, relative_accuracy: float) -> tuple[str, dict[str, Any]]:
    engine, options = flags.engine_options(args)
    if engine == "prv":  # the other engines have no grid to refine
        options["relative_accuracy"] = relative_accuracy
    return engine, options


def _command_epsilon(args: argparse.Namespace) -> int:
    from dpforge.accounting import epsilon

    relative_accuracy = flags.relative_accuracy(args.relative_accuracy)
    description, summary, plan = flags.mechanism_description(args)
    delta = plan.delta if plan is not None and args.delta is None else flags.delta(args.delta)
    engine, options = _engine_and_options(args, relative_accuracy)
    result = epsilon(description, delta, engine=engine, **options)
    if args.json:
        print_json({**result.to_dict(), "description": summary})
    else:
        print(table(_rows(result, summary, ("epsilon (upper)", result.upper), ("delta", result.delta))))
    return EXIT_OK


def _command_delta(args: argparse.Namespace) -> int:
    from dpforge.accounting import delta

    relative_accuracy = flags.relative_accuracy(args.relative_accuracy)
    description, summary, _ = flags.mechanism_description(args)
    epsilon = flags.number("--epsilon", args.epsilon, flags.NON_NEGATIVE)
    engine, options = _engine_and_options(args, relative_accuracy)
    result = delta(description, epsilon, engine=engine, **options)
    if args.json:
        print_json({**result.to_dict(), "description": summary})
    else:
        print(table(_rows(result, summary, ("delta (upper)", result.upper), ("epsilon", result.epsilon))))
    return EXIT_OK


def _command_calibrate(args: argparse.Namespace) -> int:
    from dpforge.accounting import calibrate_laplace_scale, calibrate_noise_multiplier
    from dpforge.errors import CalibrationError

    noise = args.noise or "gaussian"
    target_epsilon = flags.number("--target-epsilon", args.target_epsilon, flags.POSITIVE)
    delta = flags.delta(args.delta)
    sampling_rate = flags.sampling_rate(args.sampling_rate)
    steps = flags.steps(args.steps)
    sensitivity = flags.sensitivity(args.sensitivity)
    rel_tolerance = flags.relative_accuracy(args.relative_accuracy)
    try:
        if noise == "gaussian":
            result = calibrate_noise_multiplier(sampling_rate, steps, target_epsilon, delta, rel_tolerance=rel_tolerance)
        else:
            result = calibrate_laplace_scale(
                sampling_rate, steps, target_epsilon, delta, sensitivity=sensitivity, rel_tolerance=rel_tolerance
            )
    except CalibrationError:
        raise  # its message names the target, the bracket end and the epsilon there
    except (ValueError, ArithmeticError) as error:
        raise flags.CliError(f"cannot calibrate {noise} noise to --target-epsilon {target_epsilon:g}: {error}") from None
    data = {
        result.parameter_name: result.parameter,
        "epsilon": result.epsilon,
        "target_epsilon": result.target_epsilon,
        "delta": result.delta,
        "noise": noise,
        "sampling_rate": sampling_rate,
        "steps": steps,
        "sensitivity": sensitivity,
        "rel_tolerance": result.rel_tolerance,
        "evaluations": result.evaluations,
        "engine": result.engine,
    }
    if args.json:
        print_json(data)
        return EXIT_OK
    rows = [(result.parameter_name, result.parameter), ("epsilon (certified upper)", result.epsilon)]
    rows += [(key.replace("_", " "), value) for key, value in list(data.items())[2:]]
    print(table(rows))
    return EXIT_OK


def add_account_commands(subparsers: Any) -> None:
    """Add ``epsilon``, ``delta`` and ``calibrate`` to the ``dpforge`` subcommands."""
    epsilon = subparsers.add_parser("epsilon", help="certified bounds on epsilon at a given delta")
    flags.add_mechanism_flags(epsilon)
    epsilon.add_argument("--delta", metavar="DELTA", help="in (0, 1); with --plan defaults to the plan's delta")
    flags.add_engine_flags(epsilon)
    flags.add_common_flags(epsilon)
    epsilon.set_defaults(handler=_command_epsilon)

    delta = subparsers.add_parser("delta", help="certified bounds on delta at a given epsilon")
    flags.add_mechanism_flags(delta)
    delta.add_argument("--epsilon", metavar="EPS", help=">= 0 (required)")
    flags.add_engine_flags(delta)
    flags.add_common_flags(delta)
    delta.set_defaults(handler=_command_delta)

    calibrate = subparsers.add_parser("calibrate", help="smallest noise meeting a target epsilon")
    flags.add_sampling_flags(calibrate)
    calibrate.add_argument("--target-epsilon", metavar="EPS", help="> 0 (required)")
    calibrate.add_argument("--delta", metavar="DELTA", help="in (0, 1) (required)")
    flags.add_common_flags(calibrate)
    calibrate.set_defaults(handler=_command_calibrate)
