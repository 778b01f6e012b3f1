"""Noise exactly once per global step under torch.distributed (2 CPU processes, gloo)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from dpforge.mechanisms import LMO, Gaussian, Laplace  # noqa: E402
from dpforge.train.distributed import noisy_all_reduce_  # noqa: E402
from dpforge.train.noise import sample_noise  # noqa: E402


# The workers live in a script (spawned processes must import their target by name,
# which a test module collected by pytest's importlib mode cannot offer).
WORKER = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from dpforge.mechanisms import Gaussian, Laplace
    from dpforge.train.distributed import noisy_all_reduce_, shared_generator
    from dpforge.train.dpsgd import DPSGDNoiseStep
    from dpforge.train.noise import add_noise_

    N = 200_000

    def worker(rank, world, folder):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world)
        results = {}
        cases = [
            ("gaussian-rank0", Gaussian(1.5, 2.0), "rank0"),
            ("gaussian-shared", Gaussian(1.5, 2.0), "shared_seed"),
            ("gaussian-split", Gaussian(1.5, 2.0), "gaussian_split"),
            ("laplace-rank0", Laplace(1.3, dimension=N, norm="l2"), "rank0"),
            ("laplace-shared", Laplace(1.3, dimension=N, norm="l2"), "shared_seed"),
        ]
        for name, mechanism, mode in cases:
            if mode == "shared_seed":
                generator = shared_generator()  # rank 0 picks the seed and broadcasts it
            else:
                generator = torch.Generator().manual_seed(1000 + rank)  # independent streams
            tensor = torch.zeros(N)
            noisy_all_reduce_([tensor], mechanism, generator, mode=mode)
            gathered = [torch.zeros(1) for _ in range(world)]
            dist.all_gather(gathered, tensor.sum().reshape(1))
            results[name] = {"var": float(tensor.var()), "same_on_all_ranks": len({float(g) for g in gathered}) == 1}
        # the naive way (every rank adds the full noise) for contrast
        tensor = torch.zeros(N)
        add_noise_([tensor], Gaussian(1.5, 2.0), torch.Generator().manual_seed(2000 + rank))
        dist.all_reduce(tensor)
        results["gaussian-naive"] = {"var": float(tensor.var()), "same_on_all_ranks": True}
        # the DP-SGD step: local examples, noise once on the global sum
        model = torch.nn.Linear(200, 100)
        step = DPSGDNoiseStep(
            model, noise_multiplier=1.2, sampling_rate=0.1, expected_batch_size=8.0, thresholds=0.5,
            generator=torch.Generator().manual_seed(3000 + rank),
        )
        grads = {n: torch.zeros(4, *p.shape) for n, p in model.named_parameters()}
        noisy = step.privatize(grads)
        flat = torch.cat([t.flatten() for t in noisy.values()]) * 8.0
        results["dpsgd"] = {"var": float(flat.var()), "same_on_all_ranks": True, "std": step.allocation.noise_stds[0]}
        if rank == 0:
            with open(f"{folder}/results.json", "w") as handle:
                json.dump(results, handle)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(worker, args=(2, sys.argv[1]), nprocs=2, join=True)
    """
)


@pytest.mark.slow
def test_two_processes_add_the_noise_once(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    # single-process reference variances of the same mechanisms
    single_gauss = float(sample_noise(Gaussian(1.5, 2.0), 200_000, torch.Generator().manual_seed(0)).var())
    single_lap = float(sample_noise(Laplace(1.3), 200_000, torch.Generator().manual_seed(0)).var())
    assert single_gauss == pytest.approx(9.0, rel=0.02) and single_lap == pytest.approx(2 * 1.3**2, rel=0.03)
    for name in ("gaussian-rank0", "gaussian-shared", "gaussian-split"):
        assert results[name]["var"] == pytest.approx(single_gauss, rel=0.03), name
        assert results[name]["same_on_all_ranks"], name
    for name in ("laplace-rank0", "laplace-shared"):
        assert results[name]["var"] == pytest.approx(single_lap, rel=0.04), name
        assert results[name]["same_on_all_ranks"], name
    assert results["gaussian-naive"]["var"] == pytest.approx(2 * single_gauss, rel=0.03)
    assert results["dpsgd"]["var"] == pytest.approx(results["dpsgd"]["std"] ** 2, rel=0.04)


def test_without_a_process_group_the_noise_is_simply_added():
    tensor = torch.zeros(50_000)
    noisy_all_reduce_([tensor], Gaussian(2.0), torch.Generator().manual_seed(0), mode="shared_seed")
    assert float(tensor.var()) == pytest.approx(4.0, rel=0.03)


def test_modes_that_cannot_be_sound_are_refused():
    with pytest.raises(ValueError, match="gaussian_split' needs a Gaussian"):
        noisy_all_reduce_([torch.zeros(1)], Laplace(1.0), mode="gaussian_split")
    with pytest.raises(ValueError, match="mode must be one of"):
        noisy_all_reduce_([torch.zeros(1)], Gaussian(1.0), mode="every_rank")
    with pytest.raises(ValueError, match="not the scalar mechanism"):
        noisy_all_reduce_([torch.zeros(5)], LMO(), mode="rank0")
