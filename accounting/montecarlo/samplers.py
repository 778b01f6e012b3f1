"""One-step samplers of the Monte-Carlo accountant: the :class:`StepSampler` plug-in
interface, the :class:`StepTable` law the numba kernels draw from, and the exact
built-in samplers of the Gaussian, Laplace and randomised-response pairs.

For a tilt lam a sampler gives log M(lam) = log E_P[e^{lam L}] of one step and the table
of the tilted one-step law p e^{lam L} / M(lam) (the importance sampling of Wang,
Mahloujifar, Wu, Jia & Mittal 2023; the maths in :mod:`.tilting`).  Exact tilted laws:

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

Pairs that only provide draws of P0 and Q0 are sampled by :mod:`.generic`; the lookup of
a component's sampler is :mod:`.registry`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, special

from dpforge.accounting.montecarlo import kernels
from dpforge.accounting.montecarlo.tilting import _binomial_terms, _log_abs_expm1, _logsumexp, _quad_log, _slope
from dpforge.errors import ParameterError, UnsupportedError
from dpforge.mechanisms.combinators import Component
from dpforge.mechanisms.pairs import Direction, subsampled_log_ratio


@dataclass(frozen=True)
class StepTable:
    """The law of one step's loss as the numba kernel draws it: a categorical over
    outcomes (the codes of :mod:`.kernels`) with their parameters."""

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
        class supports only lam = 0 (returns 0) and raises UnsupportedError otherwise."""
        if lam == 0:
            return 0.0
        raise UnsupportedError(f"{type(self).__name__} does not support tilting")

    def table(self, lam: float) -> StepTable | None:
        """The :class:`StepTable` of the lam-tilted one-step law for the numba kernel, or
        None when the sampler only offers a NumPy :meth:`draw`."""
        return None

    def draw(self, size: int, rng: np.random.Generator, lam: float = 0.0) -> np.ndarray:  # pragma: no cover
        """``size`` independent one-step losses L drawn from the lam-tilted law
        p e^{lam L} / M(lam) (the plain law under P for lam = 0)."""
        raise NotImplementedError


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
        """Supremum of the one-step loss in the direction sampled (the remove law's when a
        symmetric pair's add direction is sampled as its remove direction)."""
        lo, hi = self.loss.support
        if self.mode == "remove" and self.direction == "add":
            return float(self.component.privacy_loss_distribution("remove").support[1])
        return float(hi)

    def _build(self, lam: float) -> tuple[float, StepTable]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _get(self, lam: float) -> tuple[float, StepTable]:
        lam = float(lam)
        if self.tilt == "integer" and lam != round(lam):
            raise ParameterError(f"the {self.mode}-direction tilt of a subsampled pair must be an integer, got {lam}")
        if lam not in self._cache:
            self._cache[lam] = self._build(lam)
        return self._cache[lam]

    def log_mgf(self, lam: float) -> float:
        """log M(lam) of one step, exact (closed form, or quadrature erring upwards)."""
        return self._get(lam)[0]

    def table(self, lam: float) -> StepTable:
        """The :class:`StepTable` of the lam-tilted one-step law."""
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
            return -0.5 * x * x - lam * float(subsampled_log_ratio(mu * x - half, q))

        # mode: x = -lam mu s(r(x)), s in (0, 1)
        x0 = optimize.brentq(lambda x: x + lam * mu * _slope(mu * x - half, q), -lam * mu - 1.0, 1.0, xtol=1e-12)
        peak = log_target(x0)
        transition = (math.log1p(-q) - math.log(q) + half) / mu
        log_integral = _quad_log(lambda x: log_target(x) - peak, x0 - 40.0, x0 + 40.0, (x0, transition))
        log_m = peak + log_integral - 0.5 * math.log(2.0 * math.pi)

        def log_envelope(r0: float) -> float:
            s0 = _slope(r0, q)
            return -lam * float(subsampled_log_ratio(r0, q)) + lam * s0 * (r0 + half) + 0.5 * (lam * s0 * mu) ** 2

        r_mode = mu * x0 - half
        r0 = optimize.minimize_scalar(log_envelope, bounds=(r_mode - 10.0, r_mode + 10.0), method="bounded").x
        s0 = _slope(r0, q)
        params = (mu, -half, -lam * s0 * mu, r0, float(subsampled_log_ratio(r0, q)), s0)
        return log_m, _table([(0.0, kernels.GAUSS_REJ, params)], -1.0, lam)


class LaplaceStepSampler(_FastSampler):
    """Subsampled Laplace pair Lap(a, 1) vs Lap(0, 1): r = -a (x <= 0), 2x - a, a (x >= a)."""

    @staticmethod
    def _lapmid(s: float, a: float) -> tuple[float, float, float]:
        aux = math.exp(-s * a) if s > 0 else math.expm1(s * a)
        return (s, a, aux)

    def _build(self, lam: float) -> tuple[float, StepTable]:
        a, q = float(self.pair.a), self.q
        low, high = float(subsampled_log_ratio(-a, q)), float(subsampled_log_ratio(a, q))
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
            return -x - lam * (float(subsampled_log_ratio(2.0 * x - a, q)) - low)

        log_middle = log_half - lam * low + _quad_log(log_mid, 0.0, a, ())

        def log_envelope(r0: float) -> float:
            s0 = _slope(r0, q)
            rate = 1.0 + 2.0 * lam * s0
            return -lam * float(subsampled_log_ratio(r0, q)) + lam * s0 * (a + r0) + math.log(-math.expm1(-rate * a) / rate)

        r0 = optimize.minimize_scalar(log_envelope, bounds=(-a, a), method="bounded").x
        s0 = _slope(r0, q)
        rate = 1.0 + 2.0 * lam * s0
        entries = [
            (log_half - lam * low, kernels.ATOM, (-low,)),
            (log_half - a - lam * high, kernels.ATOM, (-high,)),
            (log_middle, kernels.LAPMID_REJ, (*self._lapmid(-rate, a), r0, float(subsampled_log_ratio(r0, q)), s0)),
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
        loss_plus = self.sign * float(subsampled_log_ratio(eps, q))
        loss_minus = self.sign * float(subsampled_log_ratio(-eps, q))
        entries = [
            (log_plus + lam * loss_plus, kernels.ATOM, (loss_plus,)),
            (log_minus + lam * loss_minus, kernels.ATOM, (loss_minus,)),
        ]
        return _logsumexp([e[0] for e in entries]), _table(entries, self.sign, lam)

    @property
    def max_loss(self) -> float:
        """Largest one-step loss in the sampled mode: the larger of +-log(1 - q + q e^{+-eps})."""
        eps, q = float(self.pair.epsilon), self.q
        return max(self.sign * float(subsampled_log_ratio(eps, q)), self.sign * float(subsampled_log_ratio(-eps, q)))
