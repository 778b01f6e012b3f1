"""Fault injection: SIGKILL a small private training run at random points, recover, resume.

Each trial starts a run (DP-SGD with adaptive clipping, or DPZero; 12 steps, a journal
fsync'd per record, a checkpoint every 3 steps) in a forked child of
``fault_worker.py`` and SIGKILLs it: after a random time (anywhere in a step, a journal
write or a checkpoint save), or half-way through writing a chosen journal record, or
half-way through writing a chosen checkpoint.  Then it checks that

* the recovered journal is a prefix of the uninterrupted run's (record for record), with
  a torn tail reported, never raised;
* no released step is missing from it (every step whose noisy output the child saw);
* the checkpoint on disk is whole (the previous one after a kill mid-save);
* resuming from the checkpoint and the journal finishes with the uninterrupted run's
  parameters (torch.equal), the same journal bytes and the same plan file bytes.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dpforge.budget.journal import read_journal  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")

WORKER = Path(__file__).with_name("fault_worker.py")
TRIALS = 30


class Worker:
    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert json.loads(self.process.stdout.readline()) == {"ready": True}

    def run(self, folder, trainer, kill=None):
        self.process.stdin.write(json.dumps({"dir": str(folder), "trainer": trainer, "kill": kill}) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def worker():
    worker = Worker()
    yield worker
    worker.close()


def _released(markers):
    return sum(1 for m in markers if m.startswith("released "))


@pytest.mark.slow
def test_sigkill_at_random_points_loses_nothing_released_and_resumes_exactly(tmp_path, worker):
    references = {}
    for trainer in ("dpsgd", "dpzero"):
        folder = tmp_path / f"reference_{trainer}"
        folder.mkdir()
        answer = worker.run(folder, trainer)
        assert answer["signal"] == 0 and answer["exit"] == 0 and answer["markers"][-1] == "done", answer
        references[trainer] = {
            "journal": (folder / "run.jsonl").read_bytes(),
            "records": read_journal(folder / "run.jsonl").records,
            "params": torch.load(folder / "final.pt"),
            "plan": (folder / "run.toml").read_bytes(),
            "elapsed_s": answer["elapsed_s"],
        }
    rng = random.Random(20261123)
    report = []
    for trial in range(TRIALS):
        trainer = ("dpsgd", "dpzero")[trial % 2]
        reference = references[trainer]
        kind = ("after_s", "journal_record", "checkpoint")[trial % 3]
        kill = {
            "after_s": {"after_s": rng.uniform(0.0, 0.8 * reference["elapsed_s"])},
            "journal_record": {"journal_record": rng.randint(1, 13)},
            "checkpoint": {"checkpoint": rng.randint(1, 4)},
        }[kind]
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        answer = worker.run(folder, trainer, kill)
        assert answer["exit"] in (None, 0), answer  # killed, or finished before the timer
        killed = answer["signal"] == 9
        released = _released(answer["markers"])
        recovered = read_journal(folder / "run.jsonl") if (folder / "run.jsonl").exists() else None
        records = recovered.records if recovered else ()
        assert records == reference["records"][: len(records)]  # a prefix of the true journal
        assert (recovered.steps if recovered else 0) >= released  # nothing released is lost
        if (folder / "ckpt.pt").exists():  # a whole checkpoint, never a torn one
            torch.load(folder / "ckpt.pt", weights_only=True)
        resumed = worker.run(folder, trainer)
        assert resumed["signal"] == 0 and resumed["markers"][-1] == "done", resumed
        assert all(torch.equal(a, b) for a, b in zip(reference["params"], torch.load(folder / "final.pt")))
        assert (folder / "run.jsonl").read_bytes() == reference["journal"]
        assert (folder / "run.toml").read_bytes() == reference["plan"]
        report.append((trainer, kind, killed, released, recovered.steps if recovered else 0,
                       bool(recovered and recovered.torn_tail), (answer["markers"] or ["(start)"])[-1]))
    print("\ntrainer  kill            killed released recovered torn  last marker")
    for row in report:
        print("%-8s %-15s %-6s %8d %9d %-5s %s" % row)
    assert sum(row[2] for row in report) >= TRIALS // 2  # most trials were really killed
    assert any(row[5] for row in report)  # torn tails were produced and recovered
