#!/usr/bin/env python
"""Side-by-side timing of two revisions of dpforge on the engines' workloads.

    python benchmarks/ab_revisions.py --base REV [--repeats 5] [--json-out FILE]
    python benchmarks/ab_revisions.py --base REV --scale --repeats 1   # S1, S2, S3, CPU time

Checks REV out into a temporary git worktree and times the working tree ("head") against
it: for every workload and repeat, one fresh process per revision, alternating head and
base, each process warming up once (numba loads its kernels) and then timing three calls.
The table gives each revision's median and the ratio head/base, so a refactoring can show
that it left the engines' speed unchanged.  Both revisions must answer the same numbers:
the script fails if the certified bounds differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (label, Python expression of the description, engine); evaluated with dpforge.mechanisms imported as m
WORKLOADS = [
    ("G1 Gaussian σ=1 q=0.01 T=1e3", "m.Composed([(m.PoissonSampled(m.Gaussian(1.0), 0.01), 1000)])", "prv"),
    ("G2 Gaussian σ=0.86 q=0.004 T=1e4", "m.Composed([(m.PoissonSampled(m.Gaussian(0.857104), 0.004), 10000)])", "prv"),
    ("L1 Laplace b=2 q=0.01 T=1e3", "m.Composed([(m.PoissonSampled(m.Laplace(2.0), 0.01), 1000)])", "prv"),
    ("G1 rdp", "m.Composed([(m.PoissonSampled(m.Gaussian(1.0), 0.01), 1000)])", "rdp"),
    ("C1 calibrate σ q=0.004 T=1e4 ε=3", "calibrate", "prv"),
]

#: --scale: the long run and the many-phase ledgers of ``compare_peers.py`` (S1, S2, S3);
#: one timed call each, in CPU time (they take seconds, and CPU time does not count the waits
#: of a machine shared with other jobs)
SCALE_WORKLOADS = [
    ("S1 Gaussian σ=0.6 q=1e-4 T=1e6", "m.Composed([(m.PoissonSampled(m.Gaussian(0.6), 1e-4), 1_000_000)])", "prv"),
    ("S2 1,000 phases σᵢ=0.8+0.4i/999 q=0.01 ×10",
     "m.Composed([(m.PoissonSampled(m.Gaussian(0.8 + 0.4 * i / 999), 0.01), 10) for i in range(1000)])", "prv"),
    ("S3 10,000 single steps σᵢ=0.8+0.4i/9999 q=0.01",
     "m.Composed([(m.PoissonSampled(m.Gaussian(0.8 + 0.4 * i / 9999), 0.01), 1) for i in range(10000)])", "prv"),
]

CHILD = r"""
import sys, time, json, resource
import dpforge.mechanisms as m
from dpforge.accounting import epsilon, calibrate_noise_multiplier
expression, engine, scale = sys.argv[1], sys.argv[2], sys.argv[3] == "scale"
if expression == "calibrate":
    run = lambda: calibrate_noise_multiplier(0.004, 10000, 3.0, 1e-5)
    value = lambda r: [r.parameter, r.epsilon]
else:
    description = eval(expression)
    run = lambda: epsilon(description, 1e-5, engine=engine)
    value = lambda r: [r.lower, r.upper]
if scale:  # warm up on a small description (numba loads its kernels), then one call in CPU time
    epsilon(m.Composed([(m.PoissonSampled(m.Gaussian(1.0), 0.01), 100)]), 1e-5)
    start = time.process_time(); result = run(); seconds = time.process_time() - start
else:
    result = run()  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter(); result = run(); times.append(time.perf_counter() - start)
    seconds = sorted(times)[1]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"time": seconds, "value": value(result), "peak_mib": peak}))
"""


def _package_root(tree: Path, scratch: Path, name: str) -> Path:
    """A folder holding a `dpforge` link to ``tree`` (the repository root is the package)."""
    holder = scratch / name
    holder.mkdir()
    (holder / "dpforge").symlink_to(tree)
    return holder


def _run(holder: Path, expression: str, engine: str, scale: bool = False, extra_env: dict | None = None) -> dict:
    """One fresh process timing ``expression`` (see CHILD) with ``holder`` on its path and
    ``extra_env`` added to its environment."""
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": str(holder)}
    command = [sys.executable, "-c", CHILD, expression, engine, "scale" if scale else "small"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=holder)
    if out.returncode != 0:
        raise SystemExit(f"{holder.name} failed on {expression}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare the working tree against")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json-out")
    parser.add_argument("--scale", action="store_true", help="time S1, S2 and S3 (one call each, CPU time) instead")
    args = parser.parse_args()
    workloads = SCALE_WORKLOADS if args.scale else WORKLOADS
    rows = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        base_tree = scratch / "base-tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(base_tree), args.base], check=True, capture_output=True)
        try:
            holders = {"head": _package_root(ROOT, scratch, "head"), "base": _package_root(base_tree, scratch, "base")}
            for label, expression, engine in workloads:
                times: dict[str, list[float]] = {"head": [], "base": []}
                values: dict[str, list[float]] = {}
                peaks: dict[str, float] = {}
                for _ in range(args.repeats):
                    for name in ("head", "base"):
                        measured = _run(holders[name], expression, engine, args.scale)
                        times[name].append(measured["time"])
                        values[name] = measured["value"]
                        peaks[name] = measured["peak_mib"]
                if values["head"] != values["base"]:
                    print(f"{label}: values differ: head {values['head']} base {values['base']}")
                head, base = statistics.median(times["head"]), statistics.median(times["base"])
                rows.append({"workload": label, "engine": engine, "head_ms": 1e3 * head, "base_ms": 1e3 * base,
                             "ratio": head / base, "head_value": values["head"], "base_value": values["base"],
                             "head_peak_mib": peaks["head"], "base_peak_mib": peaks["base"],
                             "clock": "cpu" if args.scale else "wall"})
                print(f"{label:36s} {engine:4s} head {1e3 * head:8.1f} ms  base {1e3 * base:8.1f} ms  head/base {head / base:5.2f}x  "
                      f"peak {peaks['head']:.0f}/{peaks['base']:.0f} MiB  {values['head']}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], capture_output=True)
    if args.json_out:
        from dpforge.files import atomic_write_text  # the working tree's

        atomic_write_text(args.json_out, json.dumps({"base": args.base, "repeats": args.repeats, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
