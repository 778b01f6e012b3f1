"""DP-ZO reproduction: four ways to account the Laplace mechanism of private zeroth-order fine-tuning.

DP-ZO's setting: n = 1,000 examples, expected batch 16 (Poisson rate q = 0.016), the
clipped per-example loss difference has add/remove sensitivity C = 1, Laplace noise with
scale b on the clipped sum, T steps.  For T in {1,000, 10,000} and the scales that give
eps ~ 0.5, 1, 4 under the tight accountant at delta = 1e-5, the table compares

(a) pure basic composition with amplification: T log(1 + q (e^{C/b} - 1));
(b) pure-DP PRV: the PRV engine on PoissonSampled(PureDP(C/b), q) composed T times (the
    randomised-response pair dominates the unsubsampled Laplace step);
(c) the Monte-Carlo accountant at 99% confidence (a high-probability upper bound);
(d) the tight PRV upper bound of PoissonSampled(Laplace(b), q) composed T times.

Expected order (d) <= (c) <= (b) <= (a).  Also measured: privacy-loss draws per second of
the Monte-Carlo kernel for the subsampled Gaussian on all cores, and the Core benchmark's
workload W1 (q = 0.01, sigma = 1, T = 1,000, delta = 1e-5) by Monte Carlo at 99%
confidence against the PRV upper bound.

Run:  python benchmarks/dp_zo_reproduction.py [--samples N] [--repeats R] [--quick]
Writes benchmarks/results/dp_zo.json and prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numba
import numpy as np

from dpforge.accounting import calibrate_laplace_scale, epsilon
from dpforge.accounting.montecarlo.directions import _directions
from dpforge.accounting.montecarlo.runner import _chunking, _run_chunk
from dpforge.accounting.pure import pure_epsilon
from dpforge.mechanisms.base import Gaussian, Laplace, PureDP
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.files import atomic_write_text

N_EXAMPLES = 1000
BATCH = 16
Q = BATCH / N_EXAMPLES
SENSITIVITY = 1.0
DELTA = 1e-5
STEPS = (1000, 10000)
TARGETS = (0.5, 1.0, 4.0)
CONFIDENCE = 0.99
RESULTS = Path(__file__).resolve().parent / "results" / "dp_zo.json"


def timed(function, repeats: int):
    """(last result, median seconds over ``repeats`` runs)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def laplace_description(scale: float, steps: int) -> Composed:
    return Composed([(PoissonSampled(Laplace(scale, SENSITIVITY), Q), steps)])


def dp_zo_row(steps: int, target: float, samples: int, repeats: int, seed: int) -> dict:
    calibration = calibrate_laplace_scale(Q, steps, target, DELTA, SENSITIVITY)
    scale = calibration.parameter
    description = laplace_description(scale, steps)
    pure_pair = Composed([(PoissonSampled(PureDP(SENSITIVITY / scale), Q), steps)])
    a, t_a = timed(lambda: pure_epsilon(description), max(repeats, 5))
    b, t_b = timed(lambda: epsilon(pure_pair, DELTA), repeats)
    c, t_c = timed(
        lambda: epsilon(description, DELTA, engine="montecarlo", samples=samples, confidence=CONFIDENCE, seed=seed), 1
    )
    d, t_d = timed(lambda: epsilon(description, DELTA), repeats)
    row = {
        "steps": steps,
        "target_epsilon": target,
        "scale": scale,
        "epsilon_step": SENSITIVITY / scale,
        "a_pure_basic": a,
        "b_pure_dp_prv": b.upper,
        "c_montecarlo_upper": c.upper,
        "c_montecarlo_estimate": c.estimate,
        "c_montecarlo_lower": c.lower,
        "d_tight_prv_upper": d.upper,
        "d_tight_prv_lower": d.lower,
        "seconds": {"a": t_a, "b": t_b, "c": t_c, "d": t_d},
        "montecarlo": {"samples": c.samples, "confidence": c.confidence, "seed": seed, "tilt": c.accuracy["tilt"],
                       "directions_sampled": c.accuracy["directions_sampled"]},
        "order_d_le_c_le_b_le_a": bool(d.upper <= c.upper <= b.upper <= a),
    }
    return row


