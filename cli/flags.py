"""The one flag library of the ``dpforge`` command line.

argparse reads every flag value as text; the functions here check it after parsing, so
that a bad value is one :class:`CliError` line naming the flag, the allowed range and the
value as typed (``--delta must be in (0, 1), got 2``).  Nothing is clamped.

* numbers and integers: :func:`number` (with the ranges :data:`POSITIVE`,
  :data:`NON_NEGATIVE`, :data:`PROBABILITY`, :data:`SAMPLING_RATE`), :func:`integer`,
  :func:`steps`, :func:`sampling_rate`, :func:`sensitivity`, :func:`delta`,
  :func:`relative_accuracy`, :func:`existing_folder`;
* the mechanism a command accounts: :func:`mechanism_description` reads the mechanism
  flags (``--noise``, ``--noise-multiplier``, ``--scale``, ``--sensitivity``,
  ``--sampling-rate``, ``--steps``), ``--plan FILE`` or ``--lmo FILE``
  (:func:`load_lmo_file`);
* engines: ``--engine`` (its choices are the library's registry, :data:`ENGINE_NAMES`)
  and the montecarlo options ``--samples``/``--confidence``/``--seed``
  (:func:`engine_options`, :func:`engines_options`);
* adding these flags to a parser: :func:`add_mechanism_flags`, :func:`add_sampling_flags`,
  :func:`add_engine_flags`, :func:`add_common_flags`.

Nothing heavy is imported at module level: plan files, LMO files and the engine registry
are imported when a check needs them, so building the parser (``dpforge --help``) does
not load scipy or numba.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpforge.errors import DpforgeError, InputFileError
from dpforge.validation import (
    LARGEST_COUNT,
    SMALLEST_PROBABILITY,
    require_count,
    require_non_negative,
    require_positive,
    require_probability_open,
    require_sampling_rate,
)

if TYPE_CHECKING:
    from dpforge.budget.plan import Phase, Plan
    from dpforge.mechanisms.combinators import Description
    from dpforge.mechanisms.lmo import LMO


class CliError(DpforgeError):
    """A user error of the command line (a bad or missing flag): reported as one line on
    stderr with exit code 2, like every :class:`~dpforge.errors.DpforgeError`."""


def flag_name(dest: str) -> str:
    """The flag of an argparse destination: ``noise_multiplier`` -> ``--noise-multiplier``."""
    return "--" + dest.replace("_", "-")


def _shown(text: str) -> str:
    """The value as typed, quoted only when it is not a number."""
    try:
        float(text)
    except (TypeError, ValueError):
        return repr(text)
    return text


# --------------------------------------------------------------------------- numbers

#: marks a flag without a default: leaving it out is an error
_REQUIRED: Any = object()


@dataclass(frozen=True)
class Range:
    """The allowed range of a number flag: the check of :mod:`dpforge.validation` and how
    the error messages state it (``allowed`` after "must be", ``noun`` after "is required")."""

    check: Callable[[str, object], float]
    allowed: str
    noun: str


POSITIVE = Range(require_positive, "a finite number > 0", "a number > 0")
NON_NEGATIVE = Range(require_non_negative, "a finite number >= 0", "a number >= 0")
PROBABILITY = Range(require_probability_open, "in (0, 1)", "a number in (0, 1)")
SAMPLING_RATE = Range(require_sampling_rate, "in (0, 1]", "a number in (0, 1]")


def number(flag: str, text: str | None, allowed: Range, *, default: Any = _REQUIRED) -> Any:
    """``text`` as a float in ``allowed``; ``default`` when the flag was not given (an error
    when no default is passed).  ``nan`` and ``inf`` parse and are then rejected like any
    out-of-range value."""
    if text is None:
        if default is _REQUIRED:
            raise CliError(f"{flag} is required ({allowed.noun})")
        return default
    try:
        return allowed.check(flag, float(text))
    except ValueError:  # not a number (float), or out of range (ParameterError)
        # a probability inside the interval but subnormal (5e-324) is refused too: say why
        subnormal = allowed in (PROBABILITY, SAMPLING_RATE) and _is_subnormal(text)
        bound = f" and at least {SMALLEST_PROBABILITY!r}" if subnormal else ""
        raise CliError(f"{flag} must be {allowed.allowed}{bound}, got {_shown(text)}") from None


def _is_subnormal(text: str) -> bool:
    """Whether ``text`` is a positive number below the smallest normal double."""
    try:
        return 0.0 < float(text) < SMALLEST_PROBABILITY
    except ValueError:
        return False


def integer(flag: str, text: str | None, minimum: int, *, default: Any = _REQUIRED, maximum: int | None = LARGEST_COUNT) -> Any:
    """``text`` as an integer >= ``minimum`` (``1e3`` is accepted, ``2.5`` is not);
    ``default`` when the flag was not given (an error when no default is passed)."""
    if text is None:
        if default is _REQUIRED:
            raise CliError(f"{flag} is required (an integer >= {minimum})")
        return default
    try:
        value: object = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            value = text
    try:
        return require_count(flag, value, minimum, maximum)
    except ValueError:
        # past ``maximum`` (2**53 unless given: the largest count the library takes) the
        # message says so; below it, the usual one
        over = isinstance(value, (int, float)) and maximum is not None and value > maximum
        bound = f" and at most {'2**53' if maximum == LARGEST_COUNT else maximum}" if over else ""
        raise CliError(f"{flag} must be an integer >= {minimum}{bound}, got {_shown(text)}") from None


#: why ``--sampling-rate`` and ``--steps`` have no default: a forgotten flag would
#: silently answer for one full-batch step
_WORKLOAD_HINT = "; give --sampling-rate 1 --steps 1 for one full-batch release"


def steps(text: str | None) -> int:
    """``--steps``: an integer >= 1, required (no silent one-step default)."""
    if text is None:
        raise CliError(f"--steps is required (an integer >= 1){_WORKLOAD_HINT}")
    return integer("--steps", text, 1)


def sampling_rate(text: str | None) -> float:
    """``--sampling-rate``: the Poisson sampling rate, in (0, 1], required (no silent
    full-batch default)."""
    if text is None:
        raise CliError(f"--sampling-rate is required (a number in (0, 1]){_WORKLOAD_HINT}")
    return number("--sampling-rate", text, SAMPLING_RATE)


def sensitivity(text: str | None) -> float:
    """``--sensitivity``: a finite number > 0 (default 1)."""
    return number("--sensitivity", text, POSITIVE, default=1.0)


def delta(text: str | None) -> float:
    """``--delta``: in (0, 1), required."""
    return number("--delta", text, PROBABILITY)


#: the relative accuracy asked when ``--relative-accuracy`` is not given
DEFAULT_RELATIVE_ACCURACY = 1e-3


def relative_accuracy(text: str | None) -> float:
    """``--relative-accuracy``: the target (upper - lower)/upper, in (0, 1) (default
    :data:`DEFAULT_RELATIVE_ACCURACY`)."""
    return number("--relative-accuracy", text, PROBABILITY, default=DEFAULT_RELATIVE_ACCURACY)


def existing_folder(flag: str, path: str | os.PathLike[str]) -> str:
    """``path`` (as a string) when the folder it would be written to exists."""
    text = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise CliError(f"{flag}: folder {folder!r} does not exist")
    return text


# --------------------------------------------------------------------------- mechanisms

#: The noise families the mechanism flags describe, and the destination of the flag that
#: sets each one's parameter.  Pure-DP and LMO steps are accounted from a plan file or
#: ``--lmo FILE`` (``--epsilon`` is the ``delta`` command's own flag).
NOISE_FLAGS: dict[str, str] = {"gaussian": "noise_multiplier", "laplace": "scale"}
#: The relation and fixed-size sampling flags (``--relation``, ``--sampling-scheme``,
#: ``--batch-size``, ``--dataset-size``); read by :func:`phase`.
SAMPLING_SCHEME_FLAGS = ("relation", "sampling_scheme", "batch_size", "dataset_size")
#: the schemes ``--sampling-scheme`` takes (a shuffled run is accounted from a plan file)
CLI_SAMPLING_SCHEMES = ("poisson", "without-replacement")
#: Flags that describe a mechanism; none may be combined with ``--plan``.
MECHANISM_FLAGS = ("noise", "noise_multiplier", "scale", "sensitivity", "sampling_rate", "steps", *SAMPLING_SCHEME_FLAGS)
#: Flags that describe another mechanism than an ``--lmo`` file.
_NOT_WITH_LMO = ("noise", "noise_multiplier", "scale", "sensitivity", "plan", *SAMPLING_SCHEME_FLAGS)


def phase(args: argparse.Namespace) -> Phase:
    """One phase (mechanism, sampling rate, steps) from the mechanism flags (every value
    is checked before the library is imported, so a bad flag is answered at once)."""
    noise = args.noise or "gaussian"
    parameter_dest = NOISE_FLAGS[noise]
    for other_noise, other_dest in NOISE_FLAGS.items():
        if other_noise != noise and getattr(args, other_dest, None) is not None:
            raise CliError(
                f"{flag_name(other_dest)} applies only to --noise {other_noise}; "
                f"--noise {noise} takes {flag_name(parameter_dest)}"
            )
    flag = flag_name(parameter_dest)
    text = getattr(args, parameter_dest)
    if text is None:
        raise CliError(f"{flag} is required (a number > 0 for --noise {noise})")
    values = {
        "parameter": number(flag, text, POSITIVE),
        **_sampling_scheme_values(args),
        "steps": steps(args.steps),
        "sensitivity": sensitivity(args.sensitivity),
        "relation": getattr(args, "relation", None) or "add-remove",
    }
    from dpforge.budget.plan import Phase

    return Phase(noise=noise, **values)


def _sampling_scheme_values(args: argparse.Namespace) -> dict[str, Any]:
    """``sampling_rate`` (``--sampling-rate``, Poisson), or the fixed-size scheme's
    ``sampling_scheme``, ``batch_size`` and ``dataset_size`` (the rate is then B/N and
    ``--sampling-rate`` is refused beside them)."""
    scheme = getattr(args, "sampling_scheme", None) or "poisson"
    if scheme == "poisson":
        given = [flag_name(dest) for dest in ("batch_size", "dataset_size") if getattr(args, dest, None) is not None]
        if given:
            raise CliError(f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} only to --sampling-scheme without-replacement")
        return {"sampling_rate": sampling_rate(args.sampling_rate)}
    if args.sampling_rate is not None:
        raise CliError(
            f"--sampling-rate cannot be combined with --sampling-scheme {scheme} (the rate is --batch-size/--dataset-size)"
        )
    for dest in ("batch_size", "dataset_size"):
        if getattr(args, dest, None) is None:
            raise CliError(f"{flag_name(dest)} is required with --sampling-scheme {scheme} (an integer >= 1)")
    batch, size = integer("--batch-size", args.batch_size, 1), integer("--dataset-size", args.dataset_size, 1)
    if batch > size:
        raise CliError(f"--batch-size must be at most --dataset-size ({size}), got {batch}")
    return {"sampling_scheme": scheme, "batch_size": batch, "dataset_size": size}


def load_plan_flag(args: argparse.Namespace) -> Plan:
    """The plan of ``--plan FILE``; mechanism flags may not be given with it."""
    from dpforge.budget.plan import load_plan

    given = [flag_name(dest) for dest in MECHANISM_FLAGS if getattr(args, dest, None) is not None]
    if given:
        raise CliError(f"--plan cannot be combined with {', '.join(given)} (the plan file describes the mechanism)")
    return load_plan(args.plan)


def mechanism_description(args: argparse.Namespace) -> tuple[Description, dict[str, Any], Plan | None]:
    """The description a command accounts (from ``--lmo FILE``, ``--plan FILE`` or the
    mechanism flags), a JSON summary of it, and the plan when ``--plan`` was given."""
    if getattr(args, "lmo", None) is not None:
        return (*lmo_description(args), None)
    if args.plan is not None:
        plan = load_plan_flag(args)
        summary = {"plan": os.fspath(args.plan), "phases": len(plan.phases), "workload_source": "plan"}
        return plan.description(), summary, plan
    one = phase(args)
    summary: dict[str, Any] = {
        "noise": one.noise,
        one.parameter_name: one.parameter,
        "sensitivity": one.sensitivity,
        "sampling_rate": one.sampling_rate,
        "steps": one.steps,
        "workload_source": "flags",
    }
    if one.sampling_scheme != "poisson":  # the relation and scheme are the result's own rows
        summary.update(batch_size=one.batch_size, dataset_size=one.dataset_size)
    return one.description(), summary, None


#: what :func:`read_lmo_file` reads besides the mechanism: the workload of a search result
@dataclass(frozen=True)
class LmoFile:
    """An LMO file: the mechanism, and the workload (sampling rate, steps) a search
    result was calibrated for (``None`` for a file holding the mechanism alone)."""

    mechanism: LMO
    sampling_rate: float | None = None
    steps: int | None = None


def _strict_lmo(data: Any) -> LMO:
    """The LMO of a mechanism object, every field stated (no field takes a default)."""
    from dpforge.mechanisms.lmo import LMO
    from dpforge.mechanisms.serialize import mechanism_to_dict

    if not isinstance(data, dict):
        raise InputFileError(f"mechanism: must be an LMO object, got {data!r}")
    fields = [name for name in mechanism_to_dict(LMO()) if name != "mechanism"]
    missing = [name for name in fields if name not in data]
    if missing:
        raise InputFileError(f"{missing[0]}: missing (an LMO file states every field: {', '.join(fields)})")
    return LMO.from_dict(data)


def read_lmo_file(path: str | os.PathLike[str]) -> LmoFile:
    """The LMO mechanism saved in a JSON file, and the workload when it is a search
    result (``dpforge lmo search --out``, read by :meth:`LMOSearchResult.from_dict`) rather
    than one mechanism object (``LMO.to_dict()``, every field stated, the kind may be
    left out).  The file is read by :func:`dpforge.budget.inputs.read_json_object`
    (at most 16 MiB, no repeated keys, no deep nesting); any problem is a one-line
    :class:`~dpforge.errors.InputFileError` naming the file and the field."""
    from dpforge.budget.inputs import read_json_object
    from dpforge.design import LMOSearchResult

    name = os.fspath(path)
    data = read_json_object(name, "LMO file")
    inner = data.get("mechanism")
    if not isinstance(inner, dict) and inner not in (None, "lmo"):
        raise InputFileError(f"LMO file {name}: 'mechanism' must be 'lmo' or an LMO object, got {inner!r}")
    try:
        if isinstance(inner, dict):  # a search result: the mechanism's own problems first
            _strict_lmo(inner)
            result = LMOSearchResult.from_dict(data)
            return LmoFile(result.mechanism, result.sampling_rate, result.steps)
        return LmoFile(_strict_lmo(data))
    except DpforgeError as error:  # InputFileError, naming the field
        raise InputFileError(f"LMO file {name}: {error}") from None


def load_lmo_file(path: str | os.PathLike[str]) -> LMO:
    """The LMO mechanism of an LMO file (:func:`read_lmo_file`)."""
    return read_lmo_file(path).mechanism


def lmo_description(args: argparse.Namespace) -> tuple[Description, dict[str, Any]]:
    """The description of ``--lmo FILE [--sampling-rate q] [--steps T]`` and a JSON
    summary of it.  The file fixes the mechanism (sensitivity included), so the other
    mechanism flags may not be given with ``--lmo``.  A search result also fixes the
    workload it was calibrated for: its sampling rate and steps are used unless the flags
    override them, and ``workload_source`` says which ("file", "flags" or
    "file+flags"); a note on stderr says so too."""
    import sys

    from dpforge.mechanisms.combinators import Composed, PoissonSampled

    given = [flag_name(dest) for dest in _NOT_WITH_LMO if getattr(args, dest, None) is not None]
    if given:
        raise CliError(f"--lmo cannot be combined with {', '.join(given)} (the LMO file describes the mechanism)")
    saved = read_lmo_file(args.lmo)
    rate_text, steps_text = getattr(args, "sampling_rate", None), getattr(args, "steps", None)
    if saved.sampling_rate is None:  # a bare mechanism: the flags must say the workload
        rate, count, source = sampling_rate(rate_text), steps(steps_text), "flags"
    else:
        rate = saved.sampling_rate if rate_text is None else sampling_rate(rate_text)
        count = saved.steps if steps_text is None else steps(steps_text)
        source = "file" if rate_text is None and steps_text is None else (
            "flags" if rate_text is not None and steps_text is not None else "file+flags"
        )
        print(
            f"dpforge: note: --lmo {os.fspath(args.lmo)}: sampling rate {rate:g} "
            f"({'flag' if rate_text is not None else 'saved in the file'}) and {count} steps "
            f"({'flag' if steps_text is not None else 'saved in the file'})",
            file=sys.stderr,
        )
    inner = saved.mechanism if rate >= 1.0 else PoissonSampled(saved.mechanism, rate)
    summary = {
        "noise": "lmo",
        "lmo": os.fspath(args.lmo),
        "sensitivity": saved.mechanism.sensitivity,
        "sampling_rate": rate,
        "steps": count,
        "workload_source": source,
    }
    return Composed([(inner, count)]), summary


# --------------------------------------------------------------------------- engines


class LazyNames(Sequence):
    """Names read from the library each time they are used (``loader()``), so that a
    parser can offer them as choices without importing the library when it is built.
    ``str()`` joins them with commas (for help texts)."""

    def __init__(self, loader: Callable[[], Sequence[str]]) -> None:
        self._loader = loader

    def __getitem__(self, index: Any) -> Any:
        return tuple(self._loader())[index]

    def __len__(self) -> int:
        return len(tuple(self._loader()))

    def __iter__(self) -> Any:
        return iter(tuple(self._loader()))

    def __contains__(self, name: object) -> bool:
        return name in tuple(self._loader())

    def __str__(self) -> str:
        return ",".join(self)


def _engine_names() -> tuple[str, ...]:
    from dpforge.accounting.api import engine_names

    return engine_names()


#: ``--engine``'s choices: the registered engines (:func:`dpforge.accounting.api.engine_names`)
ENGINE_NAMES = LazyNames(_engine_names)
#: the built-in engines as the help pages name them (reading the registry would import
#: the engines, numpy and scipy included, for ``--help``; the choices are still checked
#: against the registry when ``--engine`` is given)
BUILT_IN_ENGINES = "prv, montecarlo, pure, rdp"
#: the flags only the montecarlo engine takes: (flag, dest)
MONTECARLO_FLAGS = (("--samples", "samples"), ("--confidence", "confidence"), ("--seed", "seed"))


def montecarlo_options(args: argparse.Namespace) -> dict[str, Any]:
    """The montecarlo engine's options from ``--samples``/``--confidence``/``--seed``."""
    options: dict[str, Any] = {}
    if args.samples is not None:
        options["samples"] = integer("--samples", args.samples, 1)
    if args.confidence is not None:
        options["confidence"] = number("--confidence", args.confidence, PROBABILITY)
    if args.seed is not None:
        options["seed"] = integer("--seed", args.seed, 0, maximum=None)
    return options


