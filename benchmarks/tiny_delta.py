#!/usr/bin/env python
"""Tiny delta: width and time of the PRV engine from delta = 1e-5 down to 1e-15, beside PLD.

    python benchmarks/tiny_delta.py [--repeats 3] [--json-out FILE]

For each workload and delta, dpforge's certified bracket (lower, upper, relative width),
its median time, and that time as a ratio to the same workload at delta = 1e-5 (the
issue's target: at most 2x); and dp-accounting's PLD (connect-the-dots, pessimistic,
h = 1e-4) on the same question, its epsilon (an estimate: PLD certifies nothing at these
deltas) and dpforge's time as a ratio to PLD's, all in one run, round-robin (rep 1 of
every tool, then rep 2, ...), after one untimed warm-up each.  dpforge's lru caches are
cleared before every timed call, so each call starts cold.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path

from dpforge.accounting import epsilon
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled

HERE = Path(__file__).resolve().parent
DELTAS = (1e-5, 1e-8, 1e-10, 1e-12, 1e-13, 1e-15)
WORKLOADS = {
    "G: Gaussian σ=1.1 q=0.004 T=1e3": (Composed([(PoissonSampled(Gaussian(1.1), 0.004), 1000)]), ("gaussian", 1.1, 0.004, 1000)),
    "L: Laplace b=2 q=0.01 T=1e3": (Composed([(PoissonSampled(Laplace(2.0), 0.01), 1000)]), ("laplace", 2.0, 0.01, 1000)),
    # rare hits on a log-normal bulk: staged chunks, eps set by single sampled steps
    "R: Gaussian σ=0.3 q=1e-6 T=1e3": (Composed([(PoissonSampled(Gaussian(0.3), 1e-6), 1000)]), ("gaussian", 0.3, 1e-6, 1000)),
}


def _clear_caches() -> None:
    """Empty every functools cache of dpforge's modules (a cold call each time)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("dpforge"):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()
    gc.collect()


def _pld(family: str, parameter: float, q: float, steps: int, delta: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pldm

    make = pldm.from_gaussian_mechanism if family == "gaussian" else pldm.from_laplace_mechanism
    pld = make(parameter, sampling_prob=q, value_discretization_interval=1e-4, use_connect_dots=True)
    return pld.self_compose(steps).get_epsilon_for_delta(delta)


def _machine_info() -> dict:
    spec = importlib.util.spec_from_file_location("compare_peers", HERE / "compare_peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_peers"] = module
    spec.loader.exec_module(module)
    return module.machine_info()


def _shown(value: float | None) -> str:
    """PLD's epsilon as the tables print it (inf where it found none; null in the JSON)."""
    return "inf" if value is None or math.isinf(value) else f"{value:.6f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json-out", default=str(HERE / "results" / "tiny_delta.json"))
    args = parser.parse_args()
    rows = []
    for name, (description, (family, parameter, q, steps)) in WORKLOADS.items():
        epsilon(description, 1e-5)  # warm-up: numba loads its kernels
        _pld(family, parameter, q, steps, 1e-5)
        ours: dict[float, list[float]] = {d: [] for d in DELTAS}
        peer: dict[float, list[float]] = {d: [] for d in DELTAS}
        results, peer_values = {}, {}
        for _ in range(args.repeats):
            for delta in DELTAS:
                _clear_caches()
                start = time.perf_counter()
                results[delta] = epsilon(description, delta)
                ours[delta].append(time.perf_counter() - start)
                start = time.perf_counter()
                peer_values[delta] = _pld(family, parameter, q, steps, delta)
                peer[delta].append(time.perf_counter() - start)
        base = statistics.median(ours[1e-5])
        for delta in DELTAS:
            result, t_ours, t_peer = results[delta], statistics.median(ours[delta]), statistics.median(peer[delta])
            row = {
                "workload": name,
                "delta": delta,
                "lower": result.lower,
                "upper": result.upper,
                "width": (result.upper - result.lower) / result.upper,
                "tilted": result.accuracy.get("tilted", False),
                "grid": result.accuracy["grid_size"],
                "dpforge_ms": 1e3 * t_ours,
                "time_vs_1e-5": t_ours / base,
                # strict JSON has no Infinity: dp-accounting's infinite answer is null here
                "pld_epsilon": peer_values[delta] if math.isfinite(peer_values[delta]) else None,
                "pld_ms": 1e3 * t_peer,
                "dpforge_over_pld": t_ours / t_peer,
            }
            rows.append(row)
            print(
                f"{name:34s} δ={delta:<6g} [{row['lower']:.6f}, {row['upper']:.6f}] width {row['width']:.1e} "
                f"grid {row['grid']:>7d} {row['dpforge_ms']:7.1f} ms ({row['time_vs_1e-5']:.2f}x δ=1e-5) "
                f"PLD ε {_shown(peer_values[delta])} dpforge/PLD {row['dpforge_over_pld']:.3f}x"
            )
    print("\n| workload | δ | dpforge [lower, upper] | width | time / δ=1e-5 | PLD ε (h=1e-4) | dpforge / PLD time |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['workload']} | {row['delta']:g} | [{row['lower']:.6f}, {row['upper']:.6f}] | {row['width']:.1e} | "
            f"{row['time_vs_1e-5']:.2f}× | {_shown(row['pld_epsilon'])} | {row['dpforge_over_pld']:.3f}× |"
        )
    if args.json_out:
        from dpforge.files import atomic_write_text

        atomic_write_text(
            args.json_out, json.dumps({"machine": _machine_info(), "repeats": args.repeats, "rows": rows}, indent=2, allow_nan=False) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
