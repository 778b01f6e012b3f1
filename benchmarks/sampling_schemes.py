"""Replace-one and fixed-size batches: dpforge against dp-accounting on a grid of workloads.

For each workload (delta = 1e-5, Gaussian, sigma, batch B of n, T steps) it asks

* Poisson sampling at q = B/n under replace-one: dpforge prv [lower, upper] vs
  dp-accounting's PLD (``NeighboringRelation.REPLACE_ONE``, discretisation 1e-4);
* fixed-size batches (sampling without replacement) under replace-one: dpforge prv and rdp
  vs dp-accounting's RDP accountant (``SampledWithoutReplacementDpEvent``, noise multiplier
  sigma/2: it is relative to the replace-one sensitivity there);
* shuffled epochs (T/ceil(n/B) of them): dpforge's certified lower bound next to the Poisson
  add-or-remove upper bound usually reported for such a run (no peer has this case).

One timed call per cell (a median of ``--repeats`` calls when asked); the JSON records the
machine.  Usage::

    python benchmarks/sampling_schemes.py [--repeats 3] [--json-out benchmarks/results/sampling_schemes.json]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import dp_accounting
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld

from dpforge.accounting import epsilon
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled, SampledWithoutReplacement, Shuffled, WithRelation

DELTA = 1e-5
#: (name, sigma, batch size, dataset size, epochs)
WORKLOADS = [
    ("R1", 1.0, 256, 60_000, 10),
    ("R2", 1.5, 1_000, 50_000, 10),
    ("R3", 0.8, 64, 10_000, 5),
    ("R4", 3.0, 500, 1_000, 25),
]


def timed(function, repeats: int):
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return value, statistics.median(times)


def run(repeats: int) -> list[dict]:
    relation = dp_accounting.NeighboringRelation
    rows = []
    for name, sigma, batch, size, epochs in WORKLOADS:
        q = batch / size
        steps = math.ceil(size / batch) * epochs
        poisson = Composed([(PoissonSampled(Gaussian(sigma), q), steps)])
        fixed = WithRelation(Composed([(SampledWithoutReplacement(Gaussian(sigma), batch, size), steps)]))
        shuffled = Composed([(Shuffled(Gaussian(sigma), batch, size), epochs)])

        ours_p, t_ours_p = timed(lambda: epsilon(WithRelation(poisson), DELTA), repeats)
        peer_p, t_peer_p = timed(
            lambda: pld.from_gaussian_mechanism(
                sigma, sampling_prob=q, neighboring_relation=relation.REPLACE_ONE, value_discretization_interval=1e-4
            )
            .self_compose(steps)
            .get_epsilon_for_delta(DELTA),
            repeats,
        )

        def peer_fixed():
            accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation.REPLACE_ONE)
            accountant.compose(
                dp_event.SelfComposedDpEvent(dp_event.SampledWithoutReplacementDpEvent(size, batch, dp_event.GaussianDpEvent(sigma / 2)), steps)
            )
            return accountant.get_epsilon(DELTA)

        ours_f, t_ours_f = timed(lambda: epsilon(fixed, DELTA), repeats)
        ours_fr, t_ours_fr = timed(lambda: epsilon(fixed, DELTA, engine="rdp"), repeats)
        peer_f, t_peer_f = timed(peer_fixed, repeats)
        ours_s, t_ours_s = timed(lambda: epsilon(shuffled, DELTA), repeats)
        rows.append(
            {
                "workload": name,
                "sigma": sigma,
                "batch_size": batch,
                "dataset_size": size,
                "steps": steps,
                "poisson_replace_one": {
                    "dpforge_prv": [ours_p.lower, ours_p.upper],
                    "dp_accounting_pld": peer_p,
                    "time_ratio": t_ours_p / t_peer_p,
                },
                "fixed_size_replace_one": {
                    "dpforge_prv": [ours_f.lower, ours_f.upper],
                    "dpforge_rdp": ours_fr.upper,
                    "dp_accounting_rdp": peer_f,
                    "time_ratio_prv": t_ours_f / t_peer_f,
                    "time_ratio_rdp": t_ours_fr / t_peer_f,
                },
                "shuffled_add_remove": {
                    "dpforge_lower": ours_s.lower,
                    "poisson_upper": ours_s.accuracy["poisson_upper"],
                    "seconds": t_ours_s,
                },
            }
        )
        print(f"{name}: done", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| workload | Poisson r-1: dpforge [lo, up] | dp-acc PLD | t ratio | fixed r-1: dpforge prv [lo, up] | dpforge rdp | dp-acc RDP | t ratio prv | shuffled lower | Poisson a/r upper |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, f, s = r["poisson_replace_one"], r["fixed_size_replace_one"], r["shuffled_add_remove"]
        lines.append(
            f"| {r['workload']} (sigma={r['sigma']}, B={r['batch_size']}, n={r['dataset_size']}, T={r['steps']}) "
            f"| [{p['dpforge_prv'][0]:.4f}, {p['dpforge_prv'][1]:.4f}] | {p['dp_accounting_pld']:.4f} | {p['time_ratio']:.2f} "
            f"| [{f['dpforge_prv'][0]:.3f}, {f['dpforge_prv'][1]:.3f}] | {f['dpforge_rdp']:.3f} | {f['dp_accounting_rdp']:.3f} "
            f"| {f['time_ratio_prv']:.2f} | {s['dpforge_lower']:.4f} | {s['poisson_upper']:.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json-out", default=str(Path(__file__).parent / "results" / "sampling_schemes.json"))
    args = parser.parse_args()
    rows = run(args.repeats)
    print(table(rows))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    machine = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "dp_accounting": getattr(dp_accounting, "__version__", "unknown"),
        "commit": commit,
        "repeats": args.repeats,
    }
    Path(args.json_out).write_text(json.dumps({"machine": machine, "delta": DELTA, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
