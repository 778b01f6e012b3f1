"""Monte-Carlo accountant: high-probability bounds on delta(eps) and eps(delta).

Following Wang, Mahloujifar, Wu, Jia & Mittal (NeurIPS 2023), the privacy profile of the
composed dominating pair, delta(eps) = E_P[(1 - e^{eps - L})_+], is estimated from samples
of the composed privacy loss L (the sum of independent one-step losses of every
component; both add/remove directions, the maximum is reported).

**Importance sampling (exponential tilting).**  Samples are drawn from the tilted law
g_lam = p e^{lam L} / M(lam), M(lam) = E_P[e^{lam L}] = exp(K(lam)); tilting the composed
loss tilts every step independently, so each one-step law is tilted by the same lam.  The
weight p/g = exp(K - lam L) is a function of L, and every term of the estimator is
bounded:

    Y = exp(K - lam L) (1 - e^{eps - L})_+  <=  B(eps) = exp(K - lam eps) c(lam),
    c(lam) = lam^lam / (1 + lam)^(1 + lam)         (the maximum of e^{-lam u}(1 - e^{-u}), u >= 0).

B(eps) is also the classical moment (Chernoff) bound on delta(eps), a deterministic upper
bound that the reported bound never exceeds.  Exact tilted samplers:

* remove direction, Poisson rate q < 1 (Gaussian, Laplace): integer lam = k, where
  p^{k+1} q0^{-k} = q0 (1 - q + q e^r)^{k+1} expands binomially into a finite mixture of
  the laws q0 e^{j r} / c_j (j = 0..k+1): N(j mu, 1) for the Gaussian (the expansion of
  Mironov, Talwar & Zhang 2019), piecewise exponentials for the Laplace pair; M(k) in
  closed form;
* add direction, q < 1: any real lam; the tilted law q0 (1 - q + q e^r)^{-lam} is
  log-concave in r and is sampled exactly by rejection from the exponential envelope
  given by a tangent of the convex function log(1 - q + q e^r) (a shifted Gaussian, or a
  truncated exponential for the Laplace pair); M(lam) by adaptive quadrature, with the
  quadrature's error estimate added (conservative direction);
* no subsampling (the add law equals the remove law) and randomised response: any real
  lam, exact closed forms.

A pair plugged in with :func:`register_pair_sampler` (only draws of P0 and Q0; the LMO
pair is registered this way) gets the same tilts by rejection from its own draws when its
r is bounded (:class:`NumpyStepSampler`), and is sampled plainly (lam = 0, B = 1)
otherwise; :func:`register_step_sampler` plugs in a full :class:`StepSampler`.

**Confidence.**  For n independent terms Z = Y / B in [0, 1] with sample mean Z̄ and
unbiased sample variance V, the empirical Bernstein inequality of Maurer & Pontil (2009,
Theorem 4) gives, with probability at least 1 - b,

    E[Y] <= B (Z̄ + sqrt(2 V ln(2/b) / n) + 7 ln(2/b) / (3 (n - 1))),

and the same bound below (applied to 1 - Z) gives the lower confidence bound.  With two
neighbouring directions each uses b = beta / 2 (union bound; beta = 1 - confidence).

**eps at delta.**  A pilot run (independent seeds, not part of the certificate) fixes the
tilt and a grid of eps values; the main run evaluates the upper bound U(eps_g) at every
grid point from the same samples and reports the smallest grid point whose *monotone
envelope* max_{g' >= g} U(eps_g') is <= delta.  No multiplicity correction is needed:
if the reported point were below the true eps*(delta), the envelope would be <= delta at
the fixed grid point just below eps*, where delta(eps) > delta, i.e. the single
(fixed-point) inequality would fail there, which has probability at most b.  The lower
bound is symmetric: the largest grid point whose running minimum of the lower bounds,
taken upwards from a start fixed by the pilot, exceeds delta.  The upper and the lower bound each hold with probability >= confidence
(separately, not jointly); the estimate is the crossing of the point estimate and is not
a bound.

Samples are drawn by numba kernels (``montecarlo_kernels``) in chunks with their own
seeds (derived from ``seed``, the stage, the direction and the chunk index), so results
are reproducible and independent of thread counts and of the optional ``executor``
(any :class:`concurrent.futures.Executor`, e.g. a Dask client's ``get_executor()``; a
``ProcessPoolExecutor`` must use the "spawn" or "forkserver" start method, because
numba's OpenMP threads cannot be forked); memory does not grow with the number of samples.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from scipy import integrate, optimize, special

from dpforge.accounting.montecarlo import kernels
from dpforge.accounting.results import MonteCarloDeltaResult, MonteCarloEpsilonResult
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.mechanisms.pairs import Direction, GaussianPair, LaplacePair, MonotonePair, RandomizedResponsePair
from dpforge.validation import require_count, require_non_negative, require_probability_open

DEFAULT_SAMPLES = 100_000
DEFAULT_CONFIDENCE = 0.99
INEQUALITY = "empirical Bernstein (Maurer & Pontil 2009, Theorem 4) on terms in [0, B]"

#: added to log M of every step: floating-point allowance (conservative direction)
_LOG_MGF_ALLOWANCE = 1e-13
#: quadrature tolerance for the add-direction normalisers
_QUAD_RTOL = 1e-12
_MAX_INTEGER_TILT = 100_000
_MAX_REAL_TILT = 10_000.0
_PILOT_CANDIDATES = 601
#: composite Gauss-Legendre rule for the moments of plugged-in pairs (panels x order nodes)
_GL_PANELS = 64
_GL_ORDER = 24
#: expected proposals per step above which a rejection-sampled tilt is not used
_MAX_PROPOSALS = 64.0
#: chunks in flight at once on an executor (memory stays flat)
_WINDOW = 64
_OPTIONS = ("samples", "confidence", "seed", "executor", "progress", "importance_sampling")


# =========================================================================== helpers


def _ell(r: np.ndarray | float, q: float) -> np.ndarray:
    """log(1 - q + q e^r) (the remove-direction loss as a function of r)."""
    r = np.asarray(r, dtype=float)
    if q >= 1.0:
        return r
    return np.logaddexp(math.log1p(-q), math.log(q) + r)


def _slope(r: float, q: float) -> float:
    """d/dr log(1 - q + q e^r) = q e^r / (1 - q + q e^r)."""
    if q >= 1.0:
        return 1.0
    return float(special.expit(r + math.log(q) - math.log1p(-q)))


def log_c(lam: float) -> float:
    """log of max_{u >= 0} e^{-lam u} (1 - e^{-u}) = lam^lam / (1 + lam)^(1 + lam)."""
    return float(special.xlogy(lam, lam) - special.xlogy(1.0 + lam, 1.0 + lam))


def _logsumexp(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(special.logsumexp(values)) if values.size else -math.inf


def _binomial_terms(lam: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """(j, log pi_j) with pi_j = C(k+1, j) (1-q)^{k+1-j} q^j, k = lam: the expansion of
    (1 - q + q u)^{k+1}.  For q = 1 the single term j = 1 + lam (any real lam)."""
    if q >= 1.0:
        return np.array([1.0 + lam]), np.array([0.0])
    k = int(round(lam))
    j = np.arange(k + 2, dtype=float)
    log_pi = (
        special.gammaln(k + 2.0)
        - special.gammaln(j + 1.0)
        - special.gammaln(k + 2.0 - j)
        + (k + 1.0 - j) * math.log1p(-q)
        + j * math.log(q)
    )
    return j, log_pi


def _log_abs_expm1(x: np.ndarray) -> np.ndarray:
    """log|e^x - 1| for x != 0, stable for large |x|."""
    x = np.asarray(x, dtype=float)
    big = x > 1.0
    safe = np.where(big, 1.0, x)
    return np.where(big, x + np.log1p(-np.exp(-np.where(big, x, 1.0))), np.log(np.abs(np.expm1(safe))))


def _quad_log(log_f: Callable[[float], float], low: float, high: float, points: Sequence[float]) -> float:
    """log of the integral of exp(log_f) over [low, high] (log_f <= ~0 near its maximum),
    plus the quadrature's own error estimate (so it errs upwards)."""
    inner = sorted({p for p in points if low < p < high})
    with warnings.catch_warnings():
        # a tolerance that cannot be met is reported through the error estimate, added below
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, error = integrate.quad(
            lambda x: math.exp(log_f(x)), low, high, points=inner or None, epsabs=0.0, epsrel=_QUAD_RTOL, limit=500
        )
    return math.log(value + abs(error)) if value + abs(error) > 0 else -math.inf


