"""``dpforge lmo search``: the LMO noise of least variance (or E|noise|) under a certified epsilon.

    dpforge lmo search --target-epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000 \\
        [--objective variance|abs] [--components gamma,uniform] [--sensitivity 1] \\
        [--seed 0] [--time-limit 60] [--workers 2] [--json] [--out best.json]
    dpforge epsilon --lmo best.json --delta 1e-5   (the saved workload; flags override it)

:func:`add_lmo_commands` adds the ``lmo`` command to the ``dpforge`` parser; the
``--lmo FILE`` flag of ``epsilon``, ``delta`` and ``plot`` is one of the mechanism flags
of :mod:`dpforge.cli.flags`, which reads the file (:func:`load_lmo_file`, also importable
from here).  The search (:mod:`dpforge.design`) is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from dpforge.cli import flags
from dpforge.cli.flags import lmo_description, load_lmo_file
from dpforge.cli.output import EXIT_OK, print_json, table
from dpforge.cli.schema import command_object

__all__ = ["add_lmo_commands", "lmo_description", "load_lmo_file", "main"]


#: the LMO components as the help page names them (``dpforge.mechanisms.lmo.COMPONENTS``,
#: not imported for ``--help``; a test keeps the two equal)
COMPONENT_NAMES = "gamma, exponential, uniform"


def _component_names() -> tuple[str, ...]:
    from dpforge.mechanisms.lmo import COMPONENTS

    return COMPONENTS


def _components(text: str | None) -> tuple[str, ...]:
    """``--components``: a comma-separated subset of the LMO components (default all)."""
    known = _component_names()
    if text is None:
        return known
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names or any(name not in known for name in names):
        raise flags.CliError(f"--components must be a comma-separated list of {', '.join(known)}, got {text!r}")
    return names


def _command_search(args: argparse.Namespace) -> int:
    from dpforge.design.search import lmo_search, worker_pool

    target = flags.number("--target-epsilon", args.target_epsilon, flags.POSITIVE)
    delta = flags.delta(args.delta)
    sampling_rate = flags.sampling_rate(args.sampling_rate)
    steps = flags.steps(args.steps)
    sensitivity = flags.sensitivity(args.sensitivity)
    seed = flags.integer("--seed", args.seed, 0, default=0, maximum=None)
    time_limit = flags.number("--time-limit", args.time_limit, flags.POSITIVE, default=60.0)
    workers = flags.integer("--workers", args.workers, 0, default=2)
    components = _components(args.components)
    out = None if args.out is None else flags.existing_folder("--out", args.out)
    # 0 or 1 worker: serial; 2: the search's own pool; more: a pool of that size
    executor: Any = "serial" if workers <= 1 else (None if workers == 2 else worker_pool(workers))
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
            from dpforge.files import atomic_write_text

            atomic_write_text(out, result.to_json(indent=2) + "\n")
        except OSError as error:
            raise flags.CliError(f"cannot write --out {out}: {error.strerror or error}") from None
    if args.json:
        print_json(_json_object(result, out))
    else:
        print(_render(result, out))
    return EXIT_OK


def _json_object(result: Any, out: str | None) -> dict[str, Any]:
    """The search in the one ``--json`` schema (:mod:`dpforge.cli.schema`): the certified
    bounds of the LMO found at the workload, and under ``search`` the result as
    ``--out`` writes it (:meth:`LMOSearchResult.to_dict`)."""
    from dpforge.accounting.results import SCHEMA_VERSION, accuracy_record, dpforge_version, json_ready
    from dpforge.mechanisms.combinators import Composed, PoissonSampled

    step = result.mechanism if result.sampling_rate >= 1 else PoissonSampled(result.mechanism, result.sampling_rate)
    envelope = {
        "schema_version": SCHEMA_VERSION,
        "dpforge_version": dpforge_version(),
        "engine": result.engine,
        "relation": "add-remove",
        "sampling": "poisson",
        "mechanism": None,
        "delta": result.delta,
        "epsilon_upper": result.epsilon,
        "epsilon_lower": result.epsilon_lower,
        "accuracy": accuracy_record({}, None, result.epsilon_lower, result.epsilon),
    }
    extra = {"target_epsilon": result.target_epsilon, "search": result.to_dict(), **({"out": out} if out else {})}
    return json_ready(command_object("lmo search", envelope, Composed([(step, result.steps)]), **extra))


def _render(result: Any, out: str | None) -> str:
    """The search result as a two-column table."""
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
        rows.append(("saved to", out))
    return table(rows)


_EXAMPLES = """examples:
  dpforge lmo search --target-epsilon 1 --delta 1e-5 --sampling-rate 0.01 --steps 1000 --time-limit 20 --out best.json
  dpforge epsilon --lmo best.json --delta 1e-5"""


def add_lmo_commands(subparsers: Any) -> None:
    """Add ``lmo search`` to the ``dpforge`` subcommands (flag values are checked after
    parsing, like every dpforge flag)."""
    lmo = flags.add_command(
        subparsers,
        "lmo",
        help="LMO noise: offline search of mixture parameters",
        description="LMO (Laplace mixture) noise: search the mixture of least variance under a certified epsilon.",
        examples=_EXAMPLES, exit_codes=False,
    )
    commands = lmo.add_subparsers(dest="lmo_command", required=True, metavar="LMO_COMMAND")
    search = flags.add_command(
        commands,
        "search",
        help="LMO minimising the noise under a certified epsilon, next to the calibrated Gaussian",
        description="Search the LMO noise of least variance (or E|noise|) whose certified epsilon at --delta "
        "over --steps steps at --sampling-rate is at most --target-epsilon, next to the calibrated Gaussian. "
        "--out saves the mechanism and the workload; dpforge epsilon --lmo FILE reuses both.",
        examples=_EXAMPLES,
    )
    search.add_argument("--target-epsilon", metavar="EPS", help="> 0 (required)")
    search.add_argument("--delta", metavar="DELTA", help="in (0, 1) (required)")
    flags.add_workload_flags(search)
    search.add_argument("--objective", choices=("variance", "abs"), help="what to minimise (default variance)")
    search.add_argument("--components", metavar="LIST", help=f"comma-separated subset of {COMPONENT_NAMES} (default all)")
    search.add_argument("--sensitivity", metavar="S", help="sensitivity of the scalar query, > 0 (default 1)")
    search.add_argument("--seed", metavar="S", help="seed of the search, an integer >= 0 (default 0)")
    search.add_argument("--time-limit", metavar="SECONDS", help="> 0 (default 60)")
    search.add_argument("--workers", metavar="N", help="worker processes, an integer >= 0; 0 or 1 runs serially (default 2)")
    search.add_argument("--out", metavar="FILE", help="write the result as JSON (readable by dpforge epsilon --lmo)")
    search.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    search.set_defaults(handler=_command_search)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dpforge.cli.lmo search ...``: the same as ``dpforge lmo search ...``
    (one-line errors on stderr, exit 2)."""
    from dpforge.cli.main import main as dpforge_main

    return dpforge_main(["lmo", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
