"""``dpforge plot profile|steps|noise|rdp``: figures of :mod:`dpforge.plots` written to a file.

    dpforge plot profile --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out profile.png
    dpforge plot steps   examples/plans/within_budget.toml --engine prv --engine rdp --out steps.png
    dpforge plot noise   --target-epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --lmo best.json --out noise.png
    dpforge plot rdp     --noise-multiplier 1 --sampling-rate 0.01 --steps 1000 --out rdp.png

The figure's format follows the suffix of ``--out`` (png, pdf, svg).  Errors follow the
``dpforge`` convention: one line on stderr, exit code 2.  The parser helpers of
:mod:`dpforge.cli.main` are imported when the commands are built (that module imports
this one first).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

ENGINE_CHOICES = ("prv", "rdp", "montecarlo", "pure")


def _cli():
    from dpforge.cli import main

    return main


def _engines(args: argparse.Namespace, default: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, dict[str, Any]]]:
    """``--engine`` (repeatable) and the montecarlo options, checked like ``dpforge epsilon``'s."""
    cli = _cli()
    engines = tuple(dict.fromkeys(args.engine)) if args.engine else default
    given = [flag for flag, dest in cli._MONTECARLO_FLAGS if getattr(args, dest) is not None]
    if "montecarlo" not in engines:
        if given:
            raise cli.CliError(f"{given[0]} applies only to --engine montecarlo")
        return engines, {}
    return engines, {"montecarlo": cli.montecarlo_options(args)}


def _points(args: argparse.Namespace, default: int) -> int:
    return default if args.points is None else _cli()._integer_flag("--points", args.points, 2)


def _out(args: argparse.Namespace) -> str:
    """``--out``, checked before any work: a known image suffix in an existing folder."""
    from matplotlib.backend_bases import FigureCanvasBase

    cli = _cli()
    if args.out is None:
        raise cli.CliError("--out is required (the figure's file, e.g. profile.png)")
    path = os.fspath(args.out)
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    if suffix not in formats:
        raise cli.CliError(f"--out must end in an image suffix ({', '.join('.' + f for f in formats)}), got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise cli.CliError(f"--out: folder {folder!r} does not exist")
    return path


def _written(ax: Any, path: str) -> int:
    from dpforge.plots import save

    save(ax, path)
    print(path)
    return 0


def _command_profile(args: argparse.Namespace) -> int:
    from dpforge.plots import plot_privacy_profile

    path = _out(args)
    description, _, _ = _cli()._description(args)
    engines, options = _engines(args, ("prv", "rdp"))
    ax = plot_privacy_profile(description, engines=engines, points=_points(args, 25), engine_options=options)
    return _written(ax, path)


def _command_steps(args: argparse.Namespace) -> int:
    from dpforge.plots import plot_epsilon_vs_steps

    cli = _cli()
    path = _out(args)
    if args.plan_file is not None:
        if args.plan is not None:
            raise cli.CliError("give the plan either as PLAN or as --plan, not both")
        args.plan = args.plan_file
    description, _, plan = cli._description(args)
    budget = None if args.budget is None else cli._checked("--budget", args.budget, cli.require_non_negative)
    engines, options = _engines(args, ("prv", "rdp"))
    points = _points(args, 24)
    if plan is not None:
        delta = plan.delta if args.delta is None else cli._delta_flag(args)
        ax = plot_epsilon_vs_steps(
            plan, delta=delta, engines=engines, points=points, engine_options=options, budget_epsilon=budget
        )
    else:
        (step, steps), = description.parts
        ax = plot_epsilon_vs_steps(
            step, steps=steps, delta=cli._delta_flag(args), engines=engines, points=points,
            engine_options=options, budget_epsilon=budget,
        )
    return _written(ax, path)


def _command_noise(args: argparse.Namespace) -> int:
    from dpforge.accounting import calibrate_laplace_scale, calibrate_noise_multiplier
    from dpforge.cli.lmo import load_lmo_file
    from dpforge.mechanisms import Gaussian, Laplace
    from dpforge.plots import plot_noise_densities

    cli = _cli()
    path = _out(args)
    sensitivity = cli._sensitivity(args)
    target_flags = ("target_epsilon", "delta", "sampling_rate", "steps")
    calibrating = [dest for dest in target_flags if getattr(args, dest) is not None]
    mechanisms: dict[str, Any] = {}
    sigma = None if args.noise_multiplier is None else cli._checked("--noise-multiplier", args.noise_multiplier, cli.require_positive)
    scale = None if args.scale is None else cli._checked("--scale", args.scale, cli.require_positive)
    if calibrating:
        missing = [cli._flag(dest) for dest in ("target_epsilon", "delta") if getattr(args, dest) is None]
        if missing:
            raise cli.CliError(f"calibrating the noise needs {' and '.join(missing)} (with --sampling-rate and --steps)")
        target = cli._checked("--target-epsilon", args.target_epsilon, cli.require_positive)
        delta = cli._delta_flag(args)
        sampling_rate = cli._sampling_rate(args)
        steps = cli._steps(args.steps) if args.steps is not None else 1
        if sigma is None:
            sigma = calibrate_noise_multiplier(sampling_rate, steps, target, delta).parameter
        if scale is None:
            scale = calibrate_laplace_scale(sampling_rate, steps, target, delta, sensitivity=sensitivity).parameter
    if sigma is not None:
        mechanisms[f"Gaussian σ={sigma:.4g}"] = Gaussian(sigma, sensitivity)
    if scale is not None:
        mechanisms[f"Laplace b={scale:.4g}"] = Laplace(scale, sensitivity)
    for lmo_path in args.lmo or ():
        mechanisms[f"LMO {os.path.basename(lmo_path)}"] = load_lmo_file(lmo_path)
    if not mechanisms:
        raise cli.CliError(
            "nothing to draw: give --noise-multiplier, --scale or --lmo FILE, "
            "or --target-epsilon and --delta (with --sampling-rate, --steps) to calibrate them"
        )
    x_max = None if args.x_max is None else cli._checked("--x-max", args.x_max, cli.require_positive)
    ax = plot_noise_densities(mechanisms, x_max=x_max, log_scale=not args.linear)
    return _written(ax, path)


def _command_rdp(args: argparse.Namespace) -> int:
    from dpforge.plots import plot_rdp_curves

    path = _out(args)
    description, summary, _ = _cli()._description(args)
    label = os.fspath(args.plan) if args.plan is not None else ", ".join(
        f"{key}={value}" for key, value in summary.items() if key != "sensitivity"
    )
    return _written(plot_rdp_curves({label: description}), path)


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine", action="append", choices=ENGINE_CHOICES, help="an engine to draw; repeat for several (default prv and rdp)"
    )
    parser.add_argument("--samples", metavar="N", help="montecarlo: samples per point, an integer >= 1")
    parser.add_argument("--confidence", metavar="C", help="montecarlo: probability of each bound, in (0, 1)")
    parser.add_argument("--seed", metavar="S", help="montecarlo: random seed, an integer >= 0")
    parser.add_argument("--points", metavar="N", help="points on the curve, an integer >= 2")


