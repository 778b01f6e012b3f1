"""Monte-Carlo engine: exact samplers, high-probability bounds against the PRV engine,
importance sampling against plain sampling, reproducibility and bad input.

Every run uses a fixed seed, so each test is deterministic."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import pytest
from scipy import integrate, stats

import dpforge.accounting.montecarlo as mc
from dpforge.accounting import delta, epsilon
from dpforge.accounting.montecarlo import kernels
from dpforge.accounting.montecarlo.directions import _directions
from dpforge.accounting.montecarlo.registry import _PAIR_DRAWS
from dpforge.accounting.montecarlo.runner import _chunking, _progress_bar, _run_chunk
from dpforge.accounting.results import MonteCarloDeltaResult, MonteCarloEpsilonResult
from dpforge.errors import LimitError, ParameterError, UnsupportedError
from dpforge.mechanisms.base import Gaussian, Laplace, Mechanism, PureDP
from dpforge.mechanisms.combinators import Composed, PoissonSampled, flatten
from dpforge.mechanisms.pairs import LaplacePair, MonotonePair

WORDS = np.array([11, 12, 13, 14], dtype=np.uint64)


# --------------------------------------------------------------------------- samplers


def test_ziggurat_normals_are_standard_normal():
    x = kernels.normals(WORDS, 2_000_000)
    assert stats.kstest(x, "norm").pvalue > 1e-3
    assert abs(x.mean()) < 5 / math.sqrt(x.size)
    assert abs(x.var() - 1.0) < 5 * math.sqrt(2.0 / x.size)
    # the tail beyond the ziggurat base (sampled by its own rejection loop)
    tail = np.mean(np.abs(x) > kernels._ZIG_R)
    expected = 2 * stats.norm.sf(kernels._ZIG_R)
    assert abs(tail - expected) < 5 * math.sqrt(expected / x.size)


def _one_step(description, direction: str, lam: float, n: int = 200_000):
    """One-step losses drawn by the kernel at tilt ``lam`` and the direction object."""
    directions = {d.name: d for d in _directions(description, True)}
    d = directions[direction]
    losses = _run_chunk(d.batch(lam, None), WORDS, n, 256)
    return d, losses


TILT_CASES = [
    (PoissonSampled(Gaussian(1.0), 0.05), "remove", 0.0),
    (PoissonSampled(Gaussian(1.0), 0.05), "remove", 3.0),
    (PoissonSampled(Gaussian(0.7), 0.2), "add", 0.0),
    (PoissonSampled(Gaussian(0.7), 0.2), "add", 2.5),
    (Gaussian(1.3), "remove", 1.7),
    (PoissonSampled(Laplace(1.25), 0.1), "remove", 0.0),
    (PoissonSampled(Laplace(1.25), 0.1), "remove", 4.0),
    (PoissonSampled(Laplace(0.5), 0.3), "add", 0.0),
    (PoissonSampled(Laplace(0.5), 0.3), "add", 3.3),
    (Laplace(0.8), "remove", 2.2),
    (PoissonSampled(PureDP(1.0), 0.2), "remove", 1.5),
    (PoissonSampled(PureDP(1.0), 0.2), "add", 2.0),
]


@pytest.mark.parametrize("description, direction, lam", TILT_CASES)
def test_tilted_samplers_reweight_to_the_exact_law(description, direction, lam):
    """E_g[w] = 1 and E_g[w 1{L > t}] = Pr_P(L > t) with w = exp(log M - lam L): the
    (rejection) samplers draw exactly from p e^{lam L}/M and log M is right."""
    d, losses = _one_step(description, direction, lam)
    weights = np.exp(d.log_mgf(lam) - lam * losses)
    n = losses.size
    assert abs(weights.mean() - 1.0) < 5 * weights.std() / math.sqrt(n) + 1e-12
    loss = flatten(description)[0].privacy_loss_distribution(direction)
    for level in (0.1, 0.5, 0.9, 0.99):
        t = float(np.quantile(losses, level)) + 1e-9  # off the atoms, where rounding decides
        terms = weights * (losses > t)
        exact = float(loss.sf(t, "P"))
        assert abs(terms.mean() - exact) < 5 * terms.std() / math.sqrt(n) + 1e-12, (t, terms.mean(), exact)


def _quad(f, low, high, points=()):
    value, _ = integrate.quad(f, low, high, points=points or None, epsabs=0, epsrel=1e-11, limit=400)
    return value


@pytest.mark.parametrize("mu, q, k", [(1.0, 0.05, 3), (0.5, 0.3, 7), (2.0, 0.01, 1)])
def test_gaussian_remove_moment_closed_form(mu, q, k):
    sampler = mc.GaussianStepSampler(flatten(PoissonSampled(Gaussian(1.0 / mu), q))[0], "remove")
    direct = _quad(lambda x: stats.norm.pdf(x) * (1 - q + q * math.exp(mu * x - mu * mu / 2)) ** (k + 1), -40, 40 + k * mu)
    assert sampler.log_mgf(float(k)) == pytest.approx(math.log(direct), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("a, q, k", [(0.8, 0.1, 4), (2.0, 0.5, 2), (0.3, 0.016, 9)])
def test_laplace_remove_moment_closed_form(a, q, k):
    sampler = mc.LaplaceStepSampler(flatten(PoissonSampled(Laplace(1.0 / a), q))[0], "remove")

    def integrand(x):
        r = abs(x) - abs(x - a)
        return 0.5 * math.exp(-abs(x)) * (1 - q + q * math.exp(r)) ** (k + 1)

    direct = _quad(integrand, -60, 60, (0.0, a))
    assert sampler.log_mgf(float(k)) == pytest.approx(math.log(direct), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("lam", [0.5, 2.5, 12.0])
def test_add_direction_moments_by_quadrature(lam):
    mu, q, a = 1.2, 0.1, 0.9
    gauss = mc.GaussianStepSampler(flatten(PoissonSampled(Gaussian(1.0 / mu), q))[0], "add")
    direct = _quad(lambda x: stats.norm.pdf(x) * (1 - q + q * math.exp(mu * x - mu * mu / 2)) ** (-lam), -60, 60)
    assert gauss.log_mgf(lam) == pytest.approx(math.log(direct), rel=1e-8, abs=1e-10)
    lap = mc.LaplaceStepSampler(flatten(PoissonSampled(Laplace(1.0 / a), q))[0], "add")

    def integrand(x):
        r = abs(x) - abs(x - a)
        return 0.5 * math.exp(-abs(x)) * (1 - q + q * math.exp(r)) ** (-lam)

    assert lap.log_mgf(lam) == pytest.approx(math.log(_quad(integrand, -60, 60, (0.0, a))), rel=1e-8, abs=1e-10)


def test_composed_moment_bound_dominates_the_truth():
    """The moment (Chernoff) epsilon is an upper bound: never below the PRV lower bound."""
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.02), 200)])
    prv = epsilon(description, 1e-5)
    for d in _directions(description, True):
        eps_c, lam = d.chernoff_epsilon(1e-5)
        assert lam > 0
        assert eps_c >= prv.lower - 1e-9 or d.name == "add"
    assert max(d.chernoff_epsilon(1e-5)[0] for d in _directions(description, True)) >= prv.lower


# --------------------------------------------------------------------------- against the PRV engine

PRV_CASES = [
    (Composed([(PoissonSampled(Gaussian(1.5), 0.05), 100)]), 1e-5),
    (Composed([(PoissonSampled(Laplace(1.0), 0.05), 100)]), 1e-6),
    (Composed([(PoissonSampled(Gaussian(1.0), 0.02), 50), (PoissonSampled(PureDP(0.5), 0.1), 20), (Laplace(5.0), 3)]), 1e-5),
    (Gaussian(2.0), 1e-8),
    (Composed([(PureDP(0.7), 4)]), 1e-3),
]


@pytest.mark.parametrize("description, target", PRV_CASES)
def test_epsilon_upper_brackets_prv(description, target):
    prv = epsilon(description, target)
    result = epsilon(description, target, engine="montecarlo", samples=20_000, seed=5)
    assert isinstance(result, MonteCarloEpsilonResult)
    assert result.upper >= prv.lower
    assert result.upper <= 1.03 * prv.upper
    assert result.lower <= prv.upper
    assert result.lower <= result.estimate <= result.upper


@pytest.mark.parametrize("description, target", PRV_CASES[:3])
def test_delta_upper_brackets_prv(description, target):
    eps = 0.8 * epsilon(description, target).upper
    prv = delta(description, eps)
    result = delta(description, eps, engine="montecarlo", samples=20_000, seed=6)
    assert isinstance(result, MonteCarloDeltaResult)
    assert prv.lower <= result.upper <= 1.25 * prv.upper
    assert result.lower <= prv.upper
    assert result.lower <= result.estimate <= result.upper


def test_importance_and_plain_sampling_agree():
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.1), 20)])
    tilted = epsilon(description, 1e-2, engine="montecarlo", samples=30_000, seed=1)
    plain = epsilon(description, 1e-2, engine="montecarlo", samples=30_000, seed=1, importance_sampling=False)
    assert plain.accuracy["importance_sampling"]["remove"].startswith("none")
    assert max(tilted.lower, plain.lower) <= min(tilted.upper, plain.upper)
    d_tilted = delta(description, 1.0, engine="montecarlo", samples=30_000, seed=2)
    d_plain = delta(description, 1.0, engine="montecarlo", samples=30_000, seed=2, importance_sampling=False)
    assert max(d_tilted.lower, d_plain.lower) <= min(d_tilted.upper, d_plain.upper)
    # the tilt makes the interval narrower
    assert d_tilted.upper - d_tilted.lower < d_plain.upper - d_plain.lower


def test_small_delta_with_importance_sampling():
    description = Composed([(PoissonSampled(Gaussian(0.8), 0.05), 100)])
    prv = epsilon(description, 1e-8)
    result = epsilon(description, 1e-8, engine="montecarlo", samples=20_000, seed=3)
    assert prv.lower <= result.upper <= 1.02 * prv.upper


# --------------------------------------------------------------------------- reproducibility


SMALL = Composed([(PoissonSampled(Gaussian(1.0), 0.05), 50)])


def _key(result):
    return (result.lower, result.upper, result.estimate)


def test_reproducible_for_a_seed_and_independent_of_threads_and_executor():
    first = epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=3)
    assert _key(first) == _key(epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=3))
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=3)
    finally:
        numba.set_num_threads(threads)
    assert _key(single) == _key(first)
    with ThreadPoolExecutor(2) as pool:
        pooled = epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=3, executor=pool)
    assert _key(pooled) == _key(first)
    assert _key(epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=4)) != _key(first)


def test_random_seed_is_recorded():
    result = epsilon(SMALL, 1e-5, engine="montecarlo", samples=3_000)
    again = epsilon(SMALL, 1e-5, engine="montecarlo", samples=3_000, seed=result.accuracy["seed"])
    assert _key(again) == _key(result)


def test_chunking_does_not_depend_on_the_sample_count():
    assert _chunking(1000) == _chunking(1000)
    chunk, block = _chunking(1000)
    assert chunk * 1000 <= 2**24 + 1000 and chunk // block <= 1024


# --------------------------------------------------------------------------- results and labels


def test_result_is_labelled_as_high_probability():
    result = epsilon(SMALL, 1e-5, engine="montecarlo", samples=4_000, seed=1, confidence=0.95)
    data = result.to_dict()
    assert data["samples"] == 4_000 and data["confidence"] == 0.95 and data["bound"] == "high-probability"
    assert data["engine"] == "montecarlo"
    assert "Maurer" in data["accuracy"]["inequality"]
    assert "probability >= 0.95" in str(result)
    d = delta(SMALL, 1.0, engine="montecarlo", samples=4_000, seed=1)
    assert d.to_dict()["bound"] == "high-probability" and "probability" in str(d)


def test_progress_bar_only_on_request_or_terminal(capsys):
    progress = _progress_bar(10, True)
    assert progress.bar is not None
    progress.bar.start_t -= 10.0  # as if the run had passed the bar's 2 s delay
    progress.bar.last_print_t -= 10.0
    progress.update(5, stage="main (remove)")
    progress.close()
    assert "dpforge montecarlo" in capsys.readouterr().err
    quiet = _progress_bar(10, None)  # pytest's stderr is not a terminal
    assert quiet.bar is None
    quiet.update(5, stage="x")
    quiet.close()
    assert capsys.readouterr().err == ""
    epsilon(SMALL, 1e-5, engine="montecarlo", samples=3_000, seed=1, progress=False)
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------- plug-in pairs


@dataclass(frozen=True)
class _WrappedLaplacePair(MonotonePair):
    """A pair type the engine has no fast path for (delegates to LaplacePair)."""

    a: float

    @property
    def _inner(self) -> LaplacePair:
        return LaplacePair(self.a)

    @property
    def r_min(self):  # type: ignore[override]
        return -self.a

    @property
    def r_max(self):  # type: ignore[override]
        return self.a

    @property
    def atoms(self):
        return (-self.a, self.a)

    def log_likelihood_ratio(self, x):
        return self._inner.log_likelihood_ratio(x)

    def r_cdf(self, c, under, inclusive=True):
        return self._inner.r_cdf(c, under, inclusive)

    def r_sf(self, c, under, inclusive=False):
        return self._inner.r_sf(c, under, inclusive)


@dataclass(frozen=True)
class _WrappedLaplace(Mechanism):
    scale: float

    def dominating_pair(self):
        return _WrappedLaplacePair(1.0 / self.scale)


def _draw_wrapped(pair, under, size, rng):
    return rng.laplace(pair.a if under == "P" else 0.0, 1.0, size)


@pytest.fixture
def wrapped_registered():
    mc.register_pair_sampler(_WrappedLaplacePair, _draw_wrapped)
    yield
    _PAIR_DRAWS.pop(_WrappedLaplacePair, None)


def test_unregistered_pair_is_a_clear_error():
    description = Composed([(PoissonSampled(_WrappedLaplace(1.0), 0.2), 10)])
    with pytest.raises(ValueError, match="no sampler .*register_pair_sampler"):
        epsilon(description, 1e-2, engine="montecarlo", samples=1000, seed=1)
    with pytest.raises(ValueError, match="MonotonePair"):
        mc.register_pair_sampler(int, _draw_wrapped)


@pytest.mark.parametrize(
    "description, direction, lam",
    [
        (PoissonSampled(_WrappedLaplace(1.25), 0.1), "remove", 4.0),
        (PoissonSampled(_WrappedLaplace(0.5), 0.3), "add", 3.3),
        (_WrappedLaplace(0.8), "remove", 2.2),
    ],
)
def test_plugged_in_bounded_pair_tilts_by_rejection(wrapped_registered, description, direction, lam):
    """Generic rejection samplers draw the tilted law exactly; the quadrature moments match
    the Laplace closed forms."""
    d = {x.name: x for x in _directions(description, True)}[direction]
    sampler = d.samplers[0]
    assert isinstance(sampler, mc.NumpyStepSampler) and sampler.tilt != "none"
    component = flatten(description)[0]
    reference = mc.LaplaceStepSampler(flatten(PoissonSampled(Laplace(1 / sampler.pair.a), component.sampling_rate))[0]
                                      if component.sampling_rate < 1 else flatten(Laplace(1 / sampler.pair.a))[0], direction)
    assert sampler.log_mgf(lam) == pytest.approx(reference.log_mgf(lam), rel=1e-10, abs=1e-12)
    losses = sampler.draw(100_000, np.random.default_rng(4), lam)
    weights = np.exp(d.log_mgf(lam) - lam * losses)
    assert abs(weights.mean() - 1.0) < 5 * weights.std() / math.sqrt(losses.size)
    loss = component.privacy_loss_distribution(direction)
    t = float(np.median(losses)) + 1e-9
    terms = weights * (losses > t)
    assert abs(terms.mean() - float(loss.sf(t, "P"))) < 5 * terms.std() / math.sqrt(losses.size) + 1e-12


def test_plugged_in_pair_against_prv(wrapped_registered):
    description = Composed([(PoissonSampled(_WrappedLaplace(1.0), 0.05), 50)])
    reference = epsilon(Composed([(PoissonSampled(Laplace(1.0), 0.05), 50)]), 1e-5)
    result = epsilon(description, 1e-5, engine="montecarlo", samples=10_000, seed=1)
    assert result.accuracy["importance_sampling"]["remove"] == "exponential tilt"
    assert reference.lower <= result.upper <= 1.03 * reference.upper
    assert result.lower <= reference.upper
    plain = epsilon(description, 1e-2, engine="montecarlo", samples=20_000, seed=1, importance_sampling=False)
    assert plain.accuracy["importance_sampling"]["remove"].startswith("none")
    reference = epsilon(Composed([(PoissonSampled(Laplace(1.0), 0.05), 50)]), 1e-2)
    assert reference.lower <= plain.upper and plain.lower <= reference.upper


def test_lmo_is_registered_and_brackets_prv():
    lmo = pytest.importorskip("dpforge.mechanisms.lmo")
    description = Composed([(PoissonSampled(lmo.LMO(gamma_shape=3.0), 0.05), 100)])
    prv = epsilon(description, 1e-5)
    result = epsilon(description, 1e-5, engine="montecarlo", samples=10_000, seed=2)
    assert prv.lower <= result.upper <= 1.03 * prv.upper


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "options, message",
    [
        ({"samples": 0}, "samples must be an integer >= 1"),
        ({"samples": 2.5}, "samples must be an integer"),
        # unbounded, 1e23 samples ran until killed (9 GB of chunk jobs after 18 minutes)
        ({"samples": 10**23}, "samples must be an integer >= 1 and at most 10000000000"),
        ({"confidence": 1.0}, r"confidence must be in \(0, 1\)"),
        ({"confidence": 0.0}, r"confidence must be in \(0, 1\)"),
        ({"confidence": float("nan")}, "confidence must be a finite number"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"executor": 3}, "executor must be"),
        ({"relative_accurcy": 3}, "not an option of the montecarlo engine"),
    ],
)
def test_bad_options_are_one_line_value_errors(options, message):
    with pytest.raises(ValueError, match=message) as info:
        epsilon(SMALL, 1e-5, engine="montecarlo", **options)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=message):
        delta(SMALL, 1.0, engine="montecarlo", **options)


def test_delta_too_small_for_the_samples_says_how_many_are_needed():
    with pytest.raises(ValueError, match=r"samples=1000 .*would need about [0-9.e+]+ samples") as info:
        epsilon(SMALL, 1e-6, engine="montecarlo", samples=1000, importance_sampling=False)
    assert "delta=1e-06" in str(info.value)
    with pytest.raises(ValueError, match=r"would need about"):
        epsilon(SMALL, 1e-6, engine="montecarlo", samples=10)
    with pytest.raises(ValueError, match="delta must be in"):
        epsilon(SMALL, 0.0, engine="montecarlo")


def test_errors_are_typed():
    """Bad values are ParameterError, out-of-reach deltas LimitError, pairs without a
    sampler UnsupportedError (all ValueError subclasses)."""
    with pytest.raises(ParameterError):
        epsilon(SMALL, 1e-5, engine="montecarlo", samples=0)
    with pytest.raises(ParameterError):
        delta(SMALL, 1.0, engine="montecarlo", relative_accurcy=3)
    with pytest.raises(LimitError):
        epsilon(SMALL, 1e-6, engine="montecarlo", samples=1000, importance_sampling=False)
    with pytest.raises(UnsupportedError):
        epsilon(Composed([(PoissonSampled(_WrappedLaplace(1.0), 0.2), 10)]), 1e-2, engine="montecarlo", samples=1000, seed=1)


@pytest.mark.parametrize(
    "parameters, message",
    [
        # eta drawn as 0: infinite noise, a NaN loss, and a rejection loop that never ended
        ({"gamma_shape": 1e-300}, "drew an output of inf"),
        # a loss range of +-7e299 nats (a math domain error in the tilted normaliser):
        # past MAX_LOSS_RANGE it is not tilted, and plain draws cannot reach delta = 1e-5
        ({"gamma_shape": 1e300}, "plain sampling.*would need about"),
    ],
)
def test_extreme_lmo_is_a_limit_error(parameters, message):
    lmo = pytest.importorskip("dpforge.mechanisms.lmo")
    description = PoissonSampled(lmo.LMO(**parameters), 0.01)
    with pytest.raises(LimitError, match=message):
        epsilon(description, 1e-5, engine="montecarlo", samples=10_000, seed=1)


def test_tilted_normaliser_in_log_space_where_the_law_piles_at_the_end():
    """e^{j (r_min - r_max)} underflowed to 0 (a math domain error in log) for a law with
    no mass above r_min at large j; in log space it is j (r_min - r_max) itself."""
    from dpforge.accounting.montecarlo.generic import NumpyStepSampler

    log_value = NumpyStepSampler._log_terms(-2000.0, np.array([-1e4, -3000.0]), np.array([0.0, 1.0]))
    assert log_value == pytest.approx(-2000.0 + math.log1p(math.exp(-1000.0)), rel=1e-15)
    # max(a, b) + |a - b| with a = e^-2000, b = 1.5 e^-2000: 2 e^-2000
    assert NumpyStepSampler._log_upper([-2000.0, -2000.0 + math.log(1.5)]) == pytest.approx(-2000.0 + math.log(2.0), rel=1e-15)
    # a NaN from a plugged-in pair's r_sf is refused, not dropped (the sum would be short)
    with pytest.raises(LimitError, match="NaN"):
        NumpyStepSampler._log_terms(-1.0, np.array([-2.0, -3.0]), np.array([0.5, float("nan")]))
    with pytest.raises(LimitError, match="not a finite number"):
        NumpyStepSampler._log_upper([0.5, float("nan")])


# --------------------------------------------------------------------------- heavier checks


@pytest.mark.slow
def test_w1_within_one_percent_of_prv_upper():
    description = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)])
    prv = epsilon(description, 1e-5)
    result = epsilon(description, 1e-5, engine="montecarlo", samples=100_000, seed=11)
    assert prv.lower <= result.upper <= 1.01 * prv.upper


@pytest.mark.slow
def test_delta_1e8_dp_sgd_with_one_million_samples_or_fewer():
    description = Composed([(PoissonSampled(Gaussian(0.8), 0.01), 1000)])
    prv = epsilon(description, 1e-8)
    result = epsilon(description, 1e-8, engine="montecarlo", samples=200_000, seed=12)
    assert prv.lower <= result.upper <= 1.01 * prv.upper


@pytest.mark.slow
def test_process_pool_gives_the_same_result():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    reference = epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=8)
    # numba's OpenMP threading layer cannot be forked: worker processes are spawned
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        pooled = epsilon(SMALL, 1e-5, engine="montecarlo", samples=5_000, seed=8, executor=pool)
    assert _key(pooled) == _key(reference)


@pytest.mark.slow
def test_dp_zo_laplace_between_tight_prv_and_pure_dp_prv():
    scale, q, steps = 1.787, 0.016, 1000
    description = Composed([(PoissonSampled(Laplace(scale), q), steps)])
    tight = epsilon(description, 1e-5)
    pure_prv = epsilon(Composed([(PoissonSampled(PureDP(1.0 / scale), q), steps)]), 1e-5)
    result = epsilon(description, 1e-5, engine="montecarlo", samples=50_000, seed=13)
    assert tight.lower <= result.upper <= pure_prv.upper
    assert result.upper <= 1.01 * tight.upper
