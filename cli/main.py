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
the plan over budget, :data:`EXIT_ERROR` (2) any error.  Errors are decided by type:
every :class:`~dpforge.errors.DpforgeError` (bad or missing flags, invalid plan or LMO
files, parameters out of range, unreachable calibration targets, ...) and every
``OSError`` is one line on stderr, ``dpforge: error: <what> ...``, and exit code 2; a
plain ``ValueError`` or ``ArithmeticError`` from below is reported the same way, as a
last resort.  Nothing is clamped and no traceback is printed.  Building the parser
imports no accounting engine, plot or search: each command imports what it needs.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from dpforge.cli.account import add_account_commands
from dpforge.cli.flags import CliError, lmo_description
from dpforge.cli.lmo import add_lmo_commands
from dpforge.cli.output import EXIT_ERROR, EXIT_OK, EXIT_OVER_BUDGET
from dpforge.cli.plot import add_plot_commands
from dpforge.cli.verify import add_verify_command
from dpforge.errors import DpforgeError

__all__ = [
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


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (raised, not printed).

    Values such as ``-1e-5`` or ``-inf`` are read as (negative) numbers, not as options,
    so that they reach the range checks and get a message naming the allowed range.
    Subcommand parsers are of the same class.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        raise CliError(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``dpforge`` argument parser (flag values are checked after parsing)."""
    parser = _Parser(prog=PROG, description="Certified differential-privacy accounting (PRV engine).")
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
    try:
        args = build_parser().parse_args(argv)
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