def add_plot_commands(subparsers: Any) -> None:
    """Add ``plot profile|steps|noise|rdp`` to the ``dpforge`` subcommands."""
    cli = _cli()
    plot = subparsers.add_parser("plot", help="draw a privacy profile, epsilon over steps, noise densities or RDP curves")
    commands = plot.add_subparsers(dest="plot_command", required=True, metavar="FIGURE")

    profile = commands.add_parser("profile", help="delta(epsilon) with certified bands from several engines")
    cli._add_mechanism_flags(profile)
    profile.add_argument("--lmo", metavar="FILE", help="a saved LMO mechanism (JSON, see dpforge lmo search --out)")
    _add_engine_flags(profile)
    profile.add_argument("--out", metavar="FILE", help="the figure's file; format from the suffix (required)")
    profile.set_defaults(handler=_command_profile)

    steps = commands.add_parser("steps", help="epsilon after each step of a plan (or of --steps repeats)")
    steps.add_argument("plan_file", nargs="?", metavar="PLAN", help="TOML plan file")
    cli._add_mechanism_flags(steps)
    steps.add_argument("--lmo", metavar="FILE", help="a saved LMO mechanism (JSON, see dpforge lmo search --out)")
    steps.add_argument("--delta", metavar="DELTA", help="in (0, 1); with a plan defaults to the plan's delta")
    steps.add_argument("--budget", metavar="EPS", help="draw a budget line at this epsilon (default the plan's)")
    _add_engine_flags(steps)
    steps.add_argument("--out", metavar="FILE", help="the figure's file; format from the suffix (required)")
    steps.set_defaults(handler=_command_steps)

    noise = commands.add_parser("noise", help="densities of Gaussian, Laplace and LMO noise (log scale)")
    noise.add_argument("--noise-multiplier", metavar="SIGMA", help="draw Gaussian noise of std SIGMA x sensitivity")
    noise.add_argument("--scale", metavar="B", help="draw Laplace noise of scale B")
    noise.add_argument("--lmo", action="append", metavar="FILE", help="draw a saved LMO mechanism; repeatable")
    noise.add_argument("--sensitivity", metavar="S", help="sensitivity, > 0 (default 1)")
    noise.add_argument("--target-epsilon", metavar="EPS", help="calibrate the Gaussian and Laplace noise to this epsilon")
    noise.add_argument("--delta", metavar="DELTA", help="in (0, 1), with --target-epsilon")
    noise.add_argument("--sampling-rate", metavar="Q", help="Poisson sampling rate, in (0, 1] (default 1)")
    noise.add_argument("--steps", metavar="T", help="number of steps, an integer >= 1 (default 1)")
    noise.add_argument("--x-max", metavar="X", help="draw over [-X, X], > 0 (default 6 standard deviations)")
    noise.add_argument("--linear", action="store_true", help="linear density axis (default log)")
    noise.add_argument("--out", metavar="FILE", help="the figure's file; format from the suffix (required)")
    noise.set_defaults(handler=_command_noise)

    rdp = commands.add_parser("rdp", help="the RDP curve of a description or plan")
    cli._add_mechanism_flags(rdp)
    rdp.add_argument("--lmo", metavar="FILE", help="a saved LMO mechanism (JSON, see dpforge lmo search --out)")
    rdp.add_argument("--out", metavar="FILE", help="the figure's file; format from the suffix (required)")
    rdp.set_defaults(handler=_command_rdp)
