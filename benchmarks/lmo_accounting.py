#!/usr/bin/env python
"""Timing of LMO accounting against the issue's targets, as medians and ratios.

    python benchmarks/lmo_accounting.py [--repeats 7] [--json-out FILE]

* exact LMO RDP at 64 orders (target <= 50 ms), with the MGF bound for comparison;
* epsilon of Poisson-subsampled LMO by the PRV engine, q = 0.01, T = 1,000,
  delta = 1e-5 (target <= 200 ms), next to the same workload with Laplace noise;
* the vector guard (d = 100, L2) at 64 orders.

Every timed call follows one untimed warm-up (numba compilation, caches); the PRV
engine caches nothing across calls with different descriptions, so each repeat uses
the same description and measures a full evaluation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from dpforge.accounting import epsilon
from dpforge.accounting.rdp.lmo import lmo_rdp_exact, lmo_rdp_mgf_bound, noise_rdp
from dpforge.mechanisms import LMO, Composed, Laplace, PoissonSampled
from dpforge.files import atomic_write_text

MECHANISM = LMO(
    weights=(0.5, 0.2, 0.3),
    gamma_shape=3.0,
    gamma_scale=0.7,
    exponential_rate=2.0,
    uniform_low=0.3,
    uniform_high=1.5,
)
ORDERS = np.concatenate([np.linspace(1.25, 10.0, 36), np.arange(12.0, 68.0, 2.0)])


def median_seconds(call, repeats: int) -> tuple[float, object]:
    result = call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json-out", type=Path, default=Path(__file__).parent / "results" / "lmo_accounting.json")
    args = parser.parse_args()

    rows = []
    assert ORDERS.size == 64
    t_exact, exact = median_seconds(lambda: lmo_rdp_exact(MECHANISM, ORDERS), args.repeats)
    t_mgf, _ = median_seconds(lambda: lmo_rdp_mgf_bound(MECHANISM, ORDERS), args.repeats)
    rows.append(("exact LMO RDP, 64 orders", t_exact, 0.050, f"max {np.max(exact):.4g}"))
    rows.append(("MGF bound, 64 orders", t_mgf, None, "infinite beyond alpha-1 >= rate"))

    lmo_workload = Composed([(PoissonSampled(MECHANISM, 0.01), 1000)])
    t_prv, result = median_seconds(lambda: epsilon(lmo_workload, 1e-5), args.repeats)
    width = (result.upper - result.lower) / result.upper
    rows.append(("PRV eps, subsampled LMO q=0.01 T=1000", t_prv, 0.200, f"eps <= {result.upper:.5g}, width {width:.1e}"))
    laplace_workload = Composed([(PoissonSampled(Laplace(1.0), 0.01), 1000)])
    t_lap, lap = median_seconds(lambda: epsilon(laplace_workload, 1e-5), args.repeats)
    rows.append(("PRV eps, subsampled Laplace (same q, T)", t_lap, None, f"eps <= {lap.upper:.5g}"))
    rdp_result = epsilon(lmo_workload, 1e-5, engine="rdp")
    rows.append(("RDP eps (Zhu-Wang), same LMO workload", None, None, f"eps <= {rdp_result.upper:.5g}"))

    vector = dataclasses.replace(MECHANISM, dimension=100)
    t_vec, _ = median_seconds(lambda: noise_rdp(vector, ORDERS), max(1, args.repeats // 2))
    rows.append(("vector guard d=100 L2, 64 orders", t_vec, None, "48-point shape check"))

    print("| workload | median | target | ratio to target | note |\n|---|---|---|---|---|")
    records = []
    for name, seconds, target, note in rows:
        ratio = f"{seconds / target:.2f}" if (seconds is not None and target) else "-"
        shown = f"{1e3 * seconds:.1f} ms" if seconds is not None else "-"
        shown_target = f"{1e3 * target:.0f} ms" if target else "-"
        print(f"| {name} | {shown} | {shown_target} | {ratio} | {note} |")
        records.append({"workload": name, "median_s": seconds, "target_s": target, "note": note})
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        args.json_out,
        json.dumps(
            {
                "machine": {"platform": platform.platform(), "processor": platform.processor(), "python": platform.python_version()},
                "repeats": args.repeats,
                "rows": records,
                "date": time.strftime("%Y-%m-%d"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
