"""DP-SGD noise step: clipping, allocation, adaptive thresholds, ledger, per-sample gradients."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dpforge.accounting import epsilon  # noqa: E402
from dpforge.mechanisms.allocation import allocate_noise, gradient_noise_multiplier  # noqa: E402
from dpforge.budget.ledger import Ledger, LedgerEntry  # noqa: E402
from dpforge.cli.main import main as cli_main  # noqa: E402
from dpforge.mechanisms import Composed, Gaussian  # noqa: E402
from dpforge.train.dpsgd import (  # noqa: E402
    AdaptiveClipping,
    DPSGDNoiseStep,
    clip_and_sum,
    opacus_per_sample_gradients,
    per_sample_gradients,
    resolve_groups,
)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _data(batch: int = 16, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 6, generator=generator), torch.randint(0, 3, (batch,), generator=generator)


def _random_grads(model, batch=12, scale=10.0, seed=3):
    generator = torch.Generator().manual_seed(seed)
    return {
        name: scale * torch.randn(batch, *p.shape, generator=generator, dtype=torch.float64)
        for name, p in model.named_parameters()
    }


def test_group_resolution():
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert resolve_groups(names, "flat") == [names]
    assert resolve_groups(names, "per_parameter") == [[n] for n in names]
    assert resolve_groups(names, "per_layer") == [["0.weight", "0.bias"], ["2.weight", "2.bias"]]
    explicit = [["0.weight", "2.weight"], ["0.bias", "2.bias"]]
    assert resolve_groups(names, explicit) == explicit
    with pytest.raises(ValueError, match="missing 2.bias"):
        resolve_groups(names, [["0.weight", "2.weight", "0.bias"]])
    with pytest.raises(ValueError, match="in groups\\[0\\] and groups\\[1\\]"):
        resolve_groups(names, [["0.weight", "0.bias"], ["0.weight", "2.weight", "2.bias"]])
    with pytest.raises(ValueError, match="not a trainable parameter"):
        resolve_groups(names, [names + ["nope"]])
    with pytest.raises(ValueError, match="groups must be one of"):
        resolve_groups(names, "per_block")


@pytest.mark.parametrize("grouping", ["flat", "per_layer", "per_parameter"])
def test_clipping_bounds_each_examples_contribution(grouping):
    model = _model()
    grads = _random_grads(model)
    groups = resolve_groups([n for n, _ in model.named_parameters()], grouping)
    thresholds = [0.5 + 0.25 * k for k in range(len(groups))]
    full = clip_and_sum(grads, groups, thresholds)
    batch = next(iter(grads.values())).shape[0]
    for j in range(batch):
        without = clip_and_sum({n: torch.cat([g[:j], g[j + 1 :]]) for n, g in grads.items()}, groups, thresholds)
        for k, group in enumerate(groups):
            shift = math.sqrt(sum(float((full.sums[n] - without.sums[n]).pow(2).sum()) for n in group))
            assert shift <= thresholds[k] * (1 + 1e-9)
            # these gradients are far above the thresholds: each example sits on the sphere
            assert shift == pytest.approx(thresholds[k], rel=1e-9)
    # small gradients pass through unchanged
    small = {n: 1e-4 * g for n, g in grads.items()}
    clipped = clip_and_sum(small, groups, thresholds)
    for name, grad in small.items():
        assert torch.allclose(clipped.sums[name], grad.sum(0))
    assert torch.equal(clipped.centred_counts, torch.full((len(groups),), batch / 2, dtype=torch.float64))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_non_positive_thresholds_are_refused(bad):
    model = _model()
    with pytest.raises(ValueError, match="thresholds"):
        DPSGDNoiseStep(model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=8, thresholds=bad)
    with pytest.raises(ValueError, match="thresholds"):
        DPSGDNoiseStep(
            model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=8, thresholds=[1.0, bad], groups="per_layer"
        )
    with pytest.raises(ValueError, match="thresholds"):
        clip_and_sum(_random_grads(model), [[n for n, _ in model.named_parameters()]], [bad])


@pytest.mark.parametrize("strategy", ["global", "equal_budget", "weighted"])
def test_allocation_is_applied_and_its_effective_mechanism_recorded(strategy):
    model = _model()
    thresholds = [1.0, 0.3]
    ledger = Ledger()
    step = DPSGDNoiseStep(
        model,
        noise_multiplier=1.3,
        sampling_rate=0.05,
        expected_batch_size=10.0,
        thresholds=thresholds,
        groups="per_layer",
        strategy=strategy,
        ledger=ledger,
        generator=torch.Generator().manual_seed(0),
    )
    sizes = [6 * 8 + 8, 8 * 3 + 3]
    expected = allocate_noise(1.3, thresholds, strategy, group_sizes=sizes if strategy == "weighted" else None)
    assert step.allocation == expected
    assert step.mechanism == expected.mechanism
    # noise on zero gradients: the per-group std is the allocated one (divided by B)
    samples = {0: [], 1: []}
    for _ in range(60):
        zero = {n: torch.zeros(4, *p.shape) for n, p in model.named_parameters()}
        noisy = step.privatize(zero)
        samples[0].append(torch.cat([noisy["0.weight"].flatten(), noisy["0.bias"]]))
        samples[1].append(torch.cat([noisy["2.weight"].flatten(), noisy["2.bias"]]))
    for k in (0, 1):
        empirical = float(torch.cat(samples[k]).std()) * 10.0
        assert empirical == pytest.approx(expected.noise_stds[k], rel=0.06)
    assert ledger.entries == (LedgerEntry(expected.mechanism, 0.05, 60),)


def test_effective_epsilon_equals_the_composed_group_releases():
    thresholds = [1.0, 0.5, 2.0]
    allocation = allocate_noise(2.0, thresholds, "equal_budget")
    # without subsampling group k is a Gaussian release of multiplier s_k / C_k
    direct = Composed([(Gaussian(s / c), 1) for s, c in zip(allocation.noise_stds, thresholds)])
    assert epsilon(allocation.mechanism, 1e-5).upper == pytest.approx(epsilon(direct, 1e-5).upper, rel=2e-3)


def test_adaptive_thresholds_track_the_quantile_and_keep_the_budget():
    model = _model()
    ledger = Ledger()
    adaptive = AdaptiveClipping(count_noise_std=4.0, target_quantile=0.5, learning_rate=0.3)
    step = DPSGDNoiseStep(
        model,
        noise_multiplier=1.0,
        sampling_rate=0.1,
        expected_batch_size=64,
        thresholds=[20.0, 20.0],
        groups="per_layer",
        adaptive=adaptive,
        ledger=ledger,
        generator=torch.Generator().manual_seed(1),
    )
    z = gradient_noise_multiplier(1.0, 4.0, 2)
    assert step.gradient_noise_multiplier == z
    assert step.allocation.noise_multiplier == pytest.approx(z, rel=1e-12)
    assert step.mechanism == Gaussian(1.0)
    generator = torch.Generator().manual_seed(2)
    for _ in range(40):
        grads = {n: torch.randn(64, *p.shape, generator=generator) for n, p in model.named_parameters()}
        step.privatize(grads)
        assert step.joint_noise_multiplier(step.applied_noise_stds()) >= 1.0
    # per-example norms of unit-normal gradients are about sqrt(d_k): 56 -> 7.5, 27 -> 5.2
    assert step.thresholds[0] == pytest.approx(math.sqrt(56), rel=0.25)
    assert step.thresholds[1] == pytest.approx(math.sqrt(27), rel=0.25)
    assert ledger.entries[0].mechanism == Gaussian(1.0) and ledger.steps == 40 and len(ledger) == 1
    with pytest.raises(ValueError, match="leaves no privacy budget"):
        DPSGDNoiseStep(
            model,
            noise_multiplier=1.0,
            sampling_rate=0.1,
            expected_batch_size=64,
            thresholds=1.0,
            groups="per_layer",
            adaptive=AdaptiveClipping(count_noise_std=0.6),
        )


def test_ledger_plan_verify_round_trip(tmp_path, capsys):
    model = _model()
    step = DPSGDNoiseStep(
        model,
        noise_multiplier=1.1,
        sampling_rate=0.02,
        expected_batch_size=8,
        thresholds=[1.0, 1.0],
        groups="per_layer",
        strategy="equal_budget",
        generator=torch.Generator().manual_seed(0),
    )
    x, y = _data(8)
    for _ in range(5):
        step.step(per_sample_gradients(model, torch.nn.functional.cross_entropy, x, y))
    assert all(p.grad is not None for p in model.parameters())
    eps = step.ledger.epsilon(1e-5).upper
    path = tmp_path / "plan.toml"
    step.ledger.to_plan(path, delta=1e-5, budget_epsilon=eps * 1.01)
    assert cli_main(["verify", str(path)]) == 0
    step.ledger.to_plan(path, delta=1e-5, budget_epsilon=eps * 0.9)
    assert cli_main(["verify", str(path)]) == 1
    capsys.readouterr()


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_per_sample_gradients_match_a_loop_and_opacus():
    model = _model()
    x, y = _data(5)
    grads = per_sample_gradients(model, torch.nn.functional.cross_entropy, x, y)
    for i in range(5):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for name, p in model.named_parameters():
            assert torch.allclose(grads[name][i], p.grad, atol=1e-6)
    opacus = pytest.importorskip("opacus")
    wrapped = opacus.GradSampleModule(_model(), loss_reduction="sum")
    torch.nn.functional.cross_entropy(wrapped(x), y, reduction="sum").backward()
    samples = opacus_per_sample_gradients(wrapped)
    for name in grads:
        assert torch.allclose(samples[name], grads[name], atol=1e-6)


def test_seeded_steps_reproduce_and_bad_input():
    model = _model()
    grads = _random_grads(model, batch=4)
    outputs = []
    for _ in range(2):
        step = DPSGDNoiseStep(
            model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=4, thresholds=1.0,
            generator=torch.Generator().manual_seed(9),
        )
        outputs.append(step.privatize(grads))
    assert all(torch.equal(outputs[0][n], outputs[1][n]) for n in outputs[0])
    step = DPSGDNoiseStep(model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=4, thresholds=1.0)
    with pytest.raises(ValueError, match="no per-sample gradient"):
        step.privatize({"0.weight": grads["0.weight"]})
    bad = dict(grads)
    bad["2.bias"] = bad["2.bias"][:2]
    with pytest.raises(ValueError, match="batch size"):
        step.privatize(bad)
    mixed = dict(grads)
    mixed["2.bias"] = mixed["2.bias"].float()
    with pytest.raises(ValueError, match="one device and dtype"):
        step.privatize(mixed)
    with pytest.raises(ValueError, match="strategy"):
        DPSGDNoiseStep(model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=4, thresholds=1.0, strategy="x")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_batch_clips_to_zero_sums(dtype):
    model = _model().to(dtype)
    empty = {name: torch.zeros(0, *p.shape, dtype=dtype) for name, p in model.named_parameters()}
    groups = resolve_groups(list(empty), "per_layer")
    clipped = clip_and_sum(empty, groups, [1.0, 2.0])
    for name, p in model.named_parameters():
        assert clipped.sums[name].shape == p.shape and clipped.sums[name].dtype == dtype
        assert clipped.sums[name].device == p.device and not clipped.sums[name].any()
    assert clipped.norms.shape == (0, 2) and clipped.centred_counts.tolist() == [0.0, 0.0]


def _zero_example_and_two_straddling(model):
    """One all-zero example (contributes 0 to the sums), and two examples whose norms are
    below and above the threshold 1 (centred count (1 - 1/2) + (0 - 1/2) = 0)."""
    zero = {n: torch.zeros(1, *p.shape, dtype=torch.float64) for n, p in model.named_parameters()}
    two = {n: torch.full((2, *p.shape), 0.0, dtype=torch.float64) for n, p in model.named_parameters()}
    two["0.bias"][0, 0], two["0.bias"][1, 0] = 0.5, 5.0
    return zero, two


def test_empty_batch_step_is_noise_only_and_recorded():
    model = _model().double()
    empty = {n: torch.zeros(0, *p.shape, dtype=torch.float64) for n, p in model.named_parameters()}
    zero, _ = _zero_example_and_two_straddling(model)
    released = []
    for grads in (empty, zero):
        ledger = Ledger()
        step = DPSGDNoiseStep(
            model, noise_multiplier=1.0, sampling_rate=0.01, expected_batch_size=8, thresholds=1.0,
            ledger=ledger, generator=torch.Generator().manual_seed(5),
        )
        released.append(step.privatize(grads))
        assert ledger.steps == 1 and ledger.entries[0].mechanism == step.mechanism
    for name, p in model.named_parameters():
        # the same noise as a step whose only example contributes 0, and not zero
        assert released[0][name].shape == p.shape and released[0][name].dtype == torch.float64
        assert torch.equal(released[0][name], released[1][name]) and released[0][name].any()


def test_empty_batch_adaptive_update_uses_the_noisy_zero_count():
    model = _model().double()
    empty = {n: torch.zeros(0, *p.shape, dtype=torch.float64) for n, p in model.named_parameters()}
    _, two = _zero_example_and_two_straddling(model)
    adaptive = AdaptiveClipping(count_noise_std=4.0, target_quantile=0.3, learning_rate=0.5)
    steps = []
    for grads in (empty, two):
        step = DPSGDNoiseStep(
            model, noise_multiplier=1.0, sampling_rate=0.01, expected_batch_size=8, thresholds=1.0,
            adaptive=adaptive, generator=torch.Generator().manual_seed(6),
        )
        step.privatize(grads)
        steps.append(step)
    # both centred counts are 0, and the count noise is drawn after the same number of gradient draws
    assert steps[0].last_counts == steps[1].last_counts and steps[0].last_counts[0] != 0.0
    count = steps[0].last_counts[0]
    assert steps[0].thresholds == [pytest.approx(math.exp(-0.5 * (count / 8 + 0.5 - 0.3)), rel=1e-12)]
    assert steps[0].ledger.steps == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_step_matches_the_allocation():
    model = _model().cuda()
    step = DPSGDNoiseStep(
        model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=4, thresholds=[1.0, 2.0],
        groups="per_layer", adaptive=AdaptiveClipping(2.0), generator=torch.Generator(device="cuda").manual_seed(0),
    )
    grads = {n: torch.randn(4, *p.shape, device="cuda") for n, p in model.named_parameters()}
    noisy = step.privatize(grads)
    assert all(t.device.type == "cuda" for t in noisy.values())
    assert step.ledger.steps == 1
