"""The composed privacy loss of a description in one neighbouring direction, as the
Monte-Carlo accountant samples it: its step samplers, tilt domain, cumulant K(lam) and
moment bound, the choice of the tilt, and the kernel tables of a batch.

Tilting the composed loss tilts every step independently by the same lam, so
K(lam) = log E_P[e^{lam L}] is the sum of the steps' log M(lam) (each plus a
floating-point allowance, in the conservative direction), and

    B(eps) = exp(K(lam) - lam eps) c(lam)

bounds every importance-sampling term and is the classical moment (Chernoff) bound on
delta(eps) (Wang, Mahloujifar, Wu, Jia & Mittal 2023; c(lam) in :mod:`.tilting`).  The
tilt of a run minimises B at the target; the moment-bound epsilon
min_lam (K + log c - log delta) / lam is the deterministic bound the pilot starts from.
Both directions (remove, add) are sampled unless every component is symmetric.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from scipy import optimize

from dpforge.accounting.montecarlo import kernels
from dpforge.accounting.montecarlo.generic import NumpyStepSampler
from dpforge.accounting.montecarlo.registry import step_sampler
from dpforge.accounting.montecarlo.runner import _Batch
from dpforge.accounting.montecarlo.samplers import StepSampler
from dpforge.accounting.montecarlo.tilting import log_c
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.mechanisms.pairs import Direction

#: added to log M of every step: floating-point allowance (conservative direction)
_LOG_MGF_ALLOWANCE = 1e-13
_MAX_INTEGER_TILT = 100_000
_MAX_REAL_TILT = 10_000.0


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
        """The samplers drawn by the numba kernel (those with step tables)."""
        return [s for s in self.samplers if not isinstance(s, NumpyStepSampler)]

    @property
    def generic(self) -> list[StepSampler]:
        """The samplers drawn in NumPy (plugged-in pairs)."""
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

    def batch(self, lam: float, grid: np.ndarray | None) -> _Batch:
        """The :class:`~.runner._Batch` of a run at tilt ``lam``: the kernel tables of the
        fast samplers stacked, the NumPy samplers, and the grid (None: return losses)."""
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


def _directions(description: Description, importance_sampling: bool) -> list[_Direction]:
    """The directions to sample: "remove" alone when every component is symmetric (its
    add law is its remove law), else "remove" and "add"."""
    components = flatten(description)
    names: tuple[Direction, ...] = ("remove",) if all(c.symmetric for c in components) else ("remove", "add")
    return [_Direction(name, components, importance_sampling) for name in names]
