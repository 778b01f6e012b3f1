#!/usr/bin/env python
"""DPTrainer / DPZOTrainer steps against plain Opacus on the example's model: time and memory.

    python benchmarks/hf_dpsgd_vs_opacus.py [--batch 256] [--steps 6] [--json-out FILE]

The model and data are those of ``examples/finetune_transformer.py`` (same flags for the
sizes).  Each configuration runs in its own fresh subprocess, so the memory figures do not
share a high-water mark:

* ``nonprivate`` -- forward, backward, AdamW step;
* ``opacus`` -- ``opacus.PrivacyEngine.make_private`` (GradSampleModule hooks, flat
  clipping, Gaussian noise) then forward, backward, optimizer step;
* ``dpforge_dpsgd`` -- ``DPTrainer.training_step`` (Opacus hooks, per-layer group-wise
  clipping by ``DPSGDNoiseStep``, Gaussian noise, ledger) then the Trainer's AdamW step;
* ``dpforge_dpzo`` -- ``DPZOTrainer.training_step`` (two forward passes, one scalar);
* ``inference`` -- one forward pass under ``no_grad`` (the floor DP-ZO is compared with).

All see the same fixed batch of ``--batch`` examples.  Time: the median over ``--steps``
steps after one warm-up step.  Memory: the process's peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) after the steps minus the peak before the
warm-up step (model, data and imports loaded), i.e. what the steps themselves added at
their peak on the CPU (on a GPU, ``torch.cuda.max_memory_allocated`` is reported instead).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "finetune_transformer.py"
KINDS = ("nonprivate", "opacus", "dpforge_dpsgd", "dpforge_dpzo", "inference")


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def _measure(kind: str, argv: list[str], steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("finetune_transformer", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    options = example.parse(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = example.SentimentTokens(options.train_size, options.length, seed=0)
    batch = {"input_ids": data.ids[: options.batch].to(device), "labels": data.labels[: options.batch].to(device)}
    model = example.build_model(options, 0).to(device)
    folder = tempfile.mkdtemp()
    if kind == "nonprivate":
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

        def step():
            optimizer.zero_grad()
            model(**batch).loss.backward()
            optimizer.step()

    elif kind == "opacus":
        from opacus import PrivacyEngine

        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        loader = torch.utils.data.DataLoader(data, batch_size=options.batch)
        engine = PrivacyEngine()
        module, optimizer, _ = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0
        )

        def step():
            optimizer.zero_grad()
            module(**batch).loss.backward()
            optimizer.step()

    elif kind == "dpforge_dpsgd":
        from dpforge.train.hf import DPTrainer, PrivacyArguments

        trainer = DPTrainer(
            model=model,
            args=example.training_arguments(options, folder, 10, 1e-3),
            train_dataset=data,
            privacy=PrivacyArguments(noise_multiplier=1.0, clip=1.0, groups="per_layer", strategy="equal_budget", seed=0),
        )
        trainer.create_optimizer()

        def step():
            trainer.training_step(trainer.model, dict(batch))
            trainer.optimizer.step()
            trainer.model.zero_grad(set_to_none=True)

    elif kind == "dpforge_dpzo":
        from dpforge.mechanisms import Gaussian
        from dpforge.train.hf import DPZOTrainer, ZOPrivacyArguments

        trainer = DPZOTrainer(
            model=model,
            args=example.training_arguments(options, folder, 10, 1e-4),
            train_dataset=data,
            privacy=ZOPrivacyArguments(mechanism=Gaussian(1.0, sensitivity=0.1), seed=0),
        )
        trainer.create_optimizer()

        def step():
            trainer.training_step(trainer.model, dict(batch))

    else:  # inference

        def step():
            with torch.no_grad():
                model(**batch)

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated()
    before = _peak_bytes()
    step()  # warm-up (first-call paths); its memory counts like any step's
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() - resident if device.type == "cuda" else _peak_bytes() - before
    return {"kind": kind, "median_step_s": statistics.median(times), "step_peak_bytes": peak, "before_bytes": before}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    options, rest = parser.parse_known_args(argv)
    if options.worker:
        print(json.dumps(_measure(options.worker, rest, options.steps)))
        return 0
    results = {}
    for kind in KINDS:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", kind, "--steps", str(options.steps), *rest],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
        results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
        r = results[kind]
        print(f"{kind:15s} median step {r['median_step_s'] * 1e3:8.1f} ms   step peak {r['step_peak_bytes'] / 2**20:8.1f} MiB")
    ratios = {
        "dpsgd_time_vs_opacus": results["dpforge_dpsgd"]["median_step_s"] / results["opacus"]["median_step_s"],
        "dpsgd_memory_vs_opacus": results["dpforge_dpsgd"]["step_peak_bytes"] / max(results["opacus"]["step_peak_bytes"], 1),
        "dpzo_memory_vs_inference": results["dpforge_dpzo"]["step_peak_bytes"] / max(results["inference"]["step_peak_bytes"], 1),
    }
    for name, value in ratios.items():
        print(f"{name:26s} {value:.2f}")
    if options.json_out:
        Path(options.json_out).write_text(json.dumps({"argv": rest, "results": results, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
