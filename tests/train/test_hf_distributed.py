"""DPTrainer under torchrun: 2 gloo processes on CPU, noise once per global step."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("opacus")

# Each rank trains 2 steps with sigma = 1000 (the clipped gradients are negligible next to
# the noise) and plain SGD, then reports its parameter change.  One draw of N(0, (sigma C)^2)
# per coordinate and step, divided by the expected global batch, gives std ratio 1; noise
# added on both ranks would give sqrt(2), split without care 1/sqrt(2).
WORKER = r"""
import json, os, sys
import torch
import torch.distributed as dist
import transformers
from dpforge.train.hf import DPTrainer, PrivacyArguments, select_parameters

torch.set_num_threads(1)
folder = sys.argv[1]
VOCAB, LENGTH, N = 50, 12, 64

class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, VOCAB, (N, LENGTH), generator=g)
        self.labels = (self.ids[:, 0] > VOCAB // 2).long()
    def __len__(self):
        return N
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}

torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=32, max_position_embeddings=LENGTH, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
model = select_parameters(transformers.BertForSequenceClassification(config), "all", freeze=["bert.embeddings.position_embeddings.weight"])
before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
SIGMA, CLIP, STEPS = 1000.0, 1.0, 2
args = transformers.TrainingArguments(output_dir=os.path.join(folder, "run"), per_device_train_batch_size=8, max_steps=STEPS,
    use_cpu=True, ddp_backend="gloo", report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
    lr_scheduler_type="constant", learning_rate=1e-3)
optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
trainer = DPTrainer(model=model, args=args, train_dataset=Tokens(), optimizers=(optimizer, None),
    privacy=PrivacyArguments(noise_multiplier=SIGMA, clip=CLIP, seed=11))
trainer.train()
delta = torch.cat([(p.detach() - before[n]).flatten() for n, p in model.named_parameters() if p.requires_grad])
rank, world = dist.get_rank(), dist.get_world_size()
gathered = [torch.zeros_like(delta) for _ in range(world)]
dist.all_gather(gathered, delta)
expected_std = 1e-3 * SIGMA * CLIP / trainer.expected_batch_size * STEPS ** 0.5
result = {"rank": rank, "world": world, "ranks_agree": all(torch.equal(gathered[0], g) for g in gathered),
    "std_ratio": float(delta.std()) / expected_std, "steps": trainer.ledger.steps,
    "sampling_rate": trainer.ledger.entries[0].sampling_rate, "numel": delta.numel()}
with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
    json.dump(result, handle)
# tear the gloo group down before exiting: a process that exits with its gloo threads
# still running can abort ("terminate called without an active exception")
dist.barrier()
dist.destroy_process_group()
# and leave without the interpreter's teardown: with the group destroyed, rank 1 still
# aborted so once in CI (2026-11-27, 1 of 10 clean-clone runs that day),
# from C++ destructors of threads torch leaves behind, which is torch's and not what this
# test checks
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_rank_dp_trainer_adds_the_noise_once_and_keeps_ranks_in_sync(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), str(script), str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for result in results:
        assert result["world"] == 2 and result["ranks_agree"]
        assert result["steps"] == 2  # one ledger step per global step, on every rank
        assert result["sampling_rate"] == pytest.approx(16 / 64)  # global batch / N
        # std of the std estimate over ~3400 coordinates is about 1.2 %
        assert result["std_ratio"] == pytest.approx(1.0, abs=0.08)
