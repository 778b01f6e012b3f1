"""Opacus' DPOptimizer with dpforge Gaussian, Laplace and LMO noise, and its accountant."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from dpforge.accounting import epsilon  # noqa: E402
from dpforge.errors import ParameterError, UnsupportedError  # noqa: E402
from dpforge.mechanisms import LMO, Gaussian, Laplace  # noqa: E402
from dpforge.mechanisms.combinators import Composed, PoissonSampled  # noqa: E402
from dpforge.train.opacus_optimizer import MechanismAccountant, MechanismDPOptimizer, make_private  # noqa: E402

# all-zero inputs need no grad: Opacus' full backward hooks warn about it
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")

IN, OUT, N, BATCH = 40, 50, 64, 16  # d = 2000 weights


def zero_gradient_setup(mechanism, clip=1.0, seed=0):
    """A bias-free linear model on all-zero inputs: every gradient is 0, so the optimizer's
    gradient is exactly the noise divided by the expected batch size."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(IN, OUT, bias=False)
    data = torch.utils.data.TensorDataset(torch.zeros(N, IN), torch.zeros(N, OUT))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    generator = torch.Generator().manual_seed(seed)
    return make_private(model, optimizer, loader, mechanism=mechanism, max_grad_norm=clip, generator=generator)


def one_step(module, optimizer, loader):
    x, y = next(iter(loader))
    if len(x) == 0:
        x, y = torch.zeros(1, IN), torch.zeros(1, OUT)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(module(x), y).backward()
    optimizer.step()
    return module._module.weight.grad.flatten()


def test_laplace_noise_in_opacus_has_the_laplace_law_and_is_accounted_as_that_vector_release():
    d = IN * OUT
    mechanism = Laplace(scale=3.0, sensitivity=1.0, dimension=d, norm="l2")
    module, optimizer, loader, accountant = zero_gradient_setup(mechanism)
    grad = one_step(module, optimizer, loader) * BATCH  # the noise itself
    # Laplace(b): E|X| = b, std = b sqrt(2); a Gaussian would have E|X|/std = sqrt(2/pi)
    assert grad.abs().mean().item() == pytest.approx(3.0, rel=0.06)
    assert (grad.abs().mean() / grad.std()).item() == pytest.approx(1 / math.sqrt(2), rel=0.05)
    one_step(module, optimizer, loader)
    (entry,) = accountant.ledger().entries
    assert (entry.mechanism, entry.sampling_rate, entry.steps) == (mechanism, BATCH / N, 2)
    assert accountant.engine == "rdp" and len(accountant) == 2
    expected = epsilon(Composed([(PoissonSampled(mechanism, BATCH / N), 2)]), 1e-5, engine="rdp").upper
    assert accountant.get_epsilon(1e-5) == pytest.approx(expected)
    restored = MechanismAccountant(mechanism)
    restored.load_state_dict(accountant.state_dict())
    assert restored.ledger().entries == accountant.ledger().entries


def test_gaussian_matches_opacus_own_noise_scale_and_its_accountant():
    module, optimizer, loader, accountant = zero_gradient_setup(Gaussian(1.3))
    grad = one_step(module, optimizer, loader) * BATCH
    assert grad.std().item() == pytest.approx(1.3, rel=0.05)
    assert optimizer.noise_multiplier == 1.3
    for _ in range(9):
        one_step(module, optimizer, loader)
    ours = accountant.get_epsilon(1e-5)
    from opacus.accountants import PRVAccountant

    peer = PRVAccountant()
    peer.history = [(1.3, BATCH / N, 10)]
    assert ours == pytest.approx(peer.get_epsilon(1e-5), rel=0.02)


def test_lmo_vector_release_is_drawn_and_scalar_lmo_or_laplace_is_refused():
    d = IN * OUT
    module, optimizer, loader, _ = zero_gradient_setup(LMO(weights=(1.0, 0.0, 0.0), gamma_shape=4.0, gamma_scale=0.1, dimension=d))
    grad = one_step(module, optimizer, loader)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    with pytest.raises(UnsupportedError, match="scalar-calibrated"):
        zero_gradient_setup(LMO(weights=(1.0, 0.0, 0.0), gamma_shape=4.0, gamma_scale=0.1))
    with pytest.raises(UnsupportedError, match="scalar-calibrated"):
        zero_gradient_setup(Laplace(scale=1.0, norm="l2"))


def test_mechanism_must_match_the_clipping():
    d = IN * OUT
    with pytest.raises(UnsupportedError, match="norm"):
        zero_gradient_setup(Laplace(scale=1.0, dimension=d, norm="l1"))
    with pytest.raises(ParameterError, match="sensitivity"):
        zero_gradient_setup(Laplace(scale=1.0, sensitivity=2.0, dimension=d, norm="l2"), clip=1.0)
    with pytest.raises(ParameterError, match="mechanism"):
        MechanismDPOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1), mechanism="gauss", max_grad_norm=1.0, expected_batch_size=4)


def test_a_kept_fixed_size_loader_is_refused():
    """The accountant records Poisson steps; keeping the caller's (shuffled, fixed-size)
    loader would label a Poisson epsilon as the run's upper bound."""
    model = torch.nn.Linear(IN, OUT, bias=False)
    data = torch.utils.data.TensorDataset(torch.zeros(N, IN), torch.zeros(N, OUT))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(UnsupportedError, match="poisson_sampling"):
        make_private(model, optimizer, loader, mechanism=Gaussian(1.0), max_grad_norm=1.0, poisson_sampling=False)
