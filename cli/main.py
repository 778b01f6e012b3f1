"""``dpforge``: certified privacy accounting from the command line.

Subcommands::

    dpforge epsilon   --noise-multiplier 1.1 --sampling-rate 0.004 --steps 1000 --delta 1e-5
    dpforge delta     --noise laplace --scale 2 --steps 10 --epsilon 5
    dpforge calibrate --target-epsilon 8 --delta 1e-5 --sampling-rate 0.004 --steps 1000
    dpforge verify    plan.toml
    dpforge plot      profile|steps|noise|rdp ... --out FIGURE.png   (see dpforge.cli.plot)
    dpforge lmo       search ...                                     (see dpforge.cli.lmo)

``epsilon`` and ``delta`` also take ``--plan FILE`` instead of mechanism flags.  Add
``--json`` for exactly one JSON object on stdout.

Exit codes: 0 success (for ``verify``: certified epsilon within the budget, or no
budget), 1 ``verify`` found the plan over budget, 2 any error (bad flag values, missing
flags, invalid plan files, errors from the library).  Every error is one line on stderr,
``dpforge: error: <what> ...``, naming the parameter and its allowed range; nothing is
clamped and no traceback is printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import Any, Callable, NoReturn, Sequence

from dpforge.accounting import calibrate_laplace_scale, calibrate_noise_multiplier
from dpforge.accounting import delta as account_delta
from dpforge.accounting import epsilon as account_epsilon
from dpforge.accounting.results import json_ready
from dpforge.budget.plan import NOISE_PARAMETERS, Phase, Plan, PlanError, load_plan
from dpforge.budget.verify import VerifyReport, verify_plan
from dpforge.cli.lmo import add_lmo_commands, lmo_description
from dpforge.cli.plot import add_plot_commands
from dpforge.mechanisms.combinators import Description
from dpforge.validation import (
    require_count,
    require_non_negative,
    require_positive,
    require_probability_open,
    require_sampling_rate,
)

PROG = "dpforge"
EXIT_OK = 0
EXIT_OVER_BUDGET = 1
EXIT_ERROR = 2

#: Flags that describe a mechanism; they cannot be combined with ``--plan``.
MECHANISM_FLAGS = ("noise", "noise_multiplier", "scale", "sensitivity", "sampling_rate", "steps")

_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class CliError(Exception):
    """A user error: reported as one line on stderr with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (raised, not printed).

    Values such as ``-1e-5`` or ``-inf`` are read as (negative) numbers, not as options,
    so that they reach the range checks and get a message naming the allowed range.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        raise CliError(message)


# --------------------------------------------------------------------------- flag values


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


#: The allowed range of each check, as error messages state it.
_ALLOWED: dict[Callable[[str, object], Any], str] = {
    require_positive: "a finite number > 0",
    require_non_negative: "a finite number >= 0",
    require_probability_open: "in (0, 1)",
    require_sampling_rate: "in (0, 1]",
}


def _shown(text: str) -> str:
    """The value as typed, quoted only when it is not a number."""
    try:
        float(text)
    except (TypeError, ValueError):
        return repr(text)
    return text


def _checked(flag: str, text: str, require: Callable[[str, object], Any]) -> Any:
    """``text`` as a number accepted by ``require`` (from :mod:`dpforge.validation`).

    ``nan`` and ``inf`` parse as floats and are then rejected like any out-of-range value.
    """
    try:
        return require(flag, float(text))
    except (TypeError, ValueError):
        raise CliError(f"{flag} must be {_ALLOWED[require]}, got {_shown(text)}") from None


def _steps(text: str) -> int:
    """``--steps``: an integer >= 1 (``1e3`` is accepted, ``2.5`` is not)."""
    try:
        value: object = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            value = text
    try:
        return require_count("--steps", value)
    except ValueError:
        raise CliError(f"--steps must be an integer >= 1, got {_shown(text)}") from None