def _montecarlo_flags_given(args: argparse.Namespace) -> list[str]:
    return [flag for flag, dest in MONTECARLO_FLAGS if getattr(args, dest, None) is not None]


def engine_name(text: str) -> str:
    """``--engine``: a registered engine (checked here, not by argparse, so that the help
    pages need not import the registry)."""
    names = tuple(ENGINE_NAMES)
    if text not in names:
        import difflib

        close = difflib.get_close_matches(text, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CliError(f"argument --engine: invalid choice: {text!r} (choose from {', '.join(map(repr, names))}){hint}")
    return text


def engine_options(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """``--engine`` (default: the library's default engine) and the options it takes
    (``--samples``/``--confidence``/``--seed`` belong to the montecarlo engine only)."""
    from dpforge.accounting.api import DEFAULT_ENGINE

    engine = DEFAULT_ENGINE if args.engine is None else engine_name(args.engine)
    if engine != "montecarlo":
        given = _montecarlo_flags_given(args)
        if given:
            raise CliError(f"{given[0]} applies only to --engine montecarlo, not --engine {engine}")
        return engine, {}
    return engine, montecarlo_options(args)


def engines_options(args: argparse.Namespace, default: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, dict[str, Any]]]:
    """A repeatable ``--engine`` (``default`` when not given, repeats dropped) and the
    options of each engine that takes any (montecarlo)."""
    engines = tuple(dict.fromkeys(engine_name(name) for name in args.engine)) if args.engine else default
    if "montecarlo" not in engines:
        given = _montecarlo_flags_given(args)
        if given:
            raise CliError(f"{given[0]} applies only to --engine montecarlo")
        return engines, {}
    return engines, {"montecarlo": montecarlo_options(args)}


# --------------------------------------------------------------------------- adding flags


def add_sampling_flags(parser: argparse.ArgumentParser) -> None:
    """``--noise``, ``--sensitivity``, ``--sampling-rate`` and ``--steps``."""
    parser.add_argument("--noise", choices=tuple(NOISE_FLAGS), help="noise family (default gaussian)")
    parser.add_argument("--sensitivity", metavar="S", help="sensitivity, > 0 (default 1)")
    add_workload_flags(parser)


def add_workload_flags(parser: argparse.ArgumentParser, *, from_lmo_file: bool = False) -> None:
    """``--sampling-rate`` and ``--steps``: required, no default (``--sampling-rate 1
    --steps 1`` is one full-batch release); ``from_lmo_file``: an ``--lmo`` search result
    supplies them."""
    where = "; default: the --lmo search result's" if from_lmo_file else ""
    parser.add_argument("--sampling-rate", metavar="Q", help=f"Poisson sampling rate, in (0, 1], required (1: full batch){where}")
    parser.add_argument("--steps", metavar="T", help=f"number of steps, an integer >= 1, required{where}")


def add_mechanism_flags(parser: argparse.ArgumentParser) -> None:
    """The sampling flags, the noise parameters, ``--plan FILE`` and ``--lmo FILE``
    (what :func:`mechanism_description` reads)."""
    parser.add_argument("--noise", choices=tuple(NOISE_FLAGS), help="noise family (default gaussian)")
    parser.add_argument("--sensitivity", metavar="S", help="sensitivity, > 0 (default 1)")
    add_workload_flags(parser, from_lmo_file=True)
    parser.add_argument("--noise-multiplier", metavar="SIGMA", help="gaussian noise std / L2 sensitivity, > 0")
    parser.add_argument("--scale", metavar="B", help="laplace scale b, > 0")
    parser.add_argument(
        "--relation", choices=("add-remove", "replace-one"), help="neighbouring relation (default add-remove)"
    )
    parser.add_argument(
        "--sampling-scheme", choices=CLI_SAMPLING_SCHEMES,
        help="poisson (default, --sampling-rate) or without-replacement (fixed-size batches: --batch-size, --dataset-size)",
    )
    parser.add_argument("--batch-size", metavar="B", help="without-replacement: batch size, an integer >= 1")
    parser.add_argument("--dataset-size", metavar="N", help="without-replacement: dataset size, an integer >= B")
    parser.add_argument("--plan", metavar="FILE", help="account a TOML plan file instead of mechanism flags")
    parser.add_argument("--lmo", metavar="FILE", help="account a saved LMO mechanism (JSON, see dpforge lmo search --out)")


def add_engine_flags(parser: argparse.ArgumentParser, *, repeatable: bool = False) -> None:
    """``--engine`` (once, or ``repeatable`` for several) and the montecarlo options."""
    if repeatable:
        parser.add_argument(
            "--engine", action="append", metavar="ENGINE",
            help=f"an engine to draw, one of {BUILT_IN_ENGINES}; repeat for several (default prv and rdp)",
        )
    else:
        parser.add_argument(
            "--engine", metavar="ENGINE", help=f"the accountant, one of {BUILT_IN_ENGINES} (default prv)"
        )
    parser.add_argument("--samples", metavar="N", help="montecarlo: samples of the composed loss, an integer >= 1")
    parser.add_argument("--confidence", metavar="C", help="montecarlo: probability of the bound, in (0, 1) (default 0.99)")
    parser.add_argument("--seed", metavar="S", help="montecarlo: random seed, an integer >= 0 (default random, reported)")


def add_command(subparsers: Any, name: str, *, help: str, description: str, examples: str, exit_codes: bool = True) -> argparse.ArgumentParser:
    """One (sub)command parser in the house style: a one-line ``help``, a ``description``,
    and an epilog of ``examples`` followed (unless ``exit_codes`` is false) by the exit
    status table, printed as written."""
    from dpforge.cli.output import EXIT_CODES_TEXT

    return subparsers.add_parser(
        name,
        help=help,
        description=description,
        epilog=examples + "\n\n" + EXIT_CODES_TEXT if exit_codes else examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """``--relative-accuracy``, ``--accept-looser`` and ``--json``."""
    parser.add_argument(
        "--relative-accuracy",
        metavar="R",
        help="target (upper - lower)/upper of the certified bounds, in (0, 1) (default 1e-3); "
        "a wider result exits with status 3",
    )
    add_accept_looser_flag(parser)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def add_accept_looser_flag(parser: argparse.ArgumentParser) -> None:
    """``--accept-looser``: a result less accurate than requested exits 0 (still warned)."""
    parser.add_argument(
        "--accept-looser",
        action="store_true",
        help="accept certified bounds looser than --relative-accuracy: warn on stderr but exit 0 instead of 3",
    )
