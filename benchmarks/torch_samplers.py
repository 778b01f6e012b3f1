"""Torch noise samplers: throughput relative to torch.randn, and DP-ZO step memory.

    python benchmarks/torch_samplers.py [--cpu-elements 1e7] [--gpu-elements 1e8 1e9]
                                        [--repeats 5] [--threads 1] [--json OUT]

1. **Throughput.**  For each mechanism (Gaussian, Laplace, LMO with all three mixture
   components, LMO without its Gamma part) the wall time of a draw of N float32
   elements with :func:`dpforge.train.noise.sample_noise` divided by the time
   of ``torch.randn(N)`` on the same device with the same kind of generator, timed back
   to back in each round; the median ratio over ``repeats`` rounds is reported.  CPU:
   N = 1e7 (``--threads`` intra-op threads).  CUDA (when available): N = 1e8 and 1e9,
   timed with CUDA events after a warm-up.
2. **Memory of a DP-ZO step** (CPU).  tracemalloc cannot see torch's allocator, so the
   script uses the torch profiler's allocator events (``profile_memory=True``): every
   allocation and free of the CPU allocator inside the measured region, in time order;
   the peak of their running sum is the peak memory *allocated on top of what existed
   before the region* (parameters and inputs already live are not counted).  Compared:
   a no-grad forward pass, one DPZero step (two forward passes plus three in-place
   perturbation passes), a forward+backward pass (what DP-SGD needs before any
   per-sample work), and a naive ZO step that keeps a copy of the parameters.  On CUDA
   the same numbers come from ``torch.cuda.max_memory_allocated`` deltas.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from dpforge.mechanisms import LMO, Gaussian, Laplace
from dpforge.train.dpzo import DPZero
from dpforge.train.noise import sample_noise
from dpforge.files import atomic_write_text

MECHANISMS = {
    "gaussian": Gaussian(1.0),
    "laplace": Laplace(1.0),
    "lmo (gamma+exp+uniform)": LMO(
        weights=(0.5, 0.3, 0.2), gamma_shape=3.0, gamma_scale=0.5, exponential_rate=2.0, uniform_low=0.5, uniform_high=2.0
    ),
    "lmo (exp+uniform)": LMO(weights=(0.0, 0.5, 0.5), exponential_rate=2.0, uniform_low=0.5, uniform_high=2.0),
}


def _once(function, device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = function()
        end.record()
        torch.cuda.synchronize()
        del out
        return start.elapsed_time(end) / 1e3
    begin = time.perf_counter()
    out = function()
    seconds = time.perf_counter() - begin
    del out
    return seconds


def throughput(device: torch.device, elements: int, repeats: int) -> dict:
    """Each round times randn and then every sampler back to back; the reported ratio is
    the median over rounds of (sampler time / randn time of the same round), which is
    robust to load from other processes drifting over the run."""
    generator = torch.Generator(device=device).manual_seed(0)

    def randn():
        return torch.randn(elements, generator=generator, device=device)

    samplers = {
        name: (lambda m=mechanism: sample_noise(m, elements, generator=generator, device=device))
        for name, mechanism in MECHANISMS.items()
    }
    for function in (randn, *samplers.values()):  # warm-up
        _once(function, device)
    base_times, ratios = [], {name: [] for name in samplers}
    for _ in range(repeats):
        base = _once(randn, device)
        base_times.append(base)
        for name, function in samplers.items():
            ratios[name].append(_once(function, device) / base)
    return {
        "device": str(device),
        "elements": elements,
        "randn_seconds": statistics.median(base_times),
        "ratios": {name: statistics.median(values) for name, values in ratios.items()},
    }


def _profiled_peak(function) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        function()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def _cuda_peak(function) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    function()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def memory(device: torch.device, width: int = 2048, depth: int = 4, batch: int = 16) -> dict:
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)
    params = list(model.parameters())
    parameter_bytes = sum(p.numel() * p.element_size() for p in params)
    largest = max(p.numel() * p.element_size() for p in params)
    peak = _cuda_peak if device.type == "cuda" else _profiled_peak

    def forward():
        with torch.no_grad():
            return (model(x) - y).pow(2).squeeze(1)

    optimizer = DPZero(params, lr=1e-4, mechanism=Gaussian(1.0), perturbation_scale=1e-3, seed=0)

    def dpzo_step():
        optimizer.step(forward)

    def backward():
        model.zero_grad(set_to_none=True)
        (model(x) - y).pow(2).mean().backward()
        for p in params:  # the grads are the point of the pass; drop them after measuring
            p.grad = None

    def naive_zo_step():
        with torch.no_grad():
            saved = [p.detach().clone() for p in params]
            forward()
            for p, s in zip(params, saved):
                p.copy_(s)

    forward()  # warm-up (lazy initialisation)
    return {
        "device": str(device),
        "parameters_MB": parameter_bytes / 2**20,
        "largest_parameter_MB": largest / 2**20,
        "forward_no_grad_MB": peak(forward) / 2**20,
        "dpzo_step_MB": peak(dpzo_step) / 2**20,
        "forward_backward_MB": peak(backward) / 2**20,
        "zo_step_with_parameter_copy_MB": peak(naive_zo_step) / 2**20,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-elements", type=float, default=1e7)
    parser.add_argument("--gpu-elements", type=float, nargs="*", default=[1e8, 1e9])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = {"torch": torch.__version__, "throughput": [], "memory": []}
    devices = [(torch.device("cpu"), [args.cpu_elements])]
    if torch.cuda.is_available():
        devices.append((torch.device("cuda"), args.gpu_elements))
    for device, sizes in devices:
        for elements in sizes:
            row = throughput(device, int(elements), args.repeats)
            report["throughput"].append(row)
            ratios = "  ".join(f"{k} {v:.2f}x" for k, v in row["ratios"].items())
            print(f"{device.type} N={int(elements):.0e} randn {row['randn_seconds'] * 1e3:.1f} ms | {ratios}")
        row = memory(device)
        report["memory"].append(row)
        print(f"{device.type} memory (MB above what was live): " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k != "device"))
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
