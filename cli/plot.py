"""``dpforge plot profile|steps|noise|rdp``: figures of :mod:`dpforge.plots` written to a file.

    dpforge plot profile --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out profile.png
    dpforge plot steps   examples/plans/within_budget.toml --engine prv --engine rdp --out steps.png
    dpforge plot noise   --target-epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --lmo best.json --out noise.png
    dpforge plot rdp     --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out rdp.png

The figure's format follows the suffix of ``--out`` (png, pdf, svg).  Flags are read by
:mod:`dpforge.cli.flags`, like every ``dpforge`` command's; matplotlib and the plots are
imported when a command runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from dpforge.cli import flags
from dpforge.cli.output import EXIT_OK

#: the engines drawn when no --engine is given
_DEFAULT_ENGINES = ("prv", "rdp")


#: the most points a curve may ask for (each point is one accounting call)
MAX_POINTS = 10_000


def _points(args: argparse.Namespace, default: int) -> int:
    points = flags.integer("--points", args.points, 2, default=default)
    if points > MAX_POINTS:
        raise flags.CliError(f"--points must be an integer in [2, {MAX_POINTS}], got {args.points}")
    return points


#: the figure formats --out accepts: those every matplotlib >= 3.7 writes
#: (FigureCanvasBase.get_supported_filetypes(); written out so that checking --out imports
#: nothing; a test checks that matplotlib supports each)
FIGURE_FORMATS = ("eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif", "tiff", "webp")


def _out(args: argparse.Namespace) -> str:
    """``--out``, checked before any work: a known image suffix in an existing folder."""
    if args.out is None:
        raise flags.CliError("--out is required (the figure's file, e.g. profile.png)")
    path = os.fspath(args.out)
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    formats = FIGURE_FORMATS
    if suffix not in formats:
        raise flags.CliError(f"--out must end in an image suffix ({', '.join('.' + f for f in formats)}), got {path!r}")
    return flags.existing_folder("--out", path)


def _written(ax: Any, path: str) -> int:
    from dpforge.plots import save

    save(ax, path)
    print(path)
    return EXIT_OK


def _command_profile(args: argparse.Namespace) -> int:
    path = _out(args)  # checked before the plots and engines are imported
    from dpforge.plots import plot_privacy_profile

    description, _, _ = flags.mechanism_description(args)
    engines, options = flags.engines_options(args, _DEFAULT_ENGINES)
    ax = plot_privacy_profile(description, engines=engines, points=_points(args, 25), engine_options=options)
    return _written(ax, path)


def _command_steps(args: argparse.Namespace) -> int:
    path = _out(args)  # checked before the plots and engines are imported
    from dpforge.plots import plot_epsilon_vs_steps

    if args.plan_file is not None:
        if args.plan is not None:
            raise flags.CliError("give the plan either as PLAN or as --plan, not both")
        args.plan = args.plan_file
    description, _, plan = flags.mechanism_description(args)
    budget = flags.number("--budget", args.budget, flags.NON_NEGATIVE, default=None)
    engines, options = flags.engines_options(args, _DEFAULT_ENGINES)
    points = _points(args, 24)
    if plan is not None:
        delta = plan.delta if args.delta is None else flags.delta(args.delta)
        ax = plot_epsilon_vs_steps(
            plan, delta=delta, engines=engines, points=points, engine_options=options, budget_epsilon=budget
        )
    else:
        (step, steps), = description.parts
        ax = plot_epsilon_vs_steps(
            step, steps=steps, delta=flags.delta(args.delta), engines=engines, points=points,
            engine_options=options, budget_epsilon=budget,
        )
    return _written(ax, path)


def _command_noise(args: argparse.Namespace) -> int:
    path = _out(args)  # checked before the plots and engines are imported
    from dpforge.accounting import calibrate_laplace_scale, calibrate_noise_multiplier
    from dpforge.mechanisms import Gaussian, Laplace
    from dpforge.plots import plot_noise_densities

    sensitivity = flags.sensitivity(args.sensitivity)
    target_flags = ("target_epsilon", "delta", "sampling_rate", "steps")
    calibrating = [dest for dest in target_flags if getattr(args, dest) is not None]
    mechanisms: dict[str, Any] = {}
    sigma = flags.number("--noise-multiplier", args.noise_multiplier, flags.POSITIVE, default=None)
    scale = flags.number("--scale", args.scale, flags.POSITIVE, default=None)
    if calibrating:
        missing = [flags.flag_name(dest) for dest in ("target_epsilon", "delta") if getattr(args, dest) is None]
        if missing:
            raise flags.CliError(f"calibrating the noise needs {' and '.join(missing)} (with --sampling-rate and --steps)")
        target = flags.number("--target-epsilon", args.target_epsilon, flags.POSITIVE)
        delta = flags.delta(args.delta)
        sampling_rate = flags.sampling_rate(args.sampling_rate)
        steps = flags.steps(args.steps)
        if sigma is None:
            sigma = calibrate_noise_multiplier(sampling_rate, steps, target, delta).parameter
        if scale is None:
            scale = calibrate_laplace_scale(sampling_rate, steps, target, delta, sensitivity=sensitivity).parameter
    if sigma is not None:
        mechanisms[f"Gaussian σ={sigma:.4g}"] = Gaussian(sigma, sensitivity)
    if scale is not None:
        mechanisms[f"Laplace b={scale:.4g}"] = Laplace(scale, sensitivity)
    for lmo_path in args.lmo or ():
        mechanisms[f"LMO {os.path.basename(lmo_path)}"] = flags.load_lmo_file(lmo_path)
    if not mechanisms:
        raise flags.CliError(
            "nothing to draw: give --noise-multiplier, --scale or --lmo FILE, "
            "or --target-epsilon and --delta (with --sampling-rate, --steps) to calibrate them"
        )
    x_max = flags.number("--x-max", args.x_max, flags.POSITIVE, default=None)
    ax = plot_noise_densities(mechanisms, x_max=x_max, log_scale=not args.linear)
    return _written(ax, path)


def _command_rdp(args: argparse.Namespace) -> int:
    path = _out(args)  # checked before the plots and engines are imported
    from dpforge.plots import plot_rdp_curves

    description, summary, _ = flags.mechanism_description(args)
    label = os.fspath(args.plan) if args.plan is not None else ", ".join(
        f"{key}={value}" for key, value in summary.items() if key not in ("sensitivity", "workload_source")
    )
    return _written(plot_rdp_curves({label: description}), path)


def _add_curve_flags(parser: argparse.ArgumentParser) -> None:
    flags.add_engine_flags(parser, repeatable=True)
    parser.add_argument("--points", metavar="N", help=f"points on the curve, an integer in [2, {MAX_POINTS}]")


def _add_out_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="FILE", help="the figure's file; format from the suffix (required)")


_PLOT_EXAMPLES = """examples:
  dpforge plot profile --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out /tmp/profile.png
  dpforge plot steps examples/plans/within_budget.toml --out /tmp/steps.png"""


def add_plot_commands(subparsers: Any) -> None:
    """Add ``plot profile|steps|noise|rdp`` to the ``dpforge`` subcommands."""
    plot = flags.add_command(
        subparsers,
        "plot",
        help="draw a privacy profile, epsilon over steps, noise densities or RDP curves",
        description="Figures of dpforge.plots written to --out (png, pdf or svg, from the suffix).",
        examples=_PLOT_EXAMPLES, exit_codes=False,
    )
    commands = plot.add_subparsers(dest="plot_command", required=True, metavar="FIGURE")

    profile = flags.add_command(
        commands,
        "profile",
        help="delta(epsilon) of each engine (certified upper bounds; PRV also its lower bound)",
        description="The privacy profile delta(epsilon) of a mechanism: each engine's certified upper bound, and the PRV engine's certified lower bound (the gap is the PRV bracket, visible where it is wide).",
        examples="examples:\n  dpforge plot profile --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out /tmp/profile.png",
    )
    flags.add_mechanism_flags(profile)
    _add_curve_flags(profile)
    _add_out_flag(profile)
    profile.set_defaults(handler=_command_profile)

    steps = flags.add_command(
        commands,
        "steps",
        help="epsilon after each step of a plan (or of --steps repeats)",
        description="The certified epsilon after each step of a plan (phase boundaries named) or of --steps repeats of one mechanism, per engine, with an optional budget line.",
        examples="examples:\n  dpforge plot steps examples/plans/within_budget.toml --out /tmp/steps.png",
    )
    steps.add_argument("plan_file", nargs="?", metavar="PLAN", help="TOML plan file")
    flags.add_mechanism_flags(steps)
    steps.add_argument("--delta", metavar="DELTA", help="in (0, 1); with a plan defaults to the plan's delta")
    steps.add_argument("--budget", metavar="EPS", help="draw a budget line at this epsilon (default the plan's)")
    _add_curve_flags(steps)
    _add_out_flag(steps)
    steps.set_defaults(handler=_command_steps)

    noise = flags.add_command(
        commands,
        "noise",
        help="densities of Gaussian, Laplace and LMO noise (log scale)",
        description="The densities of Gaussian, Laplace and saved LMO noise; with --target-epsilon, --delta, --sampling-rate and --steps the Gaussian and Laplace are calibrated to that workload first.",
        examples="examples:\n  dpforge plot noise --target-epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --out /tmp/noise.png",
    )
    noise.add_argument("--noise-multiplier", metavar="SIGMA", help="draw Gaussian noise of std SIGMA x sensitivity")
    noise.add_argument("--scale", metavar="B", help="draw Laplace noise of scale B")
    noise.add_argument("--lmo", action="append", metavar="FILE", help="draw a saved LMO mechanism; repeatable")
    noise.add_argument("--sensitivity", metavar="S", help="sensitivity, > 0 (default 1)")
    noise.add_argument("--target-epsilon", metavar="EPS", help="calibrate the Gaussian and Laplace noise to this epsilon")
    noise.add_argument("--delta", metavar="DELTA", help="in (0, 1), with --target-epsilon")
    flags.add_workload_flags(noise)
    noise.add_argument("--x-max", metavar="X", help="draw over [-X, X], > 0 (default 6 standard deviations)")
    noise.add_argument("--linear", action="store_true", help="linear density axis (default log)")
    _add_out_flag(noise)
    noise.set_defaults(handler=_command_noise)

    rdp = flags.add_command(
        commands,
        "rdp",
        help="the RDP curve of a description or plan",
        description="The composed Renyi-DP curve epsilon_RDP(alpha) of a mechanism or plan, with the order that gives the tightest epsilon marked.",
        examples="examples:\n  dpforge plot rdp --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out /tmp/rdp.png",
    )
    flags.add_mechanism_flags(rdp)
    _add_out_flag(rdp)
    rdp.set_defaults(handler=_command_rdp)
