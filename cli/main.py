"""``dpforge``: certified privacy accounting from the command line.

Subcommands::

    dpforge epsilon   --noise-multiplier 1.1 --sampling-rate 0.004 --steps 1000 --delta 1e-5
    dpforge delta     --noise laplace --scale 2 --steps 10 --epsilon 5
    dpforge calibrate --target-epsilon 8 --delta 1e-5 --sampling-rate 0.004 --steps 1000
    dpforge verify    plan.toml
    dpforge plot      profile|steps|noise|rdp ... --out FIGURE.png   (see dpforge.cli.plot)
    dpforge lmo       search ...                                     (see dpforge.cli.lmo)

``epsilon`` and ``delta`` also take ``--plan FILE`` or ``--lmo FILE`` instead of
mechanism flags.  Add ``--json`` for exactly one JSON object on stdout.

This module assembles the parser from the command modules (:mod:`~dpforge.cli.account`,
:mod:`~dpforge.cli.verify`, :mod:`~dpforge.cli.lmo`, :mod:`~dpforge.cli.plot`; their flags
are read by :mod:`~dpforge.cli.flags`, their output written by :mod:`~dpforge.cli.output`)
and turns errors into exit codes: :data:`EXIT_OK` (0) success (for ``verify``: certified
epsilon within the budget, or no budget), :data:`EXIT_OVER_BUDGET` (1) ``verify`` found
the plan over budget, :data:`EXIT_ERROR` (2) any error, :data:`EXIT_ACCURACY` (3) the
certified bounds are looser than ``--relative-accuracy`` asked (``--accept-looser``
accepts them; see ``dpforge --help``).  A mistyped subcommand or flag gets a "did you
mean" (difflib); ``dpforge --version`` prints the version.  Errors are decided by type:
every :class:`~dpforge.errors.DpforgeError` (bad or missing flags, invalid plan or LMO
files, parameters out of range, unreachable calibration targets, ...) and every
``OSError`` is one line on stderr, ``dpforge: error: <what> ...``, and exit code 2; a
plain ``ValueError`` or ``ArithmeticError`` from below is reported the same way, as a
last resort.  Nothing is clamped and no traceback is printed.  Building the parser
imports no accounting engine, plot or search: each command imports what it needs.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from dpforge.cli.account import add_account_commands
from dpforge.cli.flags import CliError, lmo_description
from dpforge.cli.lmo import add_lmo_commands
from dpforge.cli.output import EXIT_ACCURACY, EXIT_CODES_TEXT, EXIT_ERROR, EXIT_OK, EXIT_OVER_BUDGET
from dpforge.cli.plot import add_plot_commands
from dpforge.cli.verify import add_verify_command
from dpforge.errors import DpforgeError

__all__ = [
    "EXIT_ACCURACY",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_OVER_BUDGET",
    "PROG",
    "CliError",
    "build_parser",
    "lmo_description",  # kept importable here: tests/test_lmo_search.py looks for it
    "main",
]

PROG = "dpforge"

_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def _did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """`` (did you mean 'X'?)`` for the candidate closest to ``word`` (difflib), or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (raised, not printed), with a
    "did you mean" for a mistyped subcommand (Python 3.11's argparse has no
    ``suggest_on_error``).

    Values such as ``-1e-5`` or ``-inf`` are read as (negative) numbers, not as options,
    so that they reach the range checks and get a message naming the allowed range.
    Subcommand parsers are of the same class.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        description = kwargs.get("description")
        if description and "\n" not in description:  # one paragraph: wrap it (the epilog keeps its layout)
            kwargs["description"] = textwrap.fill(description, width=88)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = [choice.strip().strip("'") for choice in match.group(2).split(",")]
            message += _did_you_mean(match.group(1), choices)
        raise CliError(message)


def _command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub)parser that ``argv`` selects: follow the subcommand words."""
    current = parser
    for word in argv:
        actions = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if actions and word in actions[0].choices:
            current = actions[0].choices[word]
    return current


def _suggest_flag(message: str, parser: argparse.ArgumentParser, argv: Sequence[str]) -> str:
    """``message`` (argparse's "unrecognized arguments: ...") with a "did you mean" for
    the first unknown flag, among the flags of the subcommand ``argv`` selects."""
    if "unrecognized arguments:" not in message:
        return message
    unknown = [word for word in message.split(":", 1)[1].split() if word.startswith("--")]
    if not unknown:
        return message
    options = [flag for action in _command_parser(parser, argv)._actions for flag in action.option_strings]
    return message + _did_you_mean(unknown[0].split("=", 1)[0], options)


_DESCRIPTION = """Certified differential-privacy accounting: upper and lower bounds on epsilon or delta
(PRV engine by default), noise calibration, plan verification, LMO noise search, figures."""

_EPILOG = """examples:
  dpforge epsilon --noise-multiplier 1.1 --sampling-rate 0.004 --steps 1000 --delta 1e-5
  dpforge calibrate --target-epsilon 3 --delta 1e-5 --sampling-rate 0.004 --steps 1000
  dpforge verify examples/plans/within_budget.toml
  dpforge COMMAND --help      (each command's flags and examples)

"""


def build_parser() -> argparse.ArgumentParser:
    """The ``dpforge`` argument parser (flag values are checked after parsing)."""
    from dpforge import __version__

    parser = _Parser(prog=PROG, description=_DESCRIPTION, epilog=_EPILOG + EXIT_CODES_TEXT)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_account_commands(commands)
    add_verify_command(commands)
    add_lmo_commands(commands)
    add_plot_commands(commands)
    return parser


def _error(error: BaseException) -> int:
    """Print ``error`` as one line on stderr; the exit code of an error."""
    if isinstance(error, OSError) and error.filename:
        message = f"{error.filename}: {error.strerror}"
    else:
        message = " ".join(str(error).split()) or type(error).__name__
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpforge`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except CliError as usage:
            raise CliError(_suggest_flag(str(usage), parser, argv)) from None
        return args.handler(args)
    except SystemExit as exit_request:  # --help
        code = exit_request.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_ERROR)
    except (DpforgeError, OSError) as error:  # CliError, PlanError, ParameterError, CalibrationError, ...
        return _error(error)
    except (ValueError, ArithmeticError) as error:  # last resort: a check below that has no type of its own
        return _error(error)


if __name__ == "__main__":
    raise SystemExit(main())
