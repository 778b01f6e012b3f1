"""Torch noise samplers: laws (KS against the analytic CDFs), seeding, dtypes, refusals."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")

from dpforge.mechanisms import LMO, Gaussian, Laplace, PureDP  # noqa: E402
from dpforge.train.noise import add_noise_, noise_std, sample_noise  # noqa: E402


LMO_FULL = LMO(
    weights=(0.5, 0.3, 0.2),
    gamma_shape=3.0,
    gamma_scale=0.5,
    exponential_rate=2.0,
    uniform_low=0.5,
    uniform_high=2.0,
)
LMO_GAMMA_SMALL_SHAPE = LMO(weights=(1.0, 0.0, 0.0), gamma_shape=0.7, gamma_scale=2.0)
LMO_UNIFORM = LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.2, uniform_high=3.0)

CASES = {
    "gaussian": (Gaussian(1.3, sensitivity=2.0), stats.norm(scale=2.6).cdf),
    "laplace": (Laplace(0.7), stats.laplace(scale=0.7).cdf),
    "lmo": (LMO_FULL, LMO_FULL.cdf),
    "lmo-gamma-shape<1": (LMO_GAMMA_SMALL_SHAPE, LMO_GAMMA_SMALL_SHAPE.cdf),
    "lmo-uniform": (LMO_UNIFORM, LMO_UNIFORM.cdf),
}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case", list(CASES))
def test_kolmogorov_smirnov_against_the_analytic_cdf(case, dtype_name):
    mechanism, cdf = CASES[case]
    dtype = DTYPES[dtype_name]
    generator = torch.Generator().manual_seed(1234)
    draws = sample_noise(mechanism, 40_000, generator=generator, dtype=dtype)
    assert draws.dtype == dtype and draws.shape == (40_000,)
    values = draws.double().numpy()
    assert np.all(np.isfinite(values))
    result = stats.kstest(values, cdf)
    if dtype == torch.bfloat16:
        # 8-bit mantissa: rounding moves the empirical CDF by up to ~1e-3; a coarser check
        assert result.statistic < 0.015
    else:
        assert result.pvalue > 1e-3, result


def test_tails_in_float64_reach_beyond_the_float32_truncation():
    generator = torch.Generator().manual_seed(7)
    laplace = sample_noise(Laplace(1.0), 2_000_000, generator=generator, dtype=torch.float64)
    # Pr(|X| > 12) = e^-12 ~ 6e-6: about 12 draws expected
    tail = int((laplace.abs() > 12).sum())
    assert 3 <= tail <= 30
    assert float(laplace.abs().max()) < 53 * np.log(2)


def test_laplace_law_is_exactly_symmetric_and_never_infinite():
    generator = torch.Generator().manual_seed(0)
    draws = sample_noise(Laplace(1.0), 1_000_000, generator=generator)
    assert torch.isfinite(draws).all()
    assert float(draws.abs().max()) <= 24 * np.log(2) + 1e-4
    assert abs(float((draws > 0).double().mean()) - 0.5) < 3e-3


def test_seeds_reproduce_and_differ():
    for mechanism in (Gaussian(1.0), Laplace(1.0), LMO_FULL):
        a = sample_noise(mechanism, (3, 5), generator=torch.Generator().manual_seed(42))
        b = sample_noise(mechanism, (3, 5), generator=torch.Generator().manual_seed(42))
        c = sample_noise(mechanism, (3, 5), generator=torch.Generator().manual_seed(43))
        assert torch.equal(a, b)
        assert not torch.equal(a, c)


def test_noise_std_matches_the_mechanisms():
    assert noise_std(Gaussian(1.5, 2.0)) == pytest.approx(3.0)
    assert noise_std(Laplace(2.0)) == pytest.approx(2.0 * np.sqrt(2.0))
    assert noise_std(LMO_UNIFORM) == pytest.approx(LMO_UNIFORM.std())
    generator = torch.Generator().manual_seed(3)
    draws = sample_noise(LMO_UNIFORM, 400_000, generator=generator, dtype=torch.float64)
    assert float(draws.std()) == pytest.approx(LMO_UNIFORM.std(), rel=0.02)


def test_add_noise_in_place_on_a_list_with_the_law_of_the_mechanism():
    generator = torch.Generator().manual_seed(5)
    tensors = [torch.zeros(300, 100), torch.zeros(50_000)]
    out = add_noise_(tensors, Gaussian(0.5, 4.0), generator)
    assert out[0] is tensors[0] and out[1] is tensors[1]
    values = torch.cat([t.flatten() for t in tensors]).double().numpy()
    assert stats.kstest(values, stats.norm(scale=2.0).cdf).pvalue > 1e-3


def test_add_noise_on_leaf_parameters_and_bfloat16():
    parameter = torch.nn.Parameter(torch.zeros(1000))
    add_noise_([parameter], Gaussian(1.0), torch.Generator().manual_seed(0))
    assert parameter.abs().sum() > 0
    bf16 = torch.zeros(20_000, dtype=torch.bfloat16)
    add_noise_(bf16, Gaussian(1.0), torch.Generator().manual_seed(0))
    assert bf16.dtype == torch.bfloat16
    assert stats.kstest(bf16.double().numpy(), stats.norm.cdf).statistic < 0.015


def test_scalar_l2_laplace_and_lmo_are_refused_on_a_vector():
    vector = [torch.zeros(10)]
    for mechanism in (Laplace(1.0, norm="l2"), LMO_FULL):
        with pytest.raises(ValueError, match=r"scalar-calibrated .*\(docs/design.md §5\)"):
            add_noise_(vector, mechanism)
    # also split across tensors: the release is all their coordinates together
    with pytest.raises(ValueError, match="not the scalar mechanism"):
        add_noise_([torch.zeros(1), torch.zeros(1)], Laplace(1.0, norm="l2"))


def test_dimension_must_match_the_release():
    with pytest.raises(ValueError, match="dimension=4 .* added to 10"):
        add_noise_([torch.zeros(10)], Laplace(1.0, dimension=4, norm="l2"))
    with pytest.raises(ValueError, match="dimension=1 .* added to 10"):
        add_noise_([torch.zeros(10)], Laplace(1.0))  # scalar L1 Laplace: still the wrong release
    # matching descriptions are accepted: scalar on a scalar, vector on its dimension
    add_noise_([torch.zeros(())], LMO_FULL)
    add_noise_([torch.zeros(2, 5)], Laplace(1.0, dimension=10, norm="l2"))
    add_noise_([torch.zeros(2, 5)], Gaussian(1.0))


def test_mismatched_devices_dtypes_and_bad_input_are_refused():
    with pytest.raises(ValueError, match="different dtypes"):
        add_noise_([torch.zeros(3), torch.zeros(3, dtype=torch.float64)], Gaussian(1.0))
    with pytest.raises(ValueError, match="different devices"):
        add_noise_([torch.zeros(3), torch.zeros(3, device="meta")], Gaussian(1.0))
    with pytest.raises(ValueError, match="dtype must be one of"):
        add_noise_([torch.zeros(3, dtype=torch.float16)], Gaussian(1.0))
    with pytest.raises(ValueError, match="dtype must be one of"):
        sample_noise(Gaussian(1.0), 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="Gaussian, Laplace or LMO"):
        add_noise_([torch.zeros(3)], PureDP(1.0))
    with pytest.raises(ValueError, match="at least one tensor"):
        add_noise_([], Gaussian(1.0))
    with pytest.raises(ValueError, match="generator lives on"):
        sample_noise(Gaussian(1.0), 3, generator=torch.Generator(), device="meta")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case", ["gaussian", "laplace", "lmo"])
def test_cuda_samplers_follow_the_law_and_reproduce(case):
    mechanism, cdf = CASES[case]
    generator = torch.Generator(device="cuda").manual_seed(11)
    draws = sample_noise(mechanism, 200_000, generator=generator)
    assert draws.device.type == "cuda"
    assert stats.kstest(draws.double().cpu().numpy(), cdf).pvalue > 1e-3
    again = sample_noise(mechanism, 200_000, generator=torch.Generator(device="cuda").manual_seed(11))
    assert torch.equal(draws, again)
    tensors = [torch.zeros(1000, device="cuda"), torch.zeros(10, 10, device="cuda")]
    add_noise_(tensors, Gaussian(1.0), torch.Generator(device="cuda").manual_seed(0))
    with pytest.raises(ValueError, match="different devices"):
        add_noise_([torch.zeros(3, device="cuda"), torch.zeros(3)], Gaussian(1.0))
    with pytest.raises(ValueError, match="generator lives on"):
        add_noise_([torch.zeros(3, device="cuda")], Gaussian(1.0), torch.Generator())


# -- where the noise comes from (never the global seed by default) ---------------------------
from dpforge.train.noise import SecureRandom, fresh_generator, noise_provenance, resolve_generator  # noqa: E402


def test_default_noise_ignores_the_global_seed():
    torch.manual_seed(0)
    first = sample_noise(Gaussian(1.0), 8)
    torch.manual_seed(0)
    second = sample_noise(Gaussian(1.0), 8)
    assert not torch.equal(first, second)
    assert not torch.equal(fresh_generator().get_state(), fresh_generator().get_state())


def test_resolve_generator_provenance():
    generator, source = resolve_generator(seed=12)
    assert source == {"kind": "seeded", "seed": 12} and generator.initial_seed() == 12
    mine = torch.Generator().manual_seed(3)
    assert resolve_generator(mine) == (mine, {"kind": "seeded", "seed": 3})
    assert resolve_generator()[1] == {"kind": "os-entropy"}
    source, provenance = resolve_generator(secure=True)
    assert isinstance(source, SecureRandom) and provenance == {"kind": "secure"}
    assert noise_provenance(None) == {"kind": "os-entropy"} and noise_provenance(mine)["seed"] == 3
    with pytest.raises(ValueError, match="not both"):
        resolve_generator(mine, seed=1)
    with pytest.raises(ValueError, match="neither a generator nor a seed"):
        resolve_generator(seed=1, secure=True)
    with pytest.raises(ValueError, match="seed must be an integer"):
        resolve_generator(seed=-1)


def test_training_steps_record_their_noise_source():
    from dpforge.mechanisms import Laplace
    from dpforge.train.dpsgd import DPSGDNoiseStep
    from dpforge.train.dpzo import DPZero

    def noise_step(**options):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        step = DPSGDNoiseStep(model, noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=4.0, thresholds=1.0, **options)
        grads = {n: torch.zeros(4, *p.shape) for n, p in model.named_parameters()}
        return step, step.privatize(grads)

    (a, noisy_a), (b, noisy_b) = noise_step(), noise_step()
    assert not torch.equal(noisy_a["weight"], noisy_b["weight"])  # torch.manual_seed does not fix the noise
    assert a.ledger.noise_sources == {"dpsgd": {"kind": "os-entropy"}}
    (c, noisy_c), (d, noisy_d) = noise_step(seed=5), noise_step(seed=5)
    assert torch.equal(noisy_c["weight"], noisy_d["weight"])
    assert c.ledger.noise_sources == {"dpsgd": {"kind": "seeded", "seed": 5}}
    secure, _ = noise_step(secure=True)
    assert secure.ledger.to_dict()["noise_sources"] == {"dpsgd": {"kind": "secure"}}
    optimizer = DPZero(torch.nn.Linear(2, 1).parameters(), lr=0.1, mechanism=Laplace(1.0), noise_seed=9)
    assert optimizer.ledger.noise_sources == {"dpzero": {"kind": "seeded", "seed": 9}}


def test_seed_accepts_integer_types_and_secure_refuses_shared_seed():
    import numpy as np

    from dpforge.train.dpsgd import DPSGDNoiseStep

    assert resolve_generator(seed=np.int64(4))[1] == {"kind": "seeded", "seed": 4}
    with pytest.raises(ValueError, match="seed must be an integer"):
        resolve_generator(seed=1.5)
    with pytest.raises(ValueError, match="shared_seed"):
        DPSGDNoiseStep(torch.nn.Linear(2, 1), noise_multiplier=1.0, sampling_rate=0.1, expected_batch_size=4.0,
                       thresholds=1.0, secure=True, distributed="shared_seed")
