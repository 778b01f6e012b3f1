#!/usr/bin/env python
"""The four engines on the same questions: what each reports, and what it costs.

    python benchmarks/engines.py [--repeats 5] [--samples 100000] [--json-out FILE]

For each workload (delta = 1e-5, add-or-remove, Poisson subsampling) every engine that
accepts it is asked for epsilon: "prv" (certified lower and upper), "rdp" (certified
upper), "montecarlo" (a high-probability bracket, fixed seed) and "pure" (basic
composition; pure-DP mechanisms only).  Each cell is the median of ``--repeats`` timed
calls after one untimed warm-up, and its time as a ratio to the PRV engine's.  The
JSON records the machine (see compare_peers.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from dpforge.accounting import epsilon
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled
from dpforge.files import atomic_write_text

HERE = Path(__file__).resolve().parent
DELTA = 1e-5


def _sibling(name: str):
    """Another benchmark script of this folder, imported as a module."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: The LMO mixture that lmo_accounting.py times.
LMO_MECHANISM = _sibling("lmo_accounting").MECHANISM
WORKLOADS = {
    "G1 Gaussian σ=1 q=0.01 T=1e3": Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)]),
    "G2 Gaussian σ=0.86 q=0.004 T=1e4": Composed([(PoissonSampled(Gaussian(0.857104), 0.004), 10_000)]),
    "L1 Laplace b=2 q=0.01 T=1e3": Composed([(PoissonSampled(Laplace(2.0), 0.01), 1000)]),
    "Z1 DP-ZO Laplace b=3.4 q=0.016 T=1e3": Composed([(PoissonSampled(Laplace(3.4), 0.016), 1000)]),
    "M1 LMO mixture q=0.01 T=1e3": Composed([(PoissonSampled(LMO_MECHANISM, 0.01), 1000)]),
}
ENGINES = ("prv", "rdp", "montecarlo", "pure")


def _machine_info() -> dict[str, Any]:
    return _sibling("compare_peers").machine_info()


def _timed(function, repeats: int) -> tuple[Any, float]:
    function()  # warm-up: numba compilation, caches
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return value, statistics.median(times)


def run(repeats: int, samples: int) -> list[dict[str, Any]]:
    rows = []
    for name, description in WORKLOADS.items():
        prv_seconds = None
        for engine in ENGINES:
            options = {"samples": samples, "seed": 1} if engine == "montecarlo" else {}
            try:
                result, seconds = _timed(lambda: epsilon(description, DELTA, engine=engine, **options), repeats)
            except ValueError as error:
                rows.append({"workload": name, "engine": engine, "refused": str(error)})
                print(f"{name:38s} {engine:11s} refused: {str(error)[:60]}", file=sys.stderr)
                continue
            if engine == "prv":
                prv_seconds = seconds
            row = {
                "workload": name,
                "engine": engine,
                "lower": result.lower,
                "upper": result.upper,
                "seconds_median": seconds,
                "ratio_to_prv": seconds / prv_seconds if prv_seconds else None,
                "bound": getattr(result, "bound", "certified"),
            }
            rows.append(row)
            print(
                f"{name:38s} {engine:11s} [{result.lower:.5f}, {result.upper:.5f}] {seconds * 1e3:9.1f} ms "
                f"{row['ratio_to_prv'] or 0:6.2f}x",
                file=sys.stderr,
            )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | engine | ε lower | ε upper | median time | time / PRV |", "|---|---|---|---|---|---|"]
    for row in rows:
        if "refused" in row:
            lines.append(f"| {row['workload']} | {row['engine']} | refused | | | |")
            continue
        label = row["engine"] + (" (high-prob.)" if row["bound"] == "high-probability" else "")
        lines.append(
            f"| {row['workload']} | {label} | {row['lower']:.5f} | {row['upper']:.5f} | "
            f"{row['seconds_median'] * 1e3:.1f} ms | {row['ratio_to_prv']:.2f}× |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--json-out", default=str(HERE / "results" / "engines.json"))
    args = parser.parse_args()
    rows = run(args.repeats, args.samples)
    print(table(rows))
    payload = {"machine": _machine_info(), "delta": DELTA, "repeats": args.repeats, "samples": args.samples, "rows": rows}
    atomic_write_text(args.json_out, json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
