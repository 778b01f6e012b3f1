#!/usr/bin/env python
"""A whole privacy profile: ``delta_profile`` against one ``delta()`` call per point.

    python benchmarks/delta_profile.py [--repeats 5] [--points 25] [--json-out FILE]

Subsampled Gaussian, q = 0.01, sigma = 1, T = 1,000, epsilon on an even grid over
[0.1, 3].  Both give certified brackets at every point; the table reports the median
time of each (after one untimed warm-up), their ratio, and the widest relative bracket
(upper - lower)/upper of each.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from dpforge.accounting import delta
from dpforge.accounting.profiles import delta_profile
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled
from dpforge.files import atomic_write_text

HERE = Path(__file__).resolve().parent
DESCRIPTION = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)])


def _machine_info() -> dict:
    spec = importlib.util.spec_from_file_location("compare_peers", HERE / "compare_peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_peers"] = module
    spec.loader.exec_module(module)
    return module.machine_info()


def _per_point(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    results = [delta(DESCRIPTION, float(value)) for value in grid]
    return np.array([r.lower for r in results]), np.array([r.upper for r in results])


def _median_time(function, repeats: int):
    value = function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return value, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--points", type=int, default=25)
    parser.add_argument("--json-out", default=str(HERE / "results" / "delta_profile.json"))
    args = parser.parse_args()
    grid = np.linspace(0.1, 3.0, args.points)
    (profile_lower, profile_upper), profile_seconds = _median_time(lambda: delta_profile(DESCRIPTION, grid), args.repeats)
    (loop_lower, loop_upper), loop_seconds = _median_time(lambda: _per_point(grid), args.repeats)
    rows = {
        "delta_profile": {"seconds_median": profile_seconds,
                          "widest_bracket": float(np.max((profile_upper - profile_lower) / profile_upper))},
        "delta per point": {"seconds_median": loop_seconds,
                            "widest_bracket": float(np.max((loop_upper - loop_lower) / loop_upper))},
    }
    print(f"{'method':16s} {'median time':>12s} {'widest (u-l)/u':>15s}")
    for name, row in rows.items():
        print(f"{name:16s} {row['seconds_median'] * 1e3:10.0f} ms {row['widest_bracket']:15.2e}")
    print(f"ratio delta_profile / per point: {profile_seconds / loop_seconds:.3f}")
    payload = {"machine": _machine_info(), "points": args.points, "repeats": args.repeats, "rows": rows,
               "ratio": profile_seconds / loop_seconds}
    atomic_write_text(args.json_out, json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
