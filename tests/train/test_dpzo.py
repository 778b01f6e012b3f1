"""DP-ZO / DPZero: in-place perturbation, clipping, scalar privatisation, replay, BiTFiT."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")

from dpforge.budget.ledger import Ledger, LedgerEntry  # noqa: E402
from dpforge.cli.main import main as cli_main  # noqa: E402
from dpforge.mechanisms import LMO, Gaussian, Laplace, PureDP  # noqa: E402
from dpforge.train.bitfit import freeze_all_but_bias  # noqa: E402
from dpforge.train.dpzo import DPZero, ZOStep, clipped_difference_sum, replay  # noqa: E402


LMO_SCALAR = LMO(weights=(0.6, 0.0, 0.4), gamma_shape=4.0, gamma_scale=0.5, uniform_low=0.5, uniform_high=1.5)


def _model(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dtype)


def _batches(count=8, batch=32, seed=1, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(5, 1, generator=generator, dtype=dtype)
    for _ in range(count):
        x = torch.randn(batch, 5, generator=generator, dtype=dtype)
        yield x, x @ w


def _train(model, mechanism, steps=8, lr=0.05, lam=1e-2, seed=3, noise_seed=4, dtype=torch.float32, **options):
    optimizer = DPZero(
        model.parameters(), lr=lr, mechanism=mechanism, perturbation_scale=lam, seed=seed,
        noise_generator=torch.Generator().manual_seed(noise_seed), **options,
    )
    for x, y in _batches(steps, dtype=dtype):
        optimizer.step(lambda: (model(x) - y).pow(2).squeeze(1))
    return optimizer


@pytest.mark.parametrize(
    "mechanism", [Gaussian(1.0, sensitivity=2.0), Laplace(3.0, sensitivity=2.0), LMO_SCALAR], ids=["gauss", "lap", "lmo"]
)
def test_replay_reproduces_the_parameters_bit_for_bit(mechanism):
    model = _model()
    fresh = copy.deepcopy(model)
    optimizer = _train(model, mechanism)
    assert len(optimizer.history) == 8 and all(isinstance(s, ZOStep) for s in optimizer.history)
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    replay(fresh, optimizer.history, lr=0.05, perturbation_scale=1e-2)
    for trained, replayed in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(trained, replayed)
    # replaying from plain tuples works too (a history read back from JSON)
    again = _model()
    replay(again, [(s.seed, s.scalar) for s in optimizer.history], lr=0.05, perturbation_scale=1e-2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))


def test_replay_bit_for_bit_in_float64_and_bfloat16():
    for dtype in (torch.float64, torch.bfloat16):
        model = _model(dtype=dtype)
        fresh = copy.deepcopy(model)
        optimizer = _train(model, Gaussian(1.0), dtype=dtype)
        replay(fresh, optimizer.history, lr=0.05, perturbation_scale=1e-2)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))


def test_seeds_reproduce_the_history():
    a = _train(_model(), Laplace(1.0)).history
    b = _train(_model(), Laplace(1.0)).history
    c = _train(_model(), Laplace(1.0), noise_seed=5).history
    assert a == b
    assert [s.seed for s in a] == [s.seed for s in c] and a != c


def test_clipping_bounds_each_examples_contribution():
    generator = torch.Generator().manual_seed(0)
    plus = 100 * torch.randn(50, generator=generator)
    minus = 100 * torch.randn(50, generator=generator)
    total = clipped_difference_sum(plus, minus, 0.5)
    for j in range(50):
        keep = torch.arange(50) != j
        assert abs(total - clipped_difference_sum(plus[keep], minus[keep], 0.5)) <= 0.5 + 1e-12
    # through the optimizer with (almost) no noise: g = sum clip(d_i) / (2 lambda B)
    parameter = torch.nn.Parameter(torch.zeros(3))
    optimizer = DPZero(
        [parameter], lr=0.1, mechanism=Gaussian(1e-12, sensitivity=0.5), perturbation_scale=0.01, seed=0,
        noise_generator=torch.Generator().manual_seed(0),
    )
    optimizer.step(lambda: 1e6 * parameter.sum().expand(10))  # every |d_i| is far above C
    (step,) = optimizer.history
    assert abs(step.scalar) == pytest.approx(10 * 0.5 / (2 * 0.01 * 10), rel=1e-9)


@pytest.mark.parametrize("name", ["gauss", "lap", "lmo"])
def test_the_privatised_scalar_has_the_mechanisms_law(name):
    mechanism, cdf = {
        "gauss": (Gaussian(0.8, sensitivity=1.5), stats.norm(scale=1.2).cdf),
        "lap": (Laplace(0.7, sensitivity=1.5), stats.laplace(scale=0.7).cdf),
        "lmo": (LMO_SCALAR, LMO_SCALAR.cdf),
    }[name]
    parameter = torch.nn.Parameter(torch.zeros(1))
    lam, batch = 0.5, 4
    optimizer = DPZero(
        [parameter], lr=1e-3, mechanism=mechanism, perturbation_scale=lam, seed=1,
        noise_generator=torch.Generator().manual_seed(2),
    )
    for _ in range(1500):
        optimizer.step(lambda: torch.zeros(batch))  # zero differences: the scalar is pure noise
    noise = np.array([s.scalar for s in optimizer.history]) * (2 * lam * batch)
    assert stats.kstest(noise, cdf).pvalue > 1e-3
    assert optimizer.ledger.entries == (LedgerEntry(mechanism, 1.0, 1500),)


def test_ledger_plan_and_verify_for_the_laplace_path(tmp_path, capsys):
    ledger = Ledger()
    optimizer = _train(_model(), Laplace(40.0, sensitivity=1.0), steps=6, sampling_rate=0.01, ledger=ledger)
    assert optimizer.ledger is ledger and ledger.steps == 6
    eps = ledger.epsilon(1e-6).upper
    path = tmp_path / "dpzo.toml"
    ledger.to_plan(path, delta=1e-6, budget_epsilon=eps * 1.01)
    assert cli_main(["verify", str(path)]) == 0
    capsys.readouterr()


def test_bitfit_with_dpzero_touches_only_biases():
    model = _model()
    fraction = freeze_all_but_bias(model)
    assert fraction == pytest.approx((16 + 1) / (5 * 16 + 16 + 16 + 1))
    before = {n: p.clone() for n, p in model.named_parameters()}
    fresh = copy.deepcopy(model)
    optimizer = _train(model, Gaussian(1.0))
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) != name.endswith("bias")
    replay(fresh, optimizer.history, lr=0.05, perturbation_scale=1e-2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    assert freeze_all_but_bias(model, keep=["2.weight"]) == pytest.approx((16 + 1 + 16) / 113)
    with pytest.raises(ValueError, match="does not have"):
        freeze_all_but_bias(model, keep=["nope"])
    with pytest.raises(ValueError, match="no bias"):
        freeze_all_but_bias(torch.nn.Linear(3, 3, bias=False))


def test_bad_input_is_refused_and_parameters_restored():
    parameter = torch.nn.Parameter(torch.ones(4))
    for mechanism in (Laplace(1.0, dimension=4, norm="l2"), LMO(dimension=2), PureDP(1.0)):
        with pytest.raises(ValueError):
            DPZero([parameter], lr=0.1, mechanism=mechanism)
    optimizer = DPZero([parameter], lr=0.1, mechanism=Gaussian(1.0), seed=0)
    with pytest.raises(ValueError, match="1-D tensor of per-example losses"):
        optimizer.step(lambda: parameter.sum())
    assert torch.allclose(parameter, torch.ones(4), atol=1e-6)
    with pytest.raises(ValueError, match="empty batch"):
        optimizer.step(lambda: torch.zeros(0))
    assert torch.allclose(parameter, torch.ones(4), atol=1e-6)
    assert optimizer.history == [] and optimizer.ledger.steps == 0
    with pytest.raises(ValueError, match="lr"):
        DPZero([parameter], lr=0.0, mechanism=Gaussian(1.0))
    with pytest.raises(ValueError, match="lr must be one number or one per step"):
        replay([parameter], [ZOStep(1, 0.5)], lr=[0.1, 0.2], perturbation_scale=0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_replay_is_bit_for_bit():
    model = _model().cuda()
    fresh = copy.deepcopy(model)
    optimizer = DPZero(model.parameters(), lr=0.05, mechanism=LMO_SCALAR, perturbation_scale=1e-2, seed=0)
    for x, y in _batches(5):
        x, y = x.cuda(), y.cuda()
        optimizer.step(lambda: (model(x) - y).pow(2).squeeze(1))
    replay(fresh, optimizer.history, lr=0.05, perturbation_scale=1e-2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
