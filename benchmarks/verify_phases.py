#!/usr/bin/env python
"""``verify`` on plans of many distinct phases: time and final bracket.

    python benchmarks/verify_phases.py [PHASES ...] [--rows every|last|both] [--steps N]
                                                          (default: 10 100, every, 10)

Phase i of K is a Gaussian with sigma_i = 0.8 + 0.4 i/(K-1), q = 0.01, ``--steps`` steps
(default 10), at delta = 1e-5 (the S2 family of compare_peers.py, scaled); ``--steps 1``
makes each phase one step (a ledger with a noise multiplier per step: the S3 family at
10,000 phases).  After one untimed warm-up call, prints the time, the whole plan's
bracket, and the widest cumulative row (relative to its upper bound) with the number of
rows wider than the 1e-3 asked;
``--rows last`` times ``verify_plan(plan, rows="last")`` (the whole plan's verdict
without the table), ``both`` the two in turn on each plan.  Works against dpforge 0.1
as well (plans lived in dpforge.accounting.plan there), so two revisions can be
compared: run it once with each on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import sys
import time

try:
    from dpforge.budget import Phase, Plan, verify_plan
except ImportError:  # dpforge 0.1
    from dpforge.accounting.plan import Phase, Plan, verify_plan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phases", nargs="*", type=int, default=[10, 100])
    parser.add_argument("--rows", choices=("every", "last", "both"), default="every")
    parser.add_argument("--steps", type=int, default=10, help="steps of each phase, at least 1 (default 10)")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    modes = ("every", "last") if args.rows == "both" else (args.rows,)
    # untimed warm-up: the first call also loads the compiled kernels (about 0.3 s)
    verify_plan(Plan(delta=1e-5, phases=tuple(Phase("gaussian", 1.0 + 0.1 * i, sampling_rate=0.01, steps=10) for i in range(5))))
    for count in args.phases:
        phases = tuple(
            Phase("gaussian", 0.8 + 0.4 * i / max(count - 1, 1), sampling_rate=0.01, steps=args.steps) for i in range(count)
        )
        plan = Plan(delta=1e-5, phases=phases)
        for mode in modes:
            start = time.perf_counter()
            report = verify_plan(plan) if mode == "every" else verify_plan(plan, rows=mode)
            elapsed = time.perf_counter() - start
            widths = [(row.epsilon_upper - row.epsilon_lower) / row.epsilon_upper for row in report.phases if row.epsilon_upper > 0]
            wide = sum(width > 1e-3 for width in widths)
            print(
                f"{count:5d} phases  rows {mode:5s} {elapsed:8.2f} s  epsilon in [{report.epsilon_lower:.9f}, "
                f"{report.epsilon_upper:.9f}]  widest row {max(widths):.2e}, {wide} rows wider than 1e-3"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