def _relative_accuracy(text: str) -> float:
    try:
        return require_probability_open("--relative-accuracy", float(text))
    except ValueError:
        raise CliError(f"--relative-accuracy must be in (0, 1), got {_shown(text)}") from None


def _required(args: argparse.Namespace, dest: str, allowed: str) -> str:
    text = getattr(args, dest)
    if text is None:
        raise CliError(f"{_flag(dest)} is required ({allowed})")
    return text


def _delta_flag(args: argparse.Namespace) -> float:
    return _checked("--delta", _required(args, "delta", "a number in (0, 1)"), require_probability_open)


# --------------------------------------------------------------------------- descriptions


def _phase_from_flags(args: argparse.Namespace) -> Phase:
    """One phase (mechanism, sampling rate, steps) from the mechanism flags."""
    noise = args.noise or "gaussian"
    parameter_dest = NOISE_PARAMETERS[noise]
    for other_noise, other_dest in NOISE_PARAMETERS.items():
        if other_noise != noise and getattr(args, other_dest, None) is not None:
            raise CliError(
                f"{_flag(other_dest)} applies only to --noise {other_noise}; "
                f"--noise {noise} takes {_flag(parameter_dest)}"
            )
    parameter = _checked(
        _flag(parameter_dest),
        _required(args, parameter_dest, f"a number > 0 for --noise {noise}"),
        require_positive,
    )
    return Phase(
        noise=noise,
        parameter=parameter,
        sampling_rate=_sampling_rate(args),
        steps=_steps(args.steps) if args.steps is not None else 1,
        sensitivity=_sensitivity(args),
    )


def _sampling_rate(args: argparse.Namespace) -> float:
    if args.sampling_rate is None:
        return 1.0
    return _checked("--sampling-rate", args.sampling_rate, require_sampling_rate)


def _sensitivity(args: argparse.Namespace) -> float:
    if args.sensitivity is None:
        return 1.0
    return _checked("--sensitivity", args.sensitivity, require_positive)


def _load_plan_flag(args: argparse.Namespace) -> Plan:
    """The plan of ``--plan``; mechanism flags may not be given with it."""
    given = [_flag(dest) for dest in MECHANISM_FLAGS if getattr(args, dest, None) is not None]
    if given:
        raise CliError(f"--plan cannot be combined with {', '.join(given)} (the plan file describes the mechanism)")
    return load_plan(args.plan)


def _description(args: argparse.Namespace) -> tuple[Description, dict[str, Any], Plan | None]:
    """The description to account, a JSON summary of it, and the plan when ``--plan`` was given."""
    if getattr(args, "lmo", None) is not None:
        return (*lmo_description(args), None)
    if args.plan is not None:
        plan = _load_plan_flag(args)
        return plan.description(), {"plan": os.fspath(args.plan), "phases": len(plan.phases)}, plan
    phase = _phase_from_flags(args)
    summary = {
        "noise": phase.noise,
        phase.parameter_name: phase.parameter,
        "sensitivity": phase.sensitivity,
        "sampling_rate": phase.sampling_rate,
        "steps": phase.steps,
    }
    return phase.description(), summary, None


# --------------------------------------------------------------------------- output