# =========================================================================== step samplers


@dataclass(frozen=True)
class StepTable:
    """The law of one step's loss as the numba kernel draws it: a categorical over
    outcomes (codes of :mod:`montecarlo_kernels`) with their parameters."""

    probabilities: np.ndarray
    kinds: np.ndarray
    params: np.ndarray
    sign: float
    lam: float = 0.0


def _table(entries: list[tuple[float, int, Sequence[float]]], sign: float, lam: float = 0.0) -> StepTable:
    """Table from (log mass, kind, params) entries; masses are normalised, tiny ones dropped,
    the most likely outcomes come first (shorter linear search in the kernel)."""
    log_masses = np.array([e[0] for e in entries])
    probabilities = np.exp(log_masses - _logsumexp(log_masses))
    order = [i for i in np.argsort(-probabilities, kind="stable") if probabilities[i] > 1e-300]
    params = np.zeros((len(order), kernels.N_PAR))
    for row, i in enumerate(order):
        params[row, : len(entries[i][2])] = entries[i][2]
    return StepTable(
        probabilities=probabilities[order] / probabilities[order].sum(),
        kinds=np.array([entries[i][1] for i in order], dtype=np.int64),
        params=params,
        sign=sign,
        lam=lam,
    )


class StepSampler:
    """One component's one-step privacy loss in one direction: the plug-in interface.

    A sampler says which tilts it supports (``tilt``: "integer", "real" or "none"), gives
    log M(lam) = log E_P[e^{lam L}] for those tilts (exactly, or an upper bound: an upper
    bound only makes the estimate conservative), and either a :class:`StepTable` for the
    numba kernel (``table``) or a NumPy ``draw`` of plain (lam = 0) one-step losses.
    """

    tilt = "none"

    def __init__(self, component: Component, direction: Direction) -> None:
        self.component = component
        self.direction = direction
        self.count = int(component.count)
        self.q = float(component.sampling_rate)
        self.pair = component.mechanism.dominating_pair()
        self.loss = component.privacy_loss_distribution(direction)

    @property
    def max_loss(self) -> float:
        """Supremum of the one-step loss under P (may be infinite)."""
        return float(self.loss.support[1])

    def log_mgf(self, lam: float) -> float:
        """log M(lam) = log E_P[e^{lam L}] of one step (an upper bound suffices); the base
        class supports only lam = 0 (returns 0) and raises ValueError otherwise."""
        if lam == 0:
            return 0.0
        raise ValueError(f"{type(self).__name__} does not support tilting")

    def table(self, lam: float) -> StepTable | None:
        """The :class:`StepTable` of the lam-tilted one-step law for the numba kernel, or
        None when the sampler only offers a NumPy :meth:`draw`."""
        return None

    def draw(self, size: int, rng: np.random.Generator, lam: float = 0.0) -> np.ndarray:  # pragma: no cover
        """``size`` independent one-step losses L drawn from the lam-tilted law
        p e^{lam L} / M(lam) (the plain law under P for lam = 0)."""
        raise NotImplementedError


