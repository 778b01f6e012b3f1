"""``PrivacyEngine(accountant="dpforge")`` after a plain ``import dpforge`` (dpforge._plugins),
without ``import dpforge`` importing torch or Opacus."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("opacus")
pytest.importorskip("torch")


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


TRAIN_ONE_STEP = """
import torch
from opacus import PrivacyEngine
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = torch.utils.data.DataLoader(data, batch_size=8)
engine = PrivacyEngine(accountant="dpforge")
model, optimizer, loader = engine.make_private(
    module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.1, max_grad_norm=1.0
)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    break
print(type(engine.accountant).__module__, len(engine.accountant), engine.get_epsilon(1e-5))
"""


def test_import_dpforge_imports_neither_torch_nor_opacus():
    assert _run("import sys, dpforge; print(sorted(m for m in ('torch', 'opacus') if m in sys.modules))") == "[]"


@pytest.mark.parametrize("order", ["import dpforge\n", ""], ids=["dpforge-first", "dpforge-after-opacus"])
def test_privacy_engine_accountant_dpforge_trains_a_step(order):
    code = order + TRAIN_ONE_STEP.replace("from opacus import PrivacyEngine\n", "from opacus import PrivacyEngine\nimport dpforge\n")
    module, steps, epsilon = _run(code).split()
    assert module == "dpforge.train.opacus" and int(steps) >= 1
    # the certified epsilon of the steps taken (Opacus' Poisson rate: batch 8 of 64)
    from dpforge.accounting import epsilon as certified
    from dpforge.mechanisms import Composed, Gaussian, PoissonSampled

    expected = certified(Composed([(PoissonSampled(Gaussian(1.1), 8 / 64), int(steps))]), 1e-5).upper
    assert float(epsilon) == pytest.approx(expected, rel=1e-9)


def test_without_dpforge_opacus_does_not_know_the_name():
    # the registration comes from dpforge, not from Opacus itself
    out = _run(
        "from opacus.accountants import create_accountant\n"
        "try:\n    create_accountant('dpforge')\nexcept ValueError:\n    print('unknown')\n"
    )
    assert out == "unknown"