def _format(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    """Rows of cells as left-aligned columns (numbers right-aligned)."""
    cells = [[_format(cell) for cell in row] for row in rows]
    if header is not None:
        cells.insert(0, list(header))
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    numeric = [
        all(isinstance(row[column], (int, float)) and not isinstance(row[column], bool) for row in rows)
        for column in range(len(widths))
    ]
    lines = []
    for row in cells:
        parts = [cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(row, widths, numeric)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _print_json(data: dict[str, Any]) -> None:
    print(json.dumps(json_ready(data), allow_nan=False))


def _accuracy_rows(accuracy: dict[str, Any]) -> list[tuple[str, Any]]:
    names = {
        "relative_accuracy": "relative accuracy",
        "achieved": "achieved accuracy",
        "grid_step": "grid step",
        "grid_size": "grid size",
        "refinements": "refinements",
    }
    return [(label, accuracy[key]) for key, label in names.items() if key in accuracy]


def _summary_rows(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(key.replace("_", " "), value) for key, value in summary.items()]


# --------------------------------------------------------------------------- engines

ENGINE_CHOICES = ("prv", "rdp", "montecarlo", "pure")
#: flags that only the montecarlo engine takes: (flag, dest)
_MONTECARLO_FLAGS = (("--samples", "samples"), ("--confidence", "confidence"), ("--seed", "seed"))


def _integer_flag(flag: str, text: str, minimum: int) -> int:
    """An integer flag >= ``minimum`` (``1e6`` is accepted, ``2.5`` is not)."""
    try:
        value: object = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            value = text
    try:
        return require_count(flag, value, minimum)
    except ValueError:
        raise CliError(f"{flag} must be an integer >= {minimum}, got {_shown(text)}") from None


def _engine_options(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """``--engine`` and the options it takes (``--samples``/``--confidence``/``--seed``
    belong to the montecarlo engine only)."""
    engine = args.engine or "prv"
    given = [flag for flag, dest in _MONTECARLO_FLAGS if getattr(args, dest, None) is not None]
    if engine != "montecarlo":
        if given:
            raise CliError(f"{given[0]} applies only to --engine montecarlo, not --engine {engine}")
        return engine, {}
    return engine, montecarlo_options(args)


def montecarlo_options(args: argparse.Namespace) -> dict[str, Any]:
    """The montecarlo engine's options from ``--samples``/``--confidence``/``--seed``."""
    options: dict[str, Any] = {}
    if args.samples is not None:
        options["samples"] = _integer_flag("--samples", args.samples, 1)
    if args.confidence is not None:
        options["confidence"] = _checked("--confidence", args.confidence, require_probability_open)
    if args.seed is not None:
        options["seed"] = _integer_flag("--seed", args.seed, 0)
    return options


def _engine_rows(result: Any) -> list[tuple[str, Any]]:
    """Extra table rows of a high-probability (montecarlo) result."""
    if not hasattr(result, "samples"):
        return []
    return [("samples", result.samples), ("confidence", result.confidence), ("bound", result.bound)]


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", choices=ENGINE_CHOICES, help="accountant (default prv)")
    parser.add_argument("--samples", metavar="N", help="montecarlo: samples of the composed loss, an integer >= 1")
    parser.add_argument("--confidence", metavar="C", help="montecarlo: probability of the bound, in (0, 1) (default 0.99)")
    parser.add_argument("--seed", metavar="S", help="montecarlo: random seed, an integer >= 0 (default random, reported)")


# --------------------------------------------------------------------------- commands


def _command_epsilon(args: argparse.Namespace) -> int:
    relative_accuracy = _relative_accuracy(args.relative_accuracy)
    description, summary, plan = _description(args)
    if plan is not None and args.delta is None:
        delta = plan.delta
    else:
        delta = _delta_flag(args)
    engine, options = _engine_options(args)
    if engine == "prv":  # the other engines have no grid to refine
        options["relative_accuracy"] = relative_accuracy
    result = account_epsilon(description, delta, engine=engine, **options)
    if args.json:
        _print_json({**result.to_dict(), "description": summary})
        return EXIT_OK
    rows = [
        ("epsilon (upper)", result.upper),
        ("lower", result.lower),
        ("estimate", result.estimate),
        ("delta", result.delta),
        ("engine", result.engine),
        ("neighbouring", result.neighbouring),
        ("sampling", result.sampling),
        *_engine_rows(result),
        *_accuracy_rows(result.accuracy),
        *_summary_rows(summary),
    ]
    print(_table(rows))
    return EXIT_OK


def _command_delta(args: argparse.Namespace) -> int:
    relative_accuracy = _relative_accuracy(args.relative_accuracy)
    description, summary, _ = _description(args)
    epsilon = _checked("--epsilon", _required(args, "epsilon", "a number >= 0"), require_non_negative)
    engine, options = _engine_options(args)
    if engine == "prv":
        options["relative_accuracy"] = relative_accuracy
    result = account_delta(description, epsilon, engine=engine, **options)
    if args.json:
        _print_json({**result.to_dict(), "description": summary})
        return EXIT_OK
    rows = [
        ("delta (upper)", result.upper),
        ("lower", result.lower),
        ("estimate", result.estimate),
        ("epsilon", result.epsilon),
        ("engine", result.engine),
        ("neighbouring", result.neighbouring),
        ("sampling", result.sampling),
        *_engine_rows(result),
        *_accuracy_rows(result.accuracy),
        *_summary_rows(summary),
    ]
    print(_table(rows))
    return EXIT_OK


def _command_calibrate(args: argparse.Namespace) -> int:
    noise = args.noise or "gaussian"
    target_epsilon = _checked(
        "--target-epsilon", _required(args, "target_epsilon", "a number > 0"), require_positive
    )
    delta = _delta_flag(args)
    sampling_rate = _sampling_rate(args)
    steps = _steps(args.steps) if args.steps is not None else 1
    sensitivity = _sensitivity(args)
    rel_tolerance = _relative_accuracy(args.relative_accuracy)
    try:
        if noise == "gaussian":
            result = calibrate_noise_multiplier(sampling_rate, steps, target_epsilon, delta, rel_tolerance=rel_tolerance)
        else:
            result = calibrate_laplace_scale(
                sampling_rate, steps, target_epsilon, delta, sensitivity=sensitivity, rel_tolerance=rel_tolerance
            )
    except (ValueError, ArithmeticError) as error:
        if "target_epsilon" in str(error):
            raise
        raise CliError(f"cannot calibrate {noise} noise to --target-epsilon {target_epsilon:g}: {error}") from None
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
        _print_json(data)
        return EXIT_OK
    rows = [(result.parameter_name, result.parameter), ("epsilon (certified upper)", result.epsilon)]
    rows += [(key.replace("_", " "), value) for key, value in list(data.items())[2:]]
    print(_table(rows))
    return EXIT_OK


def _verify_path(args: argparse.Namespace) -> str:
    positional, flag = args.plan_file, args.plan
    if positional is not None and flag is not None and positional != flag:
        raise CliError(f"give the plan file once (positionally or with --plan), got {positional!r} and {flag!r}")
    path = positional if positional is not None else flag
    if path is None:
        raise CliError("a plan file is required: dpforge verify PLAN.toml (or --plan PLAN.toml)")
    return path


def _print_verify(path: str, report: VerifyReport) -> None:
    budget = "none" if report.budget_epsilon is None else f"epsilon <= {report.budget_epsilon:.6g}"
    print(_table([("plan", path), ("delta", report.delta), ("budget", budget), ("engine", report.engine)]))
    print()
    rows = [(check.label, check.steps, check.epsilon_upper, check.epsilon_lower) for check in report.phases]
    print(_table(rows, header=("phase", "steps", "cumulative epsilon (certified)", "lower")))
    print()
    if report.within_budget is None:
        print(f"certified epsilon <= {report.epsilon_upper:.6g} (no budget given)")
    elif report.within_budget:
        print(f"WITHIN BUDGET: certified epsilon {report.epsilon_upper:.6g} <= budget {report.budget_epsilon:.6g}")
    else:
        print(f"OVER BUDGET: certified epsilon {report.epsilon_upper:.6g} > budget {report.budget_epsilon:.6g}")


def _command_verify(args: argparse.Namespace) -> int:
    path = _verify_path(args)
    relative_accuracy = _relative_accuracy(args.relative_accuracy)
    budget = None if args.budget is None else _checked("--budget", args.budget, require_non_negative)
    plan = load_plan(path)
    if budget is not None:
        plan = dataclasses.replace(plan, budget_epsilon=budget)
    report = verify_plan(plan, relative_accuracy=relative_accuracy)
    if args.json:
        _print_json({"plan": path, **report.to_dict()})
    else:
        _print_verify(path, report)
    return EXIT_OVER_BUDGET if report.within_budget is False else EXIT_OK


# --------------------------------------------------------------------------- parser


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--relative-accuracy",
        default="1e-3",
        metavar="R",
        help="target (upper - lower)/upper of the certified bounds, in (0, 1) (default 1e-3)",
    )
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def _add_sampling_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--noise", choices=tuple(NOISE_PARAMETERS), help="noise family (default gaussian)")
    parser.add_argument("--sensitivity", metavar="S", help="sensitivity, > 0 (default 1)")
    parser.add_argument("--sampling-rate", metavar="Q", help="Poisson sampling rate, in (0, 1] (default 1)")
    parser.add_argument("--steps", metavar="T", help="number of steps, an integer >= 1 (default 1)")


def _add_mechanism_flags(parser: argparse.ArgumentParser) -> None:
    _add_sampling_flags(parser)
    parser.add_argument("--noise-multiplier", metavar="SIGMA", help="gaussian noise std / L2 sensitivity, > 0")
    parser.add_argument("--scale", metavar="B", help="laplace scale b, > 0")
    parser.add_argument("--plan", metavar="FILE", help="account a TOML plan file instead of mechanism flags")


def build_parser() -> argparse.ArgumentParser:
    """The ``dpforge`` argument parser (flag values are checked after parsing)."""
    parser = _Parser(prog=PROG, description="Certified differential-privacy accounting (PRV engine).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    epsilon = commands.add_parser("epsilon", help="certified bounds on epsilon at a given delta")
    _add_mechanism_flags(epsilon)
    epsilon.add_argument("--delta", metavar="DELTA", help="in (0, 1); with --plan defaults to the plan's delta")
    _add_engine_flags(epsilon)
    _add_common(epsilon)
    epsilon.set_defaults(handler=_command_epsilon)

    delta = commands.add_parser("delta", help="certified bounds on delta at a given epsilon")
    _add_mechanism_flags(delta)
    delta.add_argument("--epsilon", metavar="EPS", help=">= 0 (required)")
    _add_engine_flags(delta)
    _add_common(delta)
    delta.set_defaults(handler=_command_delta)

    calibrate = commands.add_parser("calibrate", help="smallest noise meeting a target epsilon")
    _add_sampling_flags(calibrate)
    calibrate.add_argument("--target-epsilon", metavar="EPS", help="> 0 (required)")
    calibrate.add_argument("--delta", metavar="DELTA", help="in (0, 1) (required)")
    _add_common(calibrate)
    calibrate.set_defaults(handler=_command_calibrate)

    verify = commands.add_parser("verify", help="check a plan file against its budget (exit 0 within, 1 over)")
    verify.add_argument("plan_file", nargs="?", metavar="PLAN", help="TOML plan file")
    verify.add_argument("--plan", metavar="FILE", help="TOML plan file (instead of the positional argument)")
    verify.add_argument("--budget", metavar="EPS", help="budget epsilon >= 0; overrides [budget] in the plan")
    _add_common(verify)
    verify.set_defaults(handler=_command_verify)
    add_lmo_commands(commands)
    add_plot_commands(commands)
    return parser


def _error(message: object) -> int:
    text = " ".join(str(message).split()) or "unknown error"
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpforge`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except SystemExit as exit_request:  # --help
        code = exit_request.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_ERROR)
    except (CliError, PlanError, ValueError, ArithmeticError) as error:
        return _error(error)
    except OSError as error:
        return _error(f"{error.filename}: {error.strerror}" if error.filename else error)


if __name__ == "__main__":
    raise SystemExit(main())