class NumpyStepSampler(StepSampler):
    """A pair that only provides outputs x of P0 and Q0 (see :func:`register_pair_sampler`);
    the loss is computed from the pair's own ``log_likelihood_ratio``.

    Pairs with a bounded r (r_min <= r <= r_max, e.g. LMO) also get importance sampling,
    exact by rejection from those draws: the remove-direction tilt is the mixture of the laws
    T_j = q0 e^{j r} / c_j = p0 e^{(j-1) r} / c_j, drawn from P0 and accepted with
    probability e^{(j-1)(r - r_max)}; the add-direction tilt q0 (1 - q + q e^r)^{-lam} is
    drawn from Q0 and accepted with probability ((1 - q + q e^{r_min}) / (1 - q + q e^r))^lam.
    The normalisers c_j and M come from the pair's ``r_sf``/``r_cdf`` by composite
    Gauss-Legendre quadrature (nodes clustered at both ends of [r_min, r_max]) at two
    resolutions, taking the larger value plus their difference: an over-estimate only
    makes the estimate conservative.  Tilts needing more than ``_MAX_PROPOSALS`` expected
    proposals per step are priced out of the tilt search.
    """

    def __init__(self, component: Component, direction: Direction, draw_base: Callable) -> None:
        super().__init__(component, direction)
        self.draw_base = draw_base
        self.r_min, self.r_max = float(self.pair.r_min), float(self.pair.r_max)
        self.mode = "remove" if (direction == "remove" or component.symmetric) else "add"
        self.mode_loss = component.privacy_loss_distribution(self.mode)
        if math.isfinite(self.r_min) and math.isfinite(self.r_max) and self.r_max > self.r_min:
            self.tilt = "integer" if (self.mode == "remove" and self.q < 1.0) else "real"
        self._rules: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None
        self._cache: dict[float, tuple[float, np.ndarray, np.ndarray, float]] = {}

    # -- quadrature on the law of r under Q0 ------------------------------------------
    def _quadrature(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """(t, weights, Pr_Q0(r > t), Pr_Q0(r <= t)) for two resolutions."""
        if self._rules is None:
            nodes, weights = np.polynomial.legendre.leggauss(_GL_ORDER)
            rules = []
            for panels in (_GL_PANELS, 2 * _GL_PANELS):
                edges = np.linspace(0.0, 1.0, panels + 1)
                half = 0.5 * (edges[1:] - edges[:-1])
                u = ((edges[:-1] + half)[:, None] + half[:, None] * nodes[None, :]).ravel()
                w = (half[:, None] * weights[None, :]).ravel()
                width = self.r_max - self.r_min
                t = self.r_min + width * 0.5 * (1.0 - np.cos(np.pi * u))
                w = w * width * 0.5 * np.pi * np.sin(np.pi * u)
                rules.append((t, w, np.asarray(self.pair.r_sf(t, "Q"), float), np.asarray(self.pair.r_cdf(t, "Q"), float)))
            self._rules = rules
        return self._rules

    @staticmethod
    def _upper(values: list[float]) -> float:
        return max(values) + abs(values[0] - values[1])

    def _log_c(self, j: float) -> float:
        """log E_Q0[e^{j r}] (an over-estimate): e^{j r_min} + int j e^{j t} Pr(r > t) dt."""
        if j == 0:
            return 0.0
        scale = j * self.r_max
        values = [
            math.exp(j * (self.r_min - self.r_max)) + float(np.sum(w * j * np.exp(j * (t - self.r_max)) * sf))
            for t, w, sf, _ in self._quadrature()
        ]
        return scale + math.log(self._upper(values))

    def _build(self, lam: float) -> tuple[float, np.ndarray, np.ndarray, float]:
        """(log M, mixture j values, their probabilities, expected proposals per step)."""
        if lam not in self._cache:
            if self.mode == "remove":
                js, log_pi = _binomial_terms(lam, self.q)
                log_c = np.array([self._log_c(float(j)) for j in js])
                terms = log_pi + log_c
                log_m = _logsumexp(terms)
                probabilities = np.exp(terms - log_m)
                acceptance = np.exp(np.where(js > 0, log_c - (js - 1.0) * self.r_max, 0.0))
                proposals = float(np.sum(probabilities / np.maximum(acceptance, 1e-300)))
            else:
                q = self.q
                top = float(_ell(self.r_min, q))
                values = []
                for t, w, _, cdf in self._quadrature():
                    ell_t = _ell(t, q)
                    slope = q * np.exp(t - ell_t)
                    values.append(
                        math.exp(-lam * (float(_ell(self.r_max, q)) - top))
                        + float(np.sum(w * lam * slope * np.exp(-lam * (ell_t - top)) * cdf))
                    )
                log_m = -lam * top + math.log(self._upper(values))
                js, probabilities = np.array([0.0]), np.array([1.0])
                proposals = float(math.exp(-lam * top - log_m))
            self._cache[lam] = (log_m, js, probabilities, proposals)
        return self._cache[lam]

    def log_mgf(self, lam: float) -> float:
        """Upper bound on log E_P[e^{lam L}] from the quadrature normalisers (0 at lam = 0);
        tilts needing more than ``_MAX_PROPOSALS`` proposals per step get +1e6, pricing
        them out; ValueError for lam != 0 when r is unbounded."""
        if lam == 0:
            return 0.0
        if self.tilt == "none":
            raise ValueError(f"{type(self.pair).__name__} has an unbounded privacy loss: no tilt")
        log_m, _, _, proposals = self._build(float(lam))
        # a tilt that would need too many proposals is priced out (a larger value is still an upper bound)
        return log_m if proposals <= _MAX_PROPOSALS else log_m + 1e6

    # -- draws ------------------------------------------------------------------------
    def _r(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(self.pair.log_likelihood_ratio(x), dtype=float), self.r_min, self.r_max)

    def _base(self, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(self.draw_base(self.pair, under, size, rng), dtype=float)

    def draw(self, size: int, rng: np.random.Generator, lam: float = 0.0) -> np.ndarray:
        """``size`` one-step losses: plain draws under P for lam = 0, otherwise exact draws
        of the lam-tilted law by rejection from the pair's P0/Q0 draws (class docstring)."""
        if lam == 0:
            if self.direction == "remove" and self.q < 1.0:
                chosen = rng.random(size) < self.q
                x = np.where(chosen, self._base("P", size, rng), self._base("Q", size, rng))
            elif self.direction == "remove":
                x = self._base("P", size, rng)
            else:
                x = self._base("Q", size, rng)
            return np.asarray(self.loss.privacy_loss(x), dtype=float)
        _, js, probabilities, _ = self._build(float(lam))
        r = np.empty(size)
        if self.mode == "remove":
            j = js[rng.choice(len(js), size=size, p=probabilities)] if len(js) > 1 else np.full(size, js[0])
            plain = j == 0
            if plain.any():
                r[plain] = self._r(self._base("Q", int(plain.sum()), rng))
            pending = np.nonzero(~plain)[0]
            while pending.size:
                candidate = self._r(self._base("P", pending.size, rng))
                with np.errstate(divide="ignore"):
                    accept = np.log(rng.random(pending.size)) <= (j[pending] - 1.0) * (candidate - self.r_max)
                r[pending[accept]] = candidate[accept]
                pending = pending[~accept]
        else:
            top = float(_ell(self.r_min, self.q))
            pending = np.arange(size)
            while pending.size:
                candidate = self._r(self._base("Q", pending.size, rng))
                with np.errstate(divide="ignore"):
                    accept = np.log(rng.random(pending.size)) <= -lam * (_ell(candidate, self.q) - top)
                r[pending[accept]] = candidate[accept]
                pending = pending[~accept]
        return np.asarray(self.mode_loss.loss_of_r(r), dtype=float)


class _FastSampler(StepSampler):
    """Shared set-up of the built-in samplers: the sampling mode and the tilt domain."""

    def __init__(self, component: Component, direction: Direction) -> None:
        super().__init__(component, direction)
        # without subsampling a symmetric pair's add law is its remove law
        self.mode = "remove" if (direction == "remove" or component.symmetric) else "add"
        self.sign = 1.0 if self.mode == "remove" else -1.0
        self.tilt = "integer" if (self.mode == "remove" and self.q < 1.0) else "real"
        self._cache: dict[float, tuple[float, StepTable]] = {}

    @property
    def max_loss(self) -> float:
        lo, hi = self.loss.support
        if self.mode == "remove" and self.direction == "add":
            return float(self.component.privacy_loss_distribution("remove").support[1])
        return float(hi)

    def _build(self, lam: float) -> tuple[float, StepTable]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _get(self, lam: float) -> tuple[float, StepTable]:
        lam = float(lam)
        if self.tilt == "integer" and lam != round(lam):
            raise ValueError(f"the {self.mode}-direction tilt of a subsampled pair must be an integer, got {lam}")
        if lam not in self._cache:
            self._cache[lam] = self._build(lam)
        return self._cache[lam]

    def log_mgf(self, lam: float) -> float:
        return self._get(lam)[0]

    def table(self, lam: float) -> StepTable:
        return self._get(lam)[1]


class GaussianStepSampler(_FastSampler):
    """Subsampled Gaussian pair N(mu, 1) vs N(0, 1)."""

    def _build(self, lam: float) -> tuple[float, StepTable]:
        mu, q = float(self.pair.mu), self.q
        if self.mode == "remove":
            j, log_pi = _binomial_terms(lam, q)
            log_terms = log_pi + 0.5 * j * (j - 1.0) * mu * mu
            entries = [(t, kernels.GAUSS, (mu, (jj - 0.5) * mu * mu)) for t, jj in zip(log_terms, j)]
            return _logsumexp(log_terms), _table(entries, 1.0)
        if lam == 0:
            return 0.0, _table([(0.0, kernels.GAUSS, (mu, -0.5 * mu * mu))], -1.0)
        # add: target phi(x) exp(-lam ell(mu x - mu^2/2)), log-concave
        half = 0.5 * mu * mu

        def log_target(x: float) -> float:
            return -0.5 * x * x - lam * float(_ell(mu * x - half, q))

        # mode: x = -lam mu s(r(x)), s in (0, 1)
        x0 = optimize.brentq(lambda x: x + lam * mu * _slope(mu * x - half, q), -lam * mu - 1.0, 1.0, xtol=1e-12)
        peak = log_target(x0)
        transition = (math.log1p(-q) - math.log(q) + half) / mu
        log_integral = _quad_log(lambda x: log_target(x) - peak, x0 - 40.0, x0 + 40.0, (x0, transition))
        log_m = peak + log_integral - 0.5 * math.log(2.0 * math.pi)

        def log_envelope(r0: float) -> float:
            s0 = _slope(r0, q)
            return -lam * float(_ell(r0, q)) + lam * s0 * (r0 + half) + 0.5 * (lam * s0 * mu) ** 2

        r_mode = mu * x0 - half
        r0 = optimize.minimize_scalar(log_envelope, bounds=(r_mode - 10.0, r_mode + 10.0), method="bounded").x
        s0 = _slope(r0, q)
        params = (mu, -half, -lam * s0 * mu, r0, float(_ell(r0, q)), s0)
        return log_m, _table([(0.0, kernels.GAUSS_REJ, params)], -1.0, lam)


class LaplaceStepSampler(_FastSampler):
    """Subsampled Laplace pair Lap(a, 1) vs Lap(0, 1): r = -a (x <= 0), 2x - a, a (x >= a)."""

    @staticmethod
    def _lapmid(s: float, a: float) -> tuple[float, float, float]:
        aux = math.exp(-s * a) if s > 0 else math.expm1(s * a)
        return (s, a, aux)

    def _build(self, lam: float) -> tuple[float, StepTable]:
        a, q = float(self.pair.a), self.q
        low, high = float(_ell(-a, q)), float(_ell(a, q))
        log_half = math.log(0.5)
        if self.mode == "remove":
            # q0 e^{j r}: atom at -a with mass e^{-j a}/2, atom at +a with e^{(j-1) a}/2,
            # and on [0, a] the density e^{-j a} e^{(2j - 1) x}/2
            j, log_pi = _binomial_terms(lam, q)
            s = 2.0 * j - 1.0
            entries = [
                (_logsumexp(log_pi + log_half - j * a), kernels.ATOM, (low,)),
                (_logsumexp(log_pi + log_half + (j - 1.0) * a), kernels.ATOM, (high,)),
            ]
            mids = log_pi + log_half - j * a + _log_abs_expm1(s * a) - np.log(np.abs(s))
            entries += [(m, kernels.LAPMID, self._lapmid(ss, a)) for m, ss in zip(mids, s)]
            return _logsumexp([e[0] for e in entries]), _table(entries, 1.0)
        # add: P = Q0, L = -ell(r)
        if lam == 0:
            entries = [
                (log_half, kernels.ATOM, (-low,)),
                (log_half - a, kernels.ATOM, (-high,)),
                (log_half + math.log(-math.expm1(-a)), kernels.LAPMID, self._lapmid(-1.0, a)),
            ]
            return 0.0, _table(entries, -1.0)

        def log_mid(x: float) -> float:
            return -x - lam * (float(_ell(2.0 * x - a, q)) - low)

        log_middle = log_half - lam * low + _quad_log(log_mid, 0.0, a, ())

        def log_envelope(r0: float) -> float:
            s0 = _slope(r0, q)
            rate = 1.0 + 2.0 * lam * s0
            return -lam * float(_ell(r0, q)) + lam * s0 * (a + r0) + math.log(-math.expm1(-rate * a) / rate)

        r0 = optimize.minimize_scalar(log_envelope, bounds=(-a, a), method="bounded").x
        s0 = _slope(r0, q)
        rate = 1.0 + 2.0 * lam * s0
        entries = [
            (log_half - lam * low, kernels.ATOM, (-low,)),
            (log_half - a - lam * high, kernels.ATOM, (-high,)),
            (log_middle, kernels.LAPMID_REJ, (*self._lapmid(-rate, a), r0, float(_ell(r0, q)), s0)),
        ]
        return _logsumexp([e[0] for e in entries]), _table(entries, -1.0, lam)


class RandomizedResponseStepSampler(_FastSampler):
    """Randomised response (the pure-DP pair): two atoms, any real tilt, exact."""

    def __init__(self, component: Component, direction: Direction) -> None:
        super().__init__(component, direction)
        self.tilt = "real"

    def _build(self, lam: float) -> tuple[float, StepTable]:
        eps, q = float(self.pair.epsilon), self.q
        log_p_plus_q0 = float(special.log_expit(-eps))  # Q0(r = +eps)
        log_p_minus_q0 = float(special.log_expit(eps))
        if self.mode == "remove":
            if q >= 1.0:
                log_plus, log_minus = float(special.log_expit(eps)), float(special.log_expit(-eps))
            else:
                log_plus = float(np.logaddexp(math.log1p(-q) + log_p_plus_q0, math.log(q) + special.log_expit(eps)))
                log_minus = float(np.logaddexp(math.log1p(-q) + log_p_minus_q0, math.log(q) + special.log_expit(-eps)))
        else:
            log_plus, log_minus = log_p_plus_q0, log_p_minus_q0
        loss_plus = self.sign * float(_ell(eps, q))
        loss_minus = self.sign * float(_ell(-eps, q))
        entries = [
            (log_plus + lam * loss_plus, kernels.ATOM, (loss_plus,)),
            (log_minus + lam * loss_minus, kernels.ATOM, (loss_minus,)),
        ]
        return _logsumexp([e[0] for e in entries]), _table(entries, self.sign, lam)

    @property
    def max_loss(self) -> float:
        """Largest one-step loss in the sampled mode: the larger of +-log(1 - q + q e^{+-eps})."""
        eps, q = float(self.pair.epsilon), self.q
        return max(self.sign * float(_ell(eps, q)), self.sign * float(_ell(-eps, q)))


_STEP_SAMPLERS: dict[type, Callable[[Component, Direction], StepSampler]] = {
    GaussianPair: GaussianStepSampler,
    LaplacePair: LaplaceStepSampler,
    RandomizedResponsePair: RandomizedResponseStepSampler,
}
_PAIR_DRAWS: dict[type, Callable] = {}


def register_pair_sampler(pair_type: type, draw: Callable) -> None:
    """Let the Monte-Carlo engine sample a new pair type plainly.

    ``draw(pair, under, size, rng)`` returns ``size`` outputs x of P0 (``under="P"``) or
    Q0 (``under="Q"``) as an array; the loss is computed with the pair's
    ``log_likelihood_ratio``.  Plain sampling (no importance sampling) can certify only
    delta of order 1 / samples or larger.
    """
    if not (isinstance(pair_type, type) and issubclass(pair_type, MonotonePair)):
        raise ValueError(f"pair_type must be a MonotonePair subclass, got {pair_type!r}")
    _PAIR_DRAWS[pair_type] = draw


def register_step_sampler(pair_type: type, factory: Callable[[Component, Direction], StepSampler]) -> None:
    """Register a full :class:`StepSampler` (e.g. with tilted kernels) for a pair type."""
    if not (isinstance(pair_type, type) and issubclass(pair_type, MonotonePair)):
        raise ValueError(f"pair_type must be a MonotonePair subclass, got {pair_type!r}")
    _STEP_SAMPLERS[pair_type] = factory


def step_sampler(component: Component, direction: Direction) -> StepSampler:
    """The sampler of ``component`` in ``direction`` (registered step samplers first)."""
    pair_type = type(component.mechanism.dominating_pair())
    for cls in pair_type.__mro__:
        if cls in _STEP_SAMPLERS:
            return _STEP_SAMPLERS[cls](component, direction)
    for cls in pair_type.__mro__:
        if cls in _PAIR_DRAWS:
            return NumpyStepSampler(component, direction, _PAIR_DRAWS[cls])
    raise ValueError(
        f"the montecarlo engine has no sampler for {type(component.mechanism).__name__} "
        f"(pair {pair_type.__name__}); register one with register_pair_sampler"
    )


# =========================================================================== one direction


class _Direction:
    """The composed loss in one neighbouring direction: tilts, moment bounds, kernel tables."""

    def __init__(self, name: Direction, components: Sequence[Component], importance_sampling: bool) -> None:
        self.name = name
        self.samplers = [step_sampler(c, name) for c in components]
        tilts = {s.tilt for s in self.samplers}
        if not importance_sampling or "none" in tilts:
            self.domain = "none"
        else:
            self.domain = "integer" if "integer" in tilts else "real"
        self.draws = sum(s.count for s in self.samplers)
        self.max_loss = float(sum(s.count * s.max_loss for s in self.samplers))
        self._log_mgf: dict[float, float] = {}

    @property
    def fast(self) -> list[StepSampler]:
        return [s for s in self.samplers if not isinstance(s, NumpyStepSampler)]

    @property
    def generic(self) -> list[StepSampler]:
        return [s for s in self.samplers if isinstance(s, NumpyStepSampler)]

    def log_mgf(self, lam: float) -> float:
        """K(lam) = log E[e^{lam L}] of the composed loss (+ floating-point allowance)."""
        lam = float(lam)
        if lam == 0.0:
            return 0.0
        if lam not in self._log_mgf:
            self._log_mgf[lam] = sum(s.count * (s.log_mgf(lam) + _LOG_MGF_ALLOWANCE) for s in self.samplers)
        return self._log_mgf[lam]

    def log_bound(self, lam: float, eps: float) -> float:
        """log B(eps): the bound on every term, and the moment bound on delta(eps)."""
        return self.log_mgf(lam) - lam * eps + log_c(lam)

    def _minimise(self, f: Callable[[float], float]) -> float:
        """Minimiser over the tilt domain (f convex in lam), 0 included."""
        if self.domain == "none":
            return 0.0
        if self.domain == "integer":
            best_k, best = 0, f(0.0)
            k = 1
            while k <= _MAX_INTEGER_TILT:
                value = f(float(k))
                if value < best:
                    best_k, best = k, value
                elif k > 2 * max(best_k, 1):
                    break
                k *= 2
            lo, hi = max(best_k // 2, 0), min(2 * max(best_k, 1), _MAX_INTEGER_TILT)
            while hi - lo > 2:
                m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
                if f(float(m1)) <= f(float(m2)):
                    hi = m2
                else:
                    lo = m1
            candidates = [best_k, *range(lo, hi + 1)]
            return float(min(candidates, key=lambda kk: f(float(kk))))
        hi = 1.0
        while hi < _MAX_REAL_TILT and f(2.0 * hi) < f(hi):
            hi *= 2.0
        result = optimize.minimize_scalar(lambda t: f(math.exp(t)), bounds=(-12.0, math.log(2.0 * hi)), method="bounded")
        lam = float(math.exp(result.x))
        return lam if f(lam) < f(0.0) else 0.0

    def best_lambda(self, eps: float) -> float:
        """Tilt minimising B(eps) (and with it the relative spread of the terms)."""
        return self._minimise(lambda lam: self.log_bound(lam, eps))

    def chernoff_epsilon(self, delta: float) -> tuple[float, float]:
        """(eps, lam): the moment-bound epsilon min_lam (K + log c - log delta)/lam, capped
        at the largest possible loss (where delta is exactly 0)."""
        if self.domain == "none":
            return self.max_loss, 0.0

        def eps_of(lam: float) -> float:
            return (self.log_mgf(lam) + log_c(lam) - math.log(delta)) / lam if lam > 0 else math.inf

        if self.domain == "integer":
            ks = sorted({*range(1, 65), *np.unique(np.geomspace(64, _MAX_INTEGER_TILT, 120).astype(int)).tolist()})
            values = []
            for k in ks:
                values.append(eps_of(float(k)))
                if len(values) > 8 and values[-1] > min(values) and k > 4 * ks[int(np.argmin(values))]:
                    break
            i = int(np.argmin(values))
            lo, hi = ks[max(i - 1, 0)], ks[min(i + 1, len(values) - 1)]
            while hi - lo > 2:  # ternary search between the neighbours of the best scanned tilt
                m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
                if eps_of(float(m1)) <= eps_of(float(m2)):
                    hi = m2
                else:
                    lo = m1
            lam = float(min([ks[i], *range(lo, hi + 1)], key=lambda kk: eps_of(float(kk))))
        else:
            hi = 1.0
            while hi < _MAX_REAL_TILT and eps_of(2.0 * hi) < eps_of(hi):
                hi *= 2.0
            result = optimize.minimize_scalar(lambda t: eps_of(math.exp(t)), bounds=(-12.0, math.log(2.0 * hi)), method="bounded")
            lam = float(math.exp(result.x))
        return min(eps_of(lam), self.max_loss), lam

    def batch(self, lam: float, grid: np.ndarray | None) -> "_Batch":
        tables = [s.table(lam) for s in self.fast]
        width = max([len(t.probabilities) for t in tables], default=1)
        count = len(tables)
        cums = np.ones((count, width))
        kinds = np.zeros((count, width), dtype=np.int64)
        params = np.zeros((count, width, kernels.N_PAR))
        for i, t in enumerate(tables):
            m = len(t.probabilities)
            cums[i, :m] = np.cumsum(t.probabilities)
            cums[i, m - 1 :] = 2.0
            kinds[i, :m] = t.kinds
            params[i, :m] = t.params
        qs = np.array([s.q for s in self.fast], dtype=float)
        with np.errstate(divide="ignore"):
            arrays = (
                np.array([s.count for s in self.fast], dtype=np.int64),
                qs,
                np.log(qs),
                np.log1p(-np.minimum(qs, 1.0)),
                np.array([t.sign for t in tables], dtype=float),
                np.array([t.lam for t in tables], dtype=float),
                np.array([len(t.probabilities) for t in tables], dtype=np.int64),
                cums,
                kinds,
                params,
            )
        return _Batch(arrays, tuple(self.generic), grid, float(lam), log_c(lam))


# =========================================================================== chunks


@dataclass(frozen=True)
class _Batch:
    """Everything a chunk needs (plain data, picklable for executors)."""

    arrays: tuple
    generic: tuple
    grid: np.ndarray | None
    lam: float
    log_c: float


def _generic_offsets(generic: Sequence[StepSampler], words: np.ndarray, n: int, lam: float) -> np.ndarray:
    if not generic:
        return np.empty(0)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in words])))
    offsets = np.zeros(n)
    for sampler in generic:
        per_call = max(1, min(sampler.count, 4_000_000 // max(n, 1)))
        done = 0
        while done < sampler.count:
            m = min(per_call, sampler.count - done)
            offsets += sampler.draw(n * m, rng, lam).reshape(n, m).sum(axis=1)
            done += m
    return offsets


def _run_chunk(batch: _Batch, words: np.ndarray, n: int, block: int):
    """One chunk: composed losses (grid None) or the grid sums (sums, squares)."""
    offsets = _generic_offsets(batch.generic, words, n, batch.lam)
    if batch.grid is None:
        return kernels.composed_losses(words, n, block, *batch.arrays, offsets)
    return kernels.accumulate(words, n, block, *batch.arrays, offsets, batch.grid, batch.lam, batch.log_c)


def _chunking(draws: int) -> tuple[int, int]:
    """(samples per chunk, samples per block); a function of the draws per sample only."""
    draws = max(draws, 1)
    block = max(1, min(256, 2**16 // draws))
    chunk = max(64, min(2**17, 2**24 // draws))
    block = max(block, -(-chunk // 1024))
    return chunk, block


class _Progress:
    """A one-line progress bar on stderr: only on a terminal and once a run passes 2 s."""

    def __init__(self, enabled: bool | None, total: int) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.total = max(total, 1)
        self.done = 0
        self.start = time.perf_counter()
        self.shown = False

    def advance(self, samples: int, label: str) -> None:
        self.done += samples
        elapsed = time.perf_counter() - self.start
        if self.enabled and (self.shown or elapsed > 2.0):
            self.shown = True
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\rdpforge montecarlo [{bar:<30}] {100 * frac:5.1f}% {label} {elapsed:6.1f}s")
            sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


@dataclass
class _Runner:
    seed: int
    executor: Executor | None
    progress: _Progress

    def words(self, stage: int, direction: int, chunk: int) -> np.ndarray:
        sequence = np.random.SeedSequence(self.seed, spawn_key=(stage, direction, chunk))
        return sequence.generate_state(4, dtype=np.uint64)

    def run(self, batch: _Batch, draws: int, n: int, stage: int, direction: int, label: str):
        """Run ``n`` samples in chunks (in order; at most ``_WINDOW`` chunks in flight on an
        executor) and combine them: concatenated losses, or summed grid sums."""
        chunk, block = _chunking(draws)
        jobs = [(self.words(stage, direction, i), min(chunk, n - start)) for i, start in enumerate(range(0, n, chunk))]
        pieces: list[np.ndarray] = []
        sums = squares = None

        def take(result, size: int) -> None:
            nonlocal sums, squares
            if batch.grid is None:
                pieces.append(result)
            elif sums is None:
                sums, squares = result[0].copy(), result[1].copy()
            else:
                sums += result[0]
                squares += result[1]
            self.progress.advance(size, label)

        if self.executor is None:
            for words, size in jobs:
                take(_run_chunk(batch, words, size, block), size)
        else:
            pending: deque = deque()
            for words, size in jobs:
                pending.append((self.executor.submit(_run_chunk, batch, words, size, block), size))
                if len(pending) >= _WINDOW:
                    future, done = pending.popleft()
                    take(future.result(), done)
            while pending:
                future, done = pending.popleft()
                take(future.result(), done)
        if batch.grid is None:
            return np.concatenate(pieces)
        return sums, squares


# =========================================================================== statistics


@dataclass(frozen=True)
class _GridBounds:
    grid: np.ndarray
    estimate: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    mean_z: np.ndarray
    var_z: np.ndarray
    log_bound: np.ndarray


def _bernstein(sums: np.ndarray, squares: np.ndarray, n: int, log_term: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, unbiased variance, empirical-Bernstein margin) of terms in [0, 1]."""
    mean = sums / n
    if n < 2:
        return mean, np.full_like(mean, 0.25), np.full_like(mean, np.inf)
    var = np.maximum((squares - sums * mean) / (n - 1), 0.0)
    margin = np.sqrt(2.0 * var * log_term / n) + 7.0 * log_term / (3.0 * (n - 1))
    return mean, var, margin


def _scaled(log_b: np.ndarray, z: np.ndarray) -> np.ndarray:
    """B * z computed as exp(log B + log z) (B may overflow where z underflows); z >= 0."""
    with np.errstate(divide="ignore"):
        return np.exp(log_b + np.log(np.maximum(z, 0.0)))


def _grid_bounds(direction: _Direction, lam: float, grid: np.ndarray, sums, squares, n: int, log_term: float) -> _GridBounds:
    log_b = np.array([direction.log_bound(lam, e) for e in grid])
    mean, var, margin = _bernstein(sums, squares, n, log_term)
    # B * min(mean + margin, 1) never exceeds the moment bound B itself
    upper = np.minimum(_scaled(log_b, np.minimum(mean + margin, 1.0)), 1.0)
    lower = _scaled(log_b, mean - margin)
    estimate = _scaled(log_b, mean)
    exact_zero = grid >= direction.max_loss
    upper = np.where(exact_zero, 0.0, upper)
    estimate = np.where(exact_zero, 0.0, estimate)
    lower = np.where(exact_zero, 0.0, lower)
    return _GridBounds(grid, estimate, upper, lower, mean, var, log_b)


def _samples_needed(log_b: np.ndarray, mean: np.ndarray, var: np.ndarray, delta: float, log_term: float) -> float:
    """Smallest n with B (mean + sqrt(2 var L/n) + 7L/(3n)) <= delta at some point (inf if none)."""
    room = np.exp(np.log(delta) - log_b) - mean  # (delta / B) - mean
    ok = room > 0
    if not ok.any():
        return math.inf
    a = 7.0 * log_term / 3.0
    b = np.sqrt(2.0 * var[ok] * log_term)
    c = room[ok]
    x = (-b + np.sqrt(b * b + 4.0 * a * c)) / (2.0 * a)  # x = 1/sqrt(n)
    return float(np.min(1.0 / (x * x)) + 1.0)


def _pilot_stats(
    direction: _Direction, losses: np.ndarray, lam_p: float, lam_m: float, candidates: np.ndarray, log_term: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From pilot losses drawn at tilt lam_p: per candidate eps, (log B_m, E[Z_m], Var[Z_m])
    predicted for the main run at tilt lam_m (second moment by reweighting)."""
    k_p, k_m = direction.log_mgf(lam_p), direction.log_mgf(lam_m)
    log_b_m = np.array([direction.log_bound(lam_m, e) for e in candidates])
    n = len(losses)
    mean = np.zeros(len(candidates))
    second = np.zeros(len(candidates))
    positive = losses[losses > candidates[0]]
    log_w_p = k_p - lam_p * positive
    log_w_m = k_m - lam_m * positive
    step = max(1, 2**19 // max(positive.size, 1))  # candidates per block: temporaries stay small
    for start in range(0, len(candidates), step):
        eps = candidates[start : start + step, None]
        gap = positive[None, :] - eps
        with np.errstate(divide="ignore", invalid="ignore"):
            log_f = np.where(gap > 0, np.log(-np.expm1(-np.maximum(gap, 1e-300))), -np.inf)
        lb = log_b_m[start : start + step, None]
        mean[start : start + step] = np.exp(log_w_p[None, :] + log_f - lb).sum(axis=1) / n
        second[start : start + step] = np.exp(log_w_p[None, :] + log_w_m[None, :] + 2.0 * log_f - 2.0 * lb).sum(axis=1) / n
    return log_b_m, mean, np.maximum(second - mean * mean, 0.0)


def _crossing(grid: np.ndarray, values: np.ndarray, delta: float) -> float:
    """Point estimate: where the (non-increasing) values cross delta, log-linear interpolation."""
    below = np.nonzero(values <= delta)[0]
    if not below.size:
        return float(grid[-1])
    i = int(below[0])
    if i == 0:
        return float(grid[0])
    v0, v1 = values[i - 1], values[i]
    if v1 <= 0 or v0 <= 0:
        return float(grid[i])
    t = (math.log(v0) - math.log(delta)) / (math.log(v0) - math.log(v1)) if v0 != v1 else 1.0
    return float(grid[i - 1] + min(max(t, 0.0), 1.0) * (grid[i] - grid[i - 1]))


# =========================================================================== engine API


def _check_options(options: dict) -> None:
    for name in options:
        if name not in _OPTIONS:
            raise ValueError(f"{name} is not an option of the montecarlo engine (options: {', '.join(_OPTIONS)})")


def _common(samples, confidence, seed, executor) -> tuple[int, float, int]:
    samples = require_count("samples", samples)
    confidence = require_probability_open("confidence", confidence)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy)
    else:
        seed = require_count("seed", seed, minimum=0)
    if executor is not None and not hasattr(executor, "submit"):
        raise ValueError(f"executor must be a concurrent.futures.Executor, got {type(executor).__name__}")
    return samples, confidence, seed


def _directions(description: Description, importance_sampling: bool) -> list[_Direction]:
    components = flatten(description)
    names: tuple[Direction, ...] = ("remove",) if all(c.symmetric for c in components) else ("remove", "add")
    return [_Direction(name, components, importance_sampling) for name in names]


def _plain_samples_needed(delta: float, log_term: float) -> int:
    """n with 7 ln(2/b) / (3 (n - 1)) < delta: necessary for plain sampling (B = 1)."""
    return int(math.floor(7.0 * log_term / (3.0 * delta))) + 2


def _too_small(delta: float, samples: int, confidence: float, needed: float, how: str) -> ValueError:
    need = "an unbounded number of" if not math.isfinite(needed) else f"about {needed:.3g}"
    return ValueError(
        f"delta={delta:g} is smaller than the montecarlo engine can certify with samples={samples} at "
        f"confidence={confidence:g} ({how}); it would need {need} samples"
    )


def _main_grid(eps_hat: float, eps_pred: float, eps_top: float, max_loss: float) -> tuple[np.ndarray, float]:
    """Grid for the main run (fixed before it) and where the lower-bound search starts."""
    spread = max(eps_pred - eps_hat, 1e-3 * max(eps_pred, 1e-2))
    low = max(0.0, eps_hat - 3.0 * spread)
    high = eps_pred + 4.0 * spread
    parts = [np.linspace(low, high, 256), np.linspace(max(0.0, eps_hat - 25.0 * spread), low, 17)]
    if eps_top > high:
        parts.append(np.linspace(high, eps_top, 33))
    if math.isfinite(max_loss) and max_loss > 0:
        parts.append(np.array([max_loss]))
    grid = np.unique(np.concatenate(parts))
    return grid[grid >= 0.0], low


def epsilon(
    description: Description,
    delta: float,
    *,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int | None = None,
    executor: Executor | None = None,
    progress: bool | None = None,
    importance_sampling: bool = True,
    **unknown: Any,
) -> MonteCarloEpsilonResult:
    """High-probability bounds on eps(delta) of a composed description (module docstring:
    the importance-sampled estimator of Wang et al. 2023 with the empirical Bernstein
    bound of Maurer & Pontil 2009, Thm. 4).

    With probability at least ``confidence`` over the sampling, eps(delta) <= ``upper``
    (and, separately, >= ``lower``).  ``samples`` composed-loss samples per sampled
    direction make the certificate; a pilot of about samples/8 (at most 50,000, with
    independent seeds) chooses the tilt and the grid of epsilon values.  ``seed`` makes
    the run reproducible (a random seed is drawn and recorded in ``accuracy`` otherwise);
    ``executor`` spreads chunks over workers; ``progress`` forces the stderr progress bar
    on or off (default: on a terminal, for runs over 2 s).

    Raises ``ValueError`` when ``delta`` is below what ``samples`` can certify (with the
    number of samples that would be needed).
    """
    _check_options(unknown)
    delta = require_probability_open("delta", delta)
    samples, confidence, seed = _common(samples, confidence, seed, executor)
    directions = _directions(description, importance_sampling)
    beta = (1.0 - confidence) / len(directions)
    log_term = math.log(2.0 / beta)
    for d in directions:
        if d.domain == "none" and d.max_loss > 0:
            need = _plain_samples_needed(delta, log_term)
            if samples < need:
                raise _too_small(delta, samples, confidence, need, f"plain sampling in the {d.name} direction")
    if samples < 2 + 7.0 * log_term / 3.0:
        raise _too_small(delta, samples, confidence, 2 + 7.0 * log_term / 3.0, "importance sampling")
    started = time.perf_counter()
    n_pilot = int(min(max(samples // 8, 1000), 50_000))
    chernoff = {d.name: d.chernoff_epsilon(delta) for d in directions}
    order = sorted(range(len(directions)), key=lambda i: -chernoff[directions[i].name][0])
    total = sum(n_pilot + samples for _ in directions)
    runner = _Runner(seed, executor, _Progress(progress, total))
    uppers: dict[str, float] = {}
    lowers: dict[str, float] = {}
    estimates: dict[str, float] = {}
    tilts: dict[str, float] = {}
    skipped: dict[str, str] = {}
    grid_sizes: dict[str, int] = {}
    try:
        for index in order:
            d = directions[index]
            eps_c, lam_p = chernoff[d.name]
            current = max(uppers.values(), default=-math.inf)
            if d.max_loss <= current or (d.domain != "none" and eps_c <= current):
                skipped[d.name] = (
                    "delta is exactly 0 beyond its largest loss"
                    if d.max_loss <= current
                    else "its moment (Chernoff) bound already certifies the other direction's epsilon"
                )
                continue
            if d.max_loss <= 0.0:
                uppers[d.name], lowers[d.name], estimates[d.name] = 0.0, 0.0, 0.0
                continue
            # ---- pilot: choose the tilt and the grid
            losses = runner.run(d.batch(lam_p, None), d.draws, n_pilot, 0, index, f"pilot ({d.name})")
            if math.isfinite(eps_c):
                # a little beyond the moment bound: the sampled bound may certify there
                eps_top = min(d.max_loss, 1.05 * eps_c + 1e-3)
            else:
                eps_top = min(d.max_loss, 2.0 * float(np.max(losses)) + 1.0)
            eps_top = max(eps_top, 1e-9)
            candidates = np.linspace(0.0, eps_top, _PILOT_CANDIDATES)
            if eps_top < d.max_loss < math.inf:
                candidates = np.append(candidates, d.max_loss)
            log_b_p, mean_p, _ = _pilot_stats(d, losses, lam_p, lam_p, candidates, log_term)
            eps_hat = _crossing(candidates, _scaled(log_b_p, mean_p), delta)
            lam_m = d.best_lambda(eps_hat) if d.domain != "none" else 0.0
            log_b_m, mean_m, var_m = _pilot_stats(d, losses, lam_p, lam_m, candidates, log_term)
            margin = np.sqrt(2.0 * var_m * log_term / samples) + 7.0 * log_term / (3.0 * max(samples - 1, 1))
            predicted = _scaled(log_b_m, np.minimum(mean_m + margin, 1.0))
            predicted = np.where(candidates >= d.max_loss, 0.0, predicted)
            passing = np.nonzero(predicted <= delta)[0]
            if not passing.size:
                needed = _samples_needed(log_b_m, mean_m, var_m, delta, log_term)
                raise _too_small(delta, samples, confidence, needed, f"pilot prediction, {d.name} direction")
            eps_pred = float(candidates[passing[0]])
            grid, lower_start = _main_grid(eps_hat, eps_pred, eps_top, d.max_loss)
            # ---- main run: the certificate
            sums, squares = runner.run(d.batch(lam_m, grid), d.draws, samples, 1, index, f"main ({d.name})")
            bounds = _grid_bounds(d, lam_m, grid, sums, squares, samples, log_term)
            envelope = np.maximum.accumulate(bounds.upper[::-1])[::-1]
            ok = np.nonzero(envelope <= delta)[0]
            if not ok.size:
                needed = _samples_needed(bounds.log_bound, bounds.mean_z, bounds.var_z, delta, log_term)
                raise _too_small(delta, samples, confidence, needed, f"{d.name} direction")
            uppers[d.name] = float(grid[ok[0]])
            # lower: running minimum over the grid points from the start of the dense
            # part (fixed by the pilot) upwards
            start = int(np.searchsorted(grid, lower_start))
            running_min = np.minimum.accumulate(bounds.lower[start:])
            above = np.nonzero(running_min > delta)[0]
            lowers[d.name] = float(grid[start + above[-1]]) if above.size else 0.0
            estimates[d.name] = _crossing(grid, bounds.estimate, delta)
            tilts[d.name] = lam_m
            grid_sizes[d.name] = int(grid.size)
    finally:
        runner.progress.close()
    upper = max(uppers.values(), default=0.0)
    lower = min(max(lowers.values(), default=0.0), upper)
    estimate = min(max(max(estimates.values(), default=0.0), lower), upper)
    return MonteCarloEpsilonResult(
        lower=lower,
        upper=upper,
        estimate=estimate,
        delta=delta,
        engine="montecarlo",
        accuracy=_accuracy(
            directions, tilts, skipped, grid_sizes, n_pilot, seed, started, uppers=uppers, chernoff=chernoff
        ),
        samples=samples,
        confidence=confidence,
    )


def delta(
    description: Description,
    epsilon: float,
    *,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int | None = None,
    executor: Executor | None = None,
    progress: bool | None = None,
    importance_sampling: bool = True,
    **unknown: Any,
) -> MonteCarloDeltaResult:
    """High-probability bounds on delta(epsilon) (module docstring: Wang et al. 2023
    estimator, Maurer & Pontil 2009, Thm. 4 confidence bound).

    The tilt is the one minimising the moment bound B(epsilon) (no pilot); with
    probability at least ``confidence``, delta(epsilon) <= ``upper`` (and separately
    >= ``lower``).  ``upper`` never exceeds the deterministic moment bound.
    """
    _check_options(unknown)
    epsilon = require_non_negative("epsilon", epsilon)
    samples, confidence, seed = _common(samples, confidence, seed, executor)
    directions = _directions(description, importance_sampling)
    beta = (1.0 - confidence) / len(directions)
    log_term = math.log(2.0 / beta)
    started = time.perf_counter()
    live = [d for d in directions if epsilon < d.max_loss]
    lams = {d.name: d.best_lambda(epsilon) for d in live}
    moment = {d.name: min(math.exp(d.log_bound(lams[d.name], epsilon)), 1.0) for d in live}
    order = sorted(range(len(directions)), key=lambda i: -moment.get(directions[i].name, 0.0))
    runner = _Runner(seed, executor, _Progress(progress, samples * len(directions)))
    uppers: dict[str, float] = {}
    lowers: dict[str, float] = {}
    estimates: dict[str, float] = {}
    skipped: dict[str, str] = {}
    grid = np.array([epsilon])
    try:
        for index in order:
            d = directions[index]
            if epsilon >= d.max_loss:
                uppers[d.name] = lowers[d.name] = estimates[d.name] = 0.0
                continue
            if moment[d.name] <= max(uppers.values(), default=-1.0):
                skipped[d.name] = "its moment (Chernoff) bound is below the other direction's upper bound"
                continue
            lam = lams[d.name]
            sums, squares = runner.run(d.batch(lam, grid), d.draws, samples, 2, index, f"{d.name}")
            bounds = _grid_bounds(d, lam, grid, sums, squares, samples, log_term)
            uppers[d.name] = float(bounds.upper[0])
            lowers[d.name] = float(bounds.lower[0])
            estimates[d.name] = float(bounds.estimate[0])
    finally:
        runner.progress.close()
    upper = max(uppers.values())
    lower = min(max(lowers.values()), upper)
    estimate = min(max(max(estimates.values()), lower), upper)
    return MonteCarloDeltaResult(
        lower=lower,
        upper=upper,
        estimate=estimate,
        epsilon=epsilon,
        engine="montecarlo",
        accuracy=_accuracy(directions, lams, skipped, {}, 0, seed, started, moment=moment),
        samples=samples,
        confidence=confidence,
    )


def _accuracy(directions, tilts, skipped, grid_sizes, n_pilot, seed, started, **extra) -> dict[str, Any]:
    domains = {d.name: d.domain for d in directions}
    data: dict[str, Any] = {
        "inequality": INEQUALITY,
        "importance_sampling": {
            name: ("exponential tilt" if domains[name] != "none" else "none (plain sampling)") for name in domains
        },
        "tilt": {name: float(lam) for name, lam in tilts.items()},
        "directions_sampled": sorted(set(tilts) - set(skipped)),
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if n_pilot:
        data["pilot_samples"] = n_pilot
        data["grid_points"] = grid_sizes
    if skipped:
        data["skipped"] = skipped
    if "chernoff" in extra:
        data["moment_bound_epsilon"] = {name: float(v[0]) for name, v in extra["chernoff"].items()}
    if "moment" in extra:
        data["moment_bound_delta"] = {name: float(v) for name, v in extra["moment"].items()}
    data["lower"] = "high-probability lower confidence bound (holds separately from the upper bound)"
    return data


def _draw_lmo(pair, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """LMO pair: Q0 = the noise, P0 = the noise shifted by the sensitivity."""
    noise = pair.mechanism.sample(size, rng)
    return noise + pair.a if under == "P" else noise


try:  # the LMO pair is sampled through the plug-in interface (NumPy draws, bounded r)
    from dpforge.mechanisms.lmo import LMOPair
except ImportError:  # pragma: no cover - LMO not available
    pass
else:
    register_pair_sampler(LMOPair, _draw_lmo)
