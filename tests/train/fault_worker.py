"""Worker for tests/train/test_faults.py: a small private training run that can be killed.

Run as ``python fault_worker.py``: it imports torch and dpforge once, then reads JSON
commands from stdin, one per line, and answers one JSON line each:

* ``{"dir": d, "trainer": "dpsgd"|"dpzero", "kill": spec}``: fork a child that trains in
  folder ``d`` (resuming from ``d/ckpt.pt`` and ``d/run.jsonl`` when they exist) and
  SIGKILL it according to ``spec``: ``{"after_s": t}`` (the parent kills it after t
  seconds), ``{"journal_record": n}`` (the child kills itself half-way through writing
  its n-th journal record), ``{"checkpoint": n}`` (half-way through writing its n-th
  checkpoint) or null (no kill).  Answer: ``{"signal": s or 0, "exit": code,
  "markers": [...], "elapsed_s": t}`` where the markers are what the child reported before it died
  (``"released k"`` once step k's noisy output was returned, ``"ckpt k"`` once a
  checkpoint after k steps was in place, ``"done"``).

Forking after the imports keeps each trial at a few milliseconds instead of a fresh
interpreter's seconds.  The child's markers go to ``d/markers`` with unbuffered writes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch

torch.set_num_threads(1)

from dpforge.budget import journal as journal_module  # noqa: E402
from dpforge.budget.journal import RunJournal  # noqa: E402
from dpforge.budget.ledger import Ledger  # noqa: E402
from dpforge.mechanisms import Laplace  # noqa: E402
from dpforge.train import checkpoint as checkpoint_module  # noqa: E402
from dpforge.train.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from dpforge.train.dpsgd import AdaptiveClipping, DPSGDNoiseStep, per_sample_gradients  # noqa: E402
from dpforge.train.dpzo import DPZero  # noqa: E402

STEPS = 12
CHECKPOINT_EVERY = 3


def _marker(folder: str, text: str) -> None:
    descriptor = os.open(os.path.join(folder, "markers"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(descriptor, (text + "\n").encode())
    os.close(descriptor)


def _arm_self_kill(kill: dict | None) -> None:
    """Make the child SIGKILL itself half-way through its n-th journal record or checkpoint."""
    if not kill:
        return
    if "journal_record" in kill:
        target, calls = int(kill["journal_record"]), [0]
        original = RunJournal._append

        def append(self, kind, body):
            calls[0] += 1
            if calls[0] == target:
                real_write = os.write

                def half_write(fd, data):
                    real_write(fd, bytes(data[: max(1, len(data) // 2)]))
                    os.kill(os.getpid(), signal.SIGKILL)

                journal_module.os.write = half_write  # journal_module.os is os: this child only
            return original(self, kind, body)

        RunJournal._append = append
    if "checkpoint" in kill:
        target, calls = int(kill["checkpoint"]), [0]
        original_write = checkpoint_module.atomic_write_with

        def write(path, writer):
            calls[0] += 1
            if calls[0] != target:
                return original_write(path, writer)

            def half(handle):
                import io

                buffer = io.BytesIO()
                writer(buffer)
                data = buffer.getvalue()
                handle.write(data[: len(data) // 2])
                handle.flush()
                os.fsync(handle.fileno())
                os.kill(os.getpid(), signal.SIGKILL)

            return original_write(path, half)

        checkpoint_module.atomic_write_with = write


def _batch(step):
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 6, generator=generator), torch.randint(0, 3, (16,), generator=generator)


def _train_dpsgd(folder: str) -> None:
    journal = RunJournal(os.path.join(folder, "run.jsonl"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    noise = DPSGDNoiseStep(
        model, noise_multiplier=1.2, sampling_rate=0.05, expected_batch_size=16.0, thresholds=[1.0, 1.0],
        groups="per_layer", adaptive=AdaptiveClipping(count_noise_std=8.0), seed=7, ledger=Ledger(),
    )
    path = os.path.join(folder, "ckpt.pt")
    if os.path.exists(path):
        load_checkpoint(path, model=model, optimizer=optimizer, dpforge=noise)
    noise.ledger.attach_journal(journal)
    for step in range(noise.steps, STEPS):
        x, y = _batch(step)
        grads = per_sample_gradients(model, torch.nn.functional.cross_entropy, x, y)
        optimizer.zero_grad()
        noise.step(grads)
        _marker(folder, f"released {step}")
        optimizer.step()
        if (step + 1) % CHECKPOINT_EVERY == 0:
            save_checkpoint(path, model=model, optimizer=optimizer, dpforge=noise)
            _marker(folder, f"ckpt {step + 1}")
    _finish(folder, model, noise.ledger)


def _zo_batch(step):
    generator = torch.Generator().manual_seed(50 + step)
    x = torch.randn(32, 5, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def _train_dpzero(folder: str) -> None:
    journal = RunJournal(os.path.join(folder, "run.jsonl"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = DPZero(model.parameters(), lr=0.05, mechanism=Laplace(2.0, 1.0), perturbation_scale=1e-2,
                       seed=3, noise_seed=4, sampling_rate=0.02)
    path = os.path.join(folder, "ckpt.pt")
    if os.path.exists(path):
        load_checkpoint(path, model=model, optimizer=optimizer)
    optimizer.ledger.attach_journal(journal)
    for step in range(len(optimizer.history), STEPS):
        x, y = _zo_batch(step)
        optimizer.step(lambda: (model(x) - y).pow(2).squeeze(1))
        _marker(folder, f"released {step}")
        if (step + 1) % CHECKPOINT_EVERY == 0:
            save_checkpoint(path, model=model, optimizer=optimizer)
            _marker(folder, f"ckpt {step + 1}")
    _finish(folder, model, optimizer.ledger)


def _finish(folder: str, model, ledger) -> None:
    ledger.journal.close()
    torch.save([p.detach().clone() for p in model.parameters()], os.path.join(folder, "final.pt"))
    ledger.to_plan(os.path.join(folder, "run.toml"), delta=1e-5)
    _marker(folder, "done")


def _child(command: dict) -> None:
    try:
        _arm_self_kill(command.get("kill"))
        (_train_dpsgd if command["trainer"] == "dpsgd" else _train_dpzero)(command["dir"])
    except BaseException as error:  # reported through the exit code and the markers
        _marker(command["dir"], f"error {type(error).__name__}: {error}")
        os._exit(3)
    os._exit(0)


def _warm_up() -> None:
    """Run both trainers once in the parent, so that lazy imports (torch._dynamo, ...) and
    caches are in place before the children are forked."""
    import tempfile

    for train in (_train_dpsgd, _train_dpzero):
        with tempfile.TemporaryDirectory() as folder:
            train(folder)


def main() -> int:
    _warm_up()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        markers_path = os.path.join(command["dir"], "markers")
        if os.path.exists(markers_path):
            os.unlink(markers_path)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(command)
        kill = command.get("kill") or {}
        status = None
        if "after_s" in kill:
            deadline = time.monotonic() + float(kill["after_s"])
            while time.monotonic() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                status = None
                time.sleep(0.0005)
            else:
                os.kill(pid, signal.SIGKILL)
        if status is None:
            _, status = os.waitpid(pid, 0)
        markers = open(markers_path).read().splitlines() if os.path.exists(markers_path) else []
        answer = {
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "markers": markers,
            "elapsed_s": time.monotonic() - started,
        }
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