def throughput(seconds: float = 5.0) -> dict:
    """Privacy-loss draws per second of the main kernel (subsampled Gaussian, remove
    direction, tilted as in W1), after a warm-up, on numba's default thread count."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)])
    direction = _directions(description, True)[0]
    batch = direction.batch(6.0, np.linspace(1.5, 2.2, 300))
    chunk, block = _chunking(direction.draws)
    words = np.array([1, 2, 3, 4], dtype=np.uint64)
    _run_chunk(batch, words, 256, block)  # compile / load
    draws, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _run_chunk(batch, words, chunk, block)
        draws += chunk * direction.draws
    elapsed = time.perf_counter() - start
    plain = direction.batch(0.0, np.linspace(1.5, 2.2, 300))
    plain_draws, plain_start = 0, time.perf_counter()
    while time.perf_counter() - plain_start < seconds:
        _run_chunk(plain, words, chunk, block)
        plain_draws += chunk * direction.draws
    plain_elapsed = time.perf_counter() - plain_start
    # one thread (less sensitive to other jobs on a shared machine)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        single_draws, single_start = 0, time.perf_counter()
        while time.perf_counter() - single_start < seconds:
            _run_chunk(batch, words, chunk, block)
            single_draws += chunk * direction.draws
        single_elapsed = time.perf_counter() - single_start
    finally:
        numba.set_num_threads(threads)
    return {
        "one_thread_tilted_draws_per_second": single_draws / single_elapsed,
        "workload": "PoissonSampled(Gaussian(1.0), 0.01) x 1000, remove direction, accumulate kernel with a 300-point grid",
        "threads": numba.get_num_threads(),
        "tilted_k6_draws_per_second": draws / elapsed,
        "plain_draws_per_second": plain_draws / plain_elapsed,
    }


def w1(samples: int, repeats: int, seed: int) -> dict:
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)])
    prv, t_prv = timed(lambda: epsilon(description, DELTA), repeats)
    runs, times = [], []
    for r in range(repeats):
        start = time.perf_counter()
        runs.append(epsilon(description, DELTA, engine="montecarlo", samples=samples, confidence=CONFIDENCE, seed=seed + r))
        times.append(time.perf_counter() - start)
    uppers = [m.upper for m in runs]
    return {
        "workload": "W1: q=0.01, sigma=1, T=1000, delta=1e-5",
        "prv_upper": prv.upper,
        "prv_lower": prv.lower,
        "prv_seconds": t_prv,
        "montecarlo_samples": samples,
        "montecarlo_confidence": CONFIDENCE,
        "montecarlo_upper": uppers,
        "montecarlo_upper_median": statistics.median(uppers),
        "montecarlo_relative_to_prv_upper": statistics.median(uppers) / prv.upper - 1.0,
        "montecarlo_seconds": times,
        "montecarlo_seconds_median": statistics.median(times),
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| T | scale b | eps/step | (a) pure basic | (b) pure-DP PRV | (c) MC 99% upper | (d) tight PRV | order ok | time a / b / c / d (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|---|",
    ]
    for r in rows:
        s = r["seconds"]
        lines.append(
            f"| {r['steps']} | {r['scale']:.4g} | {r['epsilon_step']:.4g} | {r['a_pure_basic']:.4g} | "
            f"{r['b_pure_dp_prv']:.4g} | {r['c_montecarlo_upper']:.4g} | {r['d_tight_prv_upper']:.4g} | "
            f"{'yes' if r['order_d_le_c_le_b_le_a'] else 'NO'} | "
            f"{s['a']:.1e} / {s['b']:.2f} / {s['c']:.2f} / {s['d']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000, help="Monte-Carlo samples (default 100000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats for the median timings of fast routes")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--quick", action="store_true", help="T=1000 only, fewer samples (smoke run)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--parts", default="dpzo,throughput,w1",
        help="comma-separated subset of dpzo,throughput,w1; parts not run are kept from an existing output file",
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    steps = STEPS[:1] if args.quick else STEPS
    samples = 20_000 if args.quick else args.samples
    started = time.perf_counter()
    # warm-up (numba compilation / cache load is not part of any timing)
    epsilon(laplace_description(2.0, 10), DELTA, engine="montecarlo", samples=2000, seed=0)
    epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 10)]), DELTA, engine="montecarlo", samples=2000, seed=0)
    previous = json.loads(args.output.read_text()) if args.output.exists() and parts != {"dpzo", "throughput", "w1"} else {}
    machine = {"cpus": os.cpu_count(), "numba_threads": numba.get_num_threads(), "python": platform.python_version(),
               "load_average_at_start": os.getloadavg()}
    rows = previous.get("dp_zo", [])
    if "dpzo" in parts:
        rows = []
        for T in steps:
            for target in TARGETS:
                row = dp_zo_row(T, target, samples, args.repeats, args.seed)
                rows.append(row)
                print(f"T={T} target={target}: a={row['a_pure_basic']:.4g} b={row['b_pure_dp_prv']:.4g} "
                      f"c={row['c_montecarlo_upper']:.4g} d={row['d_tight_prv_upper']:.4g}", file=sys.stderr)
    rate = throughput(2.0 if args.quick else 5.0) if "throughput" in parts else previous["throughput"]
    workload = w1(samples, args.repeats, args.seed) if "w1" in parts else previous["w1"]
    machine["load_average_at_end"] = os.getloadavg()
    runs = dict(previous.get("machine_per_part", {}))
    for part in parts:
        runs[part] = machine
    report = {
        "setting": {"n": N_EXAMPLES, "expected_batch": BATCH, "sampling_rate": Q, "sensitivity": SENSITIVITY,
                    "delta": DELTA, "confidence": CONFIDENCE, "calibration": "tight PRV (calibrate_laplace_scale)"},
        "dp_zo": rows,
        "throughput": rate,
        "w1": workload,
        "machine_per_part": runs,
        "note": "2 CPU cores shared with other jobs: timings and throughput depend on the load averages recorded",
        "total_seconds": time.perf_counter() - started,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.output, json.dumps(report, indent=2) + "\n")
    print("## DP-ZO (n=1000, q=0.016, C=1, Laplace, delta=1e-5)\n")
    print(markdown(rows))
    print(f"\nThroughput ({rate['threads']} threads): {rate['tilted_k6_draws_per_second']:.3g} draws/s tilted, "
          f"{rate['plain_draws_per_second']:.3g} draws/s plain; one thread "
          f"{rate.get('one_thread_tilted_draws_per_second', float('nan')):.3g} draws/s tilted")
    print(f"W1: MC 99% upper (median of {len(workload['montecarlo_upper'])}) {workload['montecarlo_upper_median']:.5f} "
          f"vs PRV upper {workload['prv_upper']:.5f} ({100 * workload['montecarlo_relative_to_prv_upper']:+.2f}%), "
          f"MC {workload['montecarlo_seconds_median']:.2f} s, PRV {workload['prv_seconds']:.2f} s")
    print(f"\nwritten {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
