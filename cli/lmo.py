"""``dpforge lmo search`` and ``dpforge epsilon --lmo FILE``: LMO noise from the command line.

    dpforge lmo search --target-epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000 \\
        [--objective variance|abs] [--components gamma,uniform] [--sensitivity 1] \\
        [--seed 0] [--time-limit 60] [--workers 2] [--json] [--out best.json]
    dpforge epsilon --lmo best.json --sampling-rate 0.01 --steps 1000 --delta 1e-5

``cli/main.py`` hooks these in with :func:`add_lmo_commands` (the ``lmo`` command, and
the ``--lmo FILE`` flag on ``epsilon`` and ``delta``) and :func:`lmo_description` (the
description that ``--lmo`` accounts).  Errors are one-line ``ValueError`` messages that
name the flag; the ``dpforge`` entry point prints them on stderr and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from dpforge.mechanisms.combinators import Composed, Description, PoissonSampled
from dpforge.mechanisms.lmo import COMPONENTS, LMO

#: flags of ``epsilon``/``delta`` that describe another mechanism; not allowed with --lmo
_OTHER_MECHANISM_FLAGS = (("noise", "--noise"), ("noise_multiplier", "--noise-multiplier"), ("scale", "--scale"),
                          ("sensitivity", "--sensitivity"), ("plan", "--plan"))


# --------------------------------------------------------------------------- files


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def load_lmo_file(path: str | os.PathLike) -> LMO:
    """The LMO mechanism saved in a JSON file: either a search result (as written by
    ``dpforge lmo search --out`` or :meth:`LMOSearchResult.to_json`, whose
    ``"mechanism"`` is the LMO) or a bare ``LMO.to_dict()`` object.  Any problem is a
    one-line ``ValueError`` naming the file and what is wrong."""
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read LMO file {name}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"LMO file {name} is not a UTF-8 text (JSON) file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"LMO file {name} is not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"LMO file {name} must hold a JSON object, got {type(data).__name__}")
    inner = data.get("mechanism")
    if isinstance(inner, dict):
        data = inner  # a search result: the mechanism is nested
    elif inner not in (None, "lmo"):
        raise ValueError(f"LMO file {name}: 'mechanism' must be 'lmo' or an LMO object, got {inner!r}")
    try:
        return LMO.from_dict(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"LMO file {name}: {_one_line(error)}") from None


# --------------------------------------------------------------------------- flag values


def _shown(text: str) -> str:
    try:
        float(text)
    except (TypeError, ValueError):
        return repr(text)
    return text


def _number(flag: str, text: str | None, allowed: str, check, default: float | None = None) -> float:
    if text is None:
        if default is None:
            raise ValueError(f"{flag} is required ({allowed})")
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and check(value)):
        raise ValueError(f"{flag} must be {allowed}, got {_shown(text)}")
    return value


def _integer(flag: str, text: str | None, minimum: int, default: int | None = None) -> int:
    if text is None:
        if default is None:
            raise ValueError(f"{flag} is required (an integer >= {minimum})")
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value.is_integer() and value >= minimum):
        raise ValueError(f"{flag} must be an integer >= {minimum}, got {_shown(text)}")
    return int(value)


def _sampling_rate(text: str | None) -> float:
    return _number("--sampling-rate", text, "in (0, 1]", lambda v: 0.0 < v <= 1.0, default=1.0)


def _components(text: str | None) -> tuple[str, ...]:
    if text is None:
        return COMPONENTS
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in COMPONENTS]
    if not names or unknown:
        raise ValueError(
            f"--components must be a comma-separated list of {', '.join(COMPONENTS)}, got {text!r}"
        )
    return names


# --------------------------------------------------------------------------- epsilon/delta --lmo


def lmo_description(args: argparse.Namespace) -> tuple[Description, dict[str, Any]]:
    """The description accounted by ``dpforge epsilon|delta --lmo FILE [--sampling-rate q]
    [--steps T]`` and a JSON summary of it.  The file fixes the mechanism (sensitivity
    included), so the other mechanism flags may not be given with ``--lmo``."""
    given = [flag for dest, flag in _OTHER_MECHANISM_FLAGS if getattr(args, dest, None) is not None]
    if given:
        raise ValueError(f"--lmo cannot be combined with {', '.join(given)} (the LMO file describes the mechanism)")
    mechanism = load_lmo_file(args.lmo)
    sampling_rate = _sampling_rate(getattr(args, "sampling_rate", None))
    steps = _integer("--steps", getattr(args, "steps", None), 1, default=1)
    inner = mechanism if sampling_rate >= 1.0 else PoissonSampled(mechanism, sampling_rate)
    summary = {
        "noise": "lmo",
        "lmo": os.fspath(args.lmo),
        "sensitivity": mechanism.sensitivity,
        "sampling_rate": sampling_rate,
        "steps": steps,
    }
    return Composed([(inner, steps)]), summary


# --------------------------------------------------------------------------- lmo search


def _command_search(args: argparse.Namespace) -> int:
    from dpforge.design.search import _spawn_pool, lmo_search

    target = _number("--target-epsilon", args.target_epsilon, "a finite number > 0", lambda v: v > 0)
    delta = _number("--delta", args.delta, "in (0, 1)", lambda v: 0.0 < v < 1.0)
    sampling_rate = _sampling_rate(args.sampling_rate)
    steps = _integer("--steps", args.steps, 1, default=1)
    sensitivity = _number("--sensitivity", args.sensitivity, "a finite number > 0", lambda v: v > 0, default=1.0)
    seed = _integer("--seed", args.seed, 0, default=0)
    time_limit = _number("--time-limit", args.time_limit, "a finite number > 0", lambda v: v > 0, default=60.0)
    workers = _integer("--workers", args.workers, 0, default=2)
    components = _components(args.components)
    out = args.out
    if out is not None:
        directory = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(directory):
            raise ValueError(f"--out: directory {directory} does not exist")
    executor: Any = "serial" if workers <= 1 else (None if workers == 2 else _spawn_pool(workers))
    try:
        result = lmo_search(
            target,
            delta,
            sampling_rate,
            steps,
            objective=args.objective or "variance",
            components=components,
            seed=seed,
            executor=executor,
            time_limit=time_limit,
            sensitivity=sensitivity,
        )
    finally:
        if executor not in (None, "serial"):
            executor.shutdown(wait=True, cancel_futures=True)
    if out is not None:
        try:
            Path(out).write_text(result.to_json(indent=2) + "\n", encoding="utf-8")
        except OSError as error:
            raise ValueError(f"cannot write --out {out}: {error.strerror or error}") from None
    if args.json:
        print(json.dumps({**result.to_dict(), **({"out": os.fspath(out)} if out else {})}, allow_nan=False))
        return 0
    print(_render(result, out))
    return 0


def _render(result, out: str | None) -> str:
    m = result.mechanism
    rows: list[tuple[str, Any]] = [("weights (gamma, exponential, uniform)", ", ".join(f"{w:.6g}" for w in m.weights))]
    if m.weights[0] > 0:
        rows += [("gamma shape", m.gamma_shape), ("gamma scale", m.gamma_scale)]
    if m.weights[1] > 0:
        rows += [("exponential rate", m.exponential_rate)]
    if m.weights[2] > 0:
        rows += [("uniform low", m.uniform_low), ("uniform high", m.uniform_high)]
    rows += [
        ("epsilon (certified upper)", result.epsilon),
        ("epsilon lower", result.epsilon_lower),
        ("target epsilon", result.target_epsilon),
        ("delta", result.delta),
        ("sampling rate", result.sampling_rate),
        ("steps", result.steps),
        ("sensitivity", m.sensitivity),
        (f"objective ({result.objective})", result.objective_value),
        ("std", result.std),
        ("E|noise|", result.mean_absolute),
        ("gaussian noise multiplier", result.gaussian_noise_multiplier),
        ("std / gaussian std", result.std_ratio),
        ("E|noise| / gaussian E|noise|", result.abs_ratio),
        ("shapes calibrated", result.evaluations),
        ("seconds", result.elapsed),
        ("stopped early", result.stopped_early),
    ]
    if out is not None:
        rows.append(("saved to", os.fspath(out)))
    width = max(len(label) for label, _ in rows)
    lines = []
    for label, value in rows:
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"{label.ljust(width)}  {text}")
    return "\n".join(lines)


def add_lmo_commands(subparsers: Any) -> None:
    """Add ``lmo search`` to the ``dpforge`` subcommands, and ``--lmo FILE`` to the
    ``epsilon`` and ``delta`` subcommands already present (flag values are checked
    after parsing, like every dpforge flag)."""
    lmo = subparsers.add_parser("lmo", help="LMO noise: offline search of mixture parameters")
    commands = lmo.add_subparsers(dest="lmo_command", required=True, metavar="LMO_COMMAND")
    search = commands.add_parser(
        "search", help="LMO minimising the noise under a certified epsilon, next to the calibrated Gaussian"
    )
    search.add_argument("--target-epsilon", metavar="EPS", help="> 0 (required)")
    search.add_argument("--delta", metavar="DELTA", help="in (0, 1) (required)")
    search.add_argument("--sampling-rate", metavar="Q", help="Poisson sampling rate, in (0, 1] (default 1)")
    search.add_argument("--steps", metavar="T", help="number of steps, an integer >= 1 (default 1)")
    search.add_argument("--objective", choices=("variance", "abs"), help="what to minimise (default variance)")
    search.add_argument(
        "--components", metavar="LIST", help=f"comma-separated subset of {','.join(COMPONENTS)} (default all)"
    )
    search.add_argument("--sensitivity", metavar="S", help="sensitivity of the scalar query, > 0 (default 1)")
    search.add_argument("--seed", metavar="S", help="seed of the search, an integer >= 0 (default 0)")
    search.add_argument("--time-limit", metavar="SECONDS", help="> 0 (default 60)")
    search.add_argument("--workers", metavar="N", help="worker processes, an integer >= 0; 0 or 1 runs serially (default 2)")
    search.add_argument("--out", metavar="FILE", help="write the result as JSON (readable by dpforge epsilon --lmo)")
    search.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    search.set_defaults(handler=_command_search)
    for name in ("epsilon", "delta"):
        parser = getattr(subparsers, "choices", {}).get(name)
        if parser is None:
            continue
        try:
            parser.add_argument("--lmo", metavar="FILE", help="account a saved LMO mechanism (JSON, see dpforge lmo search --out)")
        except argparse.ArgumentError:
            pass  # already there


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dpforge.cli.lmo search ...``: the ``lmo`` commands on their own, with the
    ``dpforge`` error conventions (one line on stderr, exit 2)."""
    from dpforge.cli import main as cli

    parser = cli._Parser(prog=cli.PROG)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_lmo_commands(commands)
    try:
        args = parser.parse_args(["lmo", *(sys.argv[1:] if argv is None else argv)])
        return args.handler(args)
    except SystemExit as exit_request:
        code = exit_request.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except (cli.CliError, ValueError, ArithmeticError) as error:
        return cli._error(error)


if __name__ == "__main__":
    raise SystemExit(main())
