"""The sampler of plugged-in pairs that only provide draws of P0 and Q0
(:func:`~dpforge.accounting.montecarlo.registry.register_pair_sampler`; the LMO pair is
one): plain NumPy draws, and exact tilted draws by rejection from those draws when the
log-likelihood ratio r is bounded.

The tilted laws are those of the importance sampling of Wang, Mahloujifar, Wu, Jia &
Mittal (2023), with the remove direction expanded binomially as in Mironov, Talwar &
Zhang (2019) (see :mod:`.tilting`); the acceptance rules and the Gauss-Legendre
normalisers are described on :class:`NumpyStepSampler`.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from dpforge.accounting.montecarlo.samplers import StepSampler
from dpforge.accounting.montecarlo.tilting import _binomial_terms, _logsumexp
from dpforge.errors import LimitError, UnsupportedError
from dpforge.mechanisms.combinators import Component
from dpforge.mechanisms.pairs import Direction, subsampled_log_ratio

#: composite Gauss-Legendre rule for the moments of plugged-in pairs (panels x order nodes)
_GL_PANELS = 64
_GL_ORDER = 24
#: expected proposals per step above which a rejection-sampled tilt is not used
_MAX_PROPOSALS = 64.0
#: the largest |r| (nats) a bounded pair may reach and still be tilted: the quadrature's
#: nodes t - r_max keep about 1e-12 nats of absolute precision there (an LMO of
#: gamma_shape 1e300 reached 7e299, where they keep none); beyond it, plain draws only
MAX_LOSS_RANGE = 1e4


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
        # past MAX_LOSS_RANGE the quadrature cannot price a tilt: plain draws only
        if max(abs(self.r_min), abs(self.r_max)) <= MAX_LOSS_RANGE and self.r_max > self.r_min:
            self.tilt = "integer" if (self.mode == "remove" and self.q < 1.0) else "real"
        self._rules: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None
        self._cache: dict[float, tuple[float, np.ndarray, np.ndarray, float]] = {}
        self._log_c_cache: dict[float, float] = {}

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
    def _log_upper(log_values: list[float]) -> float:
        """log(max(a, b) + |a - b|) of the two resolutions' values, from their logs (summed
        in log space: a law piled against r_min made e^{j (r_min - r_max)} underflow to 0)."""
        if any(math.isnan(value) or value == math.inf for value in log_values):
            raise LimitError(f"montecarlo: a tilted normaliser is not a finite number (logarithms {log_values!r})")
        high, low = max(log_values), min(log_values)
        if high == -math.inf:
            raise LimitError("montecarlo: a tilted normaliser is 0 (a privacy loss outside the double range)")
        return high + math.log(2.0 - math.exp(low - high))

    @staticmethod
    def _log_terms(first: float, logs: np.ndarray, factors: np.ndarray) -> float:
        """log(e^first + sum factors e^logs), factors >= 0."""
        if math.isnan(first) or np.isnan(logs).any() or np.isnan(factors).any():  # dropping them would undercount
            raise LimitError("montecarlo: the quadrature of a tilted normaliser met NaN (the pair's r_sf or r_cdf)")
        positive = factors > 0
        terms = logs[positive] + np.log(factors[positive])
        top = max(first, float(terms.max())) if terms.size else first
        if not math.isfinite(top):
            return top
        return top + math.log(math.exp(first - top) + float(np.sum(np.exp(terms - top))))

    def _log_c(self, j: float) -> float:
        """log E_Q0[e^{j r}] (an over-estimate): e^{j r_min} + int j e^{j t} Pr(r > t) dt."""
        if j == 0:
            return 0.0
        if j not in self._log_c_cache:  # the same j recur in every tilt's binomial expansion
            log_values = [
                self._log_terms(j * (self.r_min - self.r_max), j * (t - self.r_max), w * j * sf)
                for t, w, sf, _ in self._quadrature()
            ]
            self._log_c_cache[j] = j * self.r_max + self._log_upper(log_values)
        return self._log_c_cache[j]

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
                top = float(subsampled_log_ratio(self.r_min, q))
                log_values = []
                for t, w, _, cdf in self._quadrature():
                    ell_t = subsampled_log_ratio(t, q)
                    slope = q * np.exp(t - ell_t)
                    log_values.append(
                        self._log_terms(-lam * (float(subsampled_log_ratio(self.r_max, q)) - top), -lam * (ell_t - top), w * lam * slope * cdf)
                    )
                log_m = -lam * top + self._log_upper(log_values)
                js, probabilities = np.array([0.0]), np.array([1.0])
                proposals = float(math.exp(-lam * top - log_m))
            self._cache[lam] = (log_m, js, probabilities, proposals)
        return self._cache[lam]

    def log_mgf(self, lam: float) -> float:
        """Upper bound on log E_P[e^{lam L}] from the quadrature normalisers (0 at lam = 0);
        tilts needing more than ``_MAX_PROPOSALS`` proposals per step get +1e6, pricing
        them out; UnsupportedError for lam != 0 when r is unbounded."""
        if lam == 0:
            return 0.0
        if self.tilt == "none":
            raise UnsupportedError(f"{type(self.pair).__name__} has an unbounded privacy loss: no tilt")
        log_m, _, _, proposals = self._build(float(lam))
        # a tilt that would need too many proposals is priced out (a larger value is still an upper bound)
        return log_m if proposals <= _MAX_PROPOSALS else log_m + 1e6

    # -- draws ------------------------------------------------------------------------
    def _r(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(self.pair.log_likelihood_ratio(x), dtype=float), self.r_min, self.r_max)

    def _base(self, under: str, size: int, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(self.draw_base(self.pair, under, size, rng), dtype=float)
        if not np.isfinite(x).all():  # its loss would be NaN, and a rejection loop on it never ends
            raise LimitError(
                f"montecarlo: {type(self.pair).__name__} drew an output of {float(x[~np.isfinite(x)][0])!r} "
                "(noise past the double range: its privacy loss is undefined)"
            )
        return x

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
            top = float(subsampled_log_ratio(self.r_min, self.q))
            pending = np.arange(size)
            while pending.size:
                candidate = self._r(self._base("Q", pending.size, rng))
                with np.errstate(divide="ignore"):
                    accept = np.log(rng.random(pending.size)) <= -lam * (subsampled_log_ratio(candidate, self.q) - top)
                r[pending[accept]] = candidate[accept]
                pending = pending[~accept]
        return np.asarray(self.mode_loss.loss_of_r(r), dtype=float)
