#!/usr/bin/env python
"""What the PRV engine's allocator thresholds (``accounting/prv/allocator.py``) buy.

    python benchmarks/allocator.py [--repeats 5] [--json-out benchmarks/results/allocator.json]

Times the working tree in fresh processes under three allocator states, alternating them
for every repeat (the child process and its timing are those of ``ab_revisions.py``: a
warm-up, then the median of three calls in wall time; S1 one call in CPU time):

* ``raised``: the default, glibc's mmap/trim thresholds raised at import;
* ``glibc``: ``DPFORGE_MALLOC_DEFAULTS=1``, glibc's start-up thresholds (128 KiB);
* ``glibc + scipy.optimize``: the same, after ``import scipy.optimize``, whose import
  frees a block large enough for glibc to raise its thresholds by itself.

Each row gives the three medians and the ratios to ``glibc``; the certified bounds must
be the same in every state.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("ab_revisions", HERE / "ab_revisions.py")
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)

W1 = "m.Composed([(m.PoissonSampled(m.Gaussian(1.0), 0.01), 1000)])"
W3 = "m.Composed([(m.PoissonSampled(m.Gaussian(0.8), 0.001), 100000)])"
S1 = "m.Composed([(m.PoissonSampled(m.Gaussian(0.6), 1e-4), 1_000_000)])"
#: (label, description expression, scale mode)
WORKLOADS = [("W1 q=0.01 σ=1 T=1e3", W1, False), ("W3 q=0.001 σ=0.8 T=1e5", W3, False), ("S1 q=1e-4 σ=0.6 T=1e6", S1, True)]
#: (state, extra environment, whether scipy.optimize is imported before the description is built)
STATES = [
    ("raised", {}, False),
    ("glibc", {"DPFORGE_MALLOC_DEFAULTS": "1"}, False),
    ("glibc + scipy.optimize", {"DPFORGE_MALLOC_DEFAULTS": "1"}, True),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        holder = ab._package_root(ab.ROOT, Path(scratch), "tree")
        for label, expression, scale in WORKLOADS:
            times: dict[str, list[float]] = {state: [] for state, _, _ in STATES}
            values: dict[str, list[float]] = {}
            for _ in range(args.repeats):
                for state, env, preload in STATES:
                    # the child evaluates the expression before it times anything
                    built = f"(__import__('scipy.optimize'), {expression})[1]" if preload else expression
                    measured = ab._run(holder, built, "prv", scale, extra_env=env)
                    times[state].append(measured["time"])
                    values[state] = measured["value"]
            if len({json.dumps(v) for v in values.values()}) != 1:
                raise SystemExit(f"{label}: the bounds differ between allocator states: {values}")
            medians = {state: statistics.median(t) for state, t in times.items()}
            row = {"workload": label, "clock": "cpu" if scale else "wall", "value": values["raised"],
                   "median_ms": {state: 1e3 * t for state, t in medians.items()},
                   "ratio_to_glibc": {state: t / medians["glibc"] for state, t in medians.items()}}
            rows.append(row)
            print(f"{label:26s} " + "  ".join(f"{state} {1e3 * t:8.1f} ms ({t / medians['glibc']:.2f}x)" for state, t in medians.items()))
    if args.json_out:
        from dpforge.files import atomic_write_text

        atomic_write_text(args.json_out, json.dumps({"repeats": args.repeats, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
