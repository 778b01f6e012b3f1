#!/usr/bin/env python
"""Random sweep of the whole input domain: no unnamed error, no NaN, bounds in order.

    python benchmarks/domain_sweep.py [--seed 1] [--cases 60] [--timeout 90] [--json-out FILE]

Draws subsampled (or plain) Gaussian and Laplace compositions log-uniformly over
sigma 0.05-1e4 (Laplace b 0.05-1e3), q 1e-9-1 (q = 1 a fifth of the time), T 1-1e8, and
asks ``epsilon`` at delta 1e-16-0.5 (1e-300-0.9 a sixth of the time) or ``delta`` at eps
1e-6-1e6 -- far beyond the issue's target domain on purpose: every valid input must get
a certified answer or a one-line dpforge error (a named limit), never a numpy error, a
NaN, a lower bound above the upper, or, for Gaussians, a PRV lower bound above the RDP
engine's certified upper.  Each call runs in a child process with ``--timeout`` seconds;
a call over it is counted, not failed (large grids can legitimately take long).

Prints one JSON line per call and a summary; exits 1 when any call crashed, returned a
NaN or bounds out of order.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import random
import sys
import time
import warnings
from collections import Counter

#: statuses that fail the sweep
DEFECTS = ("CRASH", "NAN", "ORDER", "ABOVE_RDP", "DIED")


def draw(rng: random.Random) -> dict:
    """One input, log-uniform over the domain in the module docstring."""
    kind = rng.choice(["gaussian", "gaussian", "laplace"])
    scale = 10 ** rng.uniform(-1.3, 4.0 if kind == "gaussian" else 3.0)
    rate = 1.0 if rng.random() < 0.2 else 10 ** rng.uniform(-9.0, 0.0)
    steps = int(10 ** rng.uniform(0.0, 8.0))
    query = rng.choice(["epsilon", "epsilon", "epsilon", "delta"])
    if query == "epsilon":
        value = 10 ** rng.uniform(-300.0, -0.05) if rng.random() < 1 / 6 else 10 ** rng.uniform(-16.0, -0.3)
    else:
        value = 10 ** rng.uniform(-6.0, 6.0)
    return {"kind": kind, "scale": scale, "sampling_rate": rate, "steps": steps, "query": query, "value": value}


def run(case: dict) -> dict:
    """Answer one input in this (child) process and classify the outcome."""
    from dpforge.accounting import delta, epsilon
    from dpforge.errors import DpforgeError
    from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled

    mechanism = Gaussian(case["scale"]) if case["kind"] == "gaussian" else Laplace(case["scale"])
    step = PoissonSampled(mechanism, case["sampling_rate"]) if case["sampling_rate"] < 1 else mechanism
    description = Composed([(step, case["steps"])])
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            query = epsilon if case["query"] == "epsilon" else delta
            result = query(description, case["value"])
        out = {"status": "ok", "lower": result.lower, "upper": result.upper, "reached": result.accuracy.get("reached")}
        out["warnings"] = sorted({type(w.message).__name__ for w in caught})
        if any(isinstance(v, float) and math.isnan(v) for v in (result.lower, result.upper)):
            out["status"] = "NAN"
        elif result.lower > result.upper:
            out["status"] = "ORDER"
        elif case["query"] == "epsilon" and case["kind"] == "gaussian" and math.isfinite(result.upper):
            try:
                rdp = epsilon(description, case["value"], engine="rdp")
            except DpforgeError:
                rdp = None
            if rdp is not None and result.lower > rdp.upper * (1 + 1e-12):
                out["status"], out["rdp_upper"] = "ABOVE_RDP", rdp.upper
    except DpforgeError as error:
        message = str(error)
        out = {"status": "refused", "error": f"{type(error).__name__}: {message[:160]}", "one_line": "\n" not in message}
        if "\n" in message:
            out["status"] = "CRASH"
    except Exception as error:  # noqa: BLE001 - the sweep looks for exactly these
        out = {"status": "CRASH", "error": f"{type(error).__name__}: {str(error)[:200]}"}
    out["time_s"] = time.perf_counter() - start
    return out


def _finite(value):
    """JSON-safe: a non-finite float (an upper bound of +inf) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per call (child process)")
    parser.add_argument("--json-out", help="write every call and the summary here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = [draw(rng) for _ in range(args.cases)]
    context = mp.get_context("spawn")
    pool = context.Pool(1)
    rows, counts = [], Counter()
    try:
        for case in cases:
            pending = pool.apply_async(run, (case,))
            try:
                outcome = pending.get(timeout=args.timeout)
            except mp.TimeoutError:
                pool.terminate()
                pool = context.Pool(1)
                outcome = {"status": "timeout"}
            except Exception as error:  # noqa: BLE001 - the child died (memory, signal)
                pool.terminate()
                pool = context.Pool(1)
                outcome = {"status": "DIED", "error": str(error)[:200]}
            row = {**case, **outcome}
            rows.append(row)
            counts[row["status"]] += 1
            print(json.dumps({key: _finite(value) for key, value in row.items()}), flush=True)
    finally:
        pool.terminate()
    from compare_peers import machine_info  # beside this script: date, versions, git revision

    summary = {"seed": args.seed, "cases": args.cases, "timeout_s": args.timeout, "statuses": dict(counts)}
    summary["machine"] = machine_info()
    print(json.dumps({key: value for key, value in summary.items() if key != "machine"}))
    if args.json_out:
        with open(args.json_out, "w") as handle:
            calls = [{key: _finite(value) for key, value in row.items()} for row in rows]
            json.dump({"summary": summary, "calls": calls}, handle, indent=1, allow_nan=False)
    return 1 if any(counts[status] for status in DEFECTS) else 0


if __name__ == "__main__":
    sys.exit(main())
