"""The privacy-loss law of a finite discrete measure (a composed grid measure).

It offers the same distribution-function interface as
:class:`dpforge.mechanisms.pairs.PrivacyLoss`, so a measure composed on a fine grid can
be discretised again onto a coarser grid by the same certified constructions.  The
Q-measure is the exponential tilt n_j = m_j e^{-x_j}; an atom at +inf has no Q-mass.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from dpforge.errors import ParameterError


class DiscreteLoss:
    """Masses ``masses`` at sorted ``positions`` plus ``infinity`` at +inf."""

    def __init__(self, positions: np.ndarray, masses: np.ndarray, infinity: float = 0.0) -> None:
        keep = masses > 0
        self.positions = np.asarray(positions, dtype=float)[keep]
        self.masses = np.asarray(masses, dtype=float)[keep]
        self.infinity = float(infinity)
        if self.positions.size == 0:
            raise ParameterError("a discrete privacy-loss law needs at least one positive mass")

    # the Q-masses and the cumulative sums are formed when first read: a staged chunk's
    # composed law is often only re-centred and read cell by cell (:meth:`cell_masses`),
    # and four cumulative sums of a million-point window cost 14 ms a law (a subsampled
    # Laplace at delta = 0.1 formed 48 such laws, 0.69 s of a 1.4 s call)
    @cached_property
    def q_masses(self) -> np.ndarray:
        """The Q-masses m_j e^{-x_j}."""
        return self.masses * np.exp(-self.positions)

    @cached_property
    def _cum_p(self) -> np.ndarray:
        return _prefix_sums(self.masses)

    @cached_property
    def _tail_p(self) -> np.ndarray:
        return _suffix_sums(self.masses)

    @cached_property
    def _cum_q(self) -> np.ndarray:
        return _prefix_sums(self.q_masses)

    @cached_property
    def _tail_q(self) -> np.ndarray:
        return _suffix_sums(self.q_masses)

    # identity semantics: instances are not interchangeable cache keys
    __hash__ = object.__hash__

    @property
    def support(self) -> tuple[float, float]:
        """(first position, last position), or +inf as the upper end when there is mass at +inf."""
        return float(self.positions[0]), (np.inf if self.infinity > 0 else float(self.positions[-1]))

    @property
    def atoms(self) -> tuple[float, ...]:
        """Always empty: the grid atoms are treated as a continuous law when choosing a grid phase."""
        # dense atoms on a fine grid behave like a continuous law for grid-phase purposes
        return ()

    def distribution_functions(self, ell) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(Pr_P(L <= l), Pr_P(L > l), Pr_Q(L <= l), Pr_Q(L > l))."""
        ell = np.asarray(ell, dtype=float)
        count = np.searchsorted(self.positions, ell, side="right")
        return (
            self._cum_p[count],
            self._tail_p[count] + self.infinity,
            self._cum_q[count],
            self._tail_q[count],
        )

    def cell_masses(self, edges) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(P-mass, Q-mass) of each cell (edges[i], edges[i+1]], summed over the cell's
        own atoms (not a difference of cumulative sums, which would carry the rounding of
        everything below the cell), and bounds on their rounding: a sum of k positive
        terms is within k ulps, and each Q-mass m e^{-x} within 2 more (times the model's
        safety factor, :mod:`.rounding`)."""
        edges = np.asarray(edges, dtype=float)
        index = np.searchsorted(self.positions, edges, side="right")
        counts = np.diff(index)
        filled = counts > 0
        starts = np.minimum(index, self.positions.size)
        m = np.where(filled, np.add.reduceat(np.append(self.masses, 0.0), starts)[:-1], 0.0)
        n = np.where(filled, np.add.reduceat(np.append(self.q_masses, 0.0), starts)[:-1], 0.0)
        unit = 8.0 * 2.0**-53
        return m, n, unit * (counts + 1) * m + 1e-300, unit * (counts + 3) * n + 1e-300

    def cdf(self, ell, under: str = "P") -> np.ndarray:
        """Pr(L <= l) under P (``under="P"``) or under the tilted Q-measure."""
        cdf_p, _, cdf_q, _ = self.distribution_functions(ell)
        return cdf_p if under == "P" else cdf_q

    def sf(self, ell, under: str = "P") -> np.ndarray:
        """Pr(L > l) under P (including the mass at +inf) or under the Q-measure."""
        _, sf_p, _, sf_q = self.distribution_functions(ell)
        return sf_p if under == "P" else sf_q

    def quantile(self, level: float) -> float:
        """Smallest position whose cumulative P-mass is >= ``level`` times the total
        P-mass (the mass at +inf included in the total)."""
        total = self._cum_p[-1] + self.infinity
        index = int(np.searchsorted(self._cum_p[1:], level * total, side="left"))
        return float(self.positions[min(index, self.positions.size - 1)])

    def lower_quantile(self, tail: float) -> float:
        """A point just (1e-12) below the first position whose cumulative P-mass exceeds
        ``tail``, so that Pr_P(L <= point) <= tail."""
        index = int(np.searchsorted(self._cum_p[1:], tail, side="right"))
        return float(self.positions[min(index, self.positions.size - 1)] - 1e-12)

    def upper_quantile(self, tail: float) -> float:
        """First position above which the finite P-mass is <= ``tail``; the last position
        when the mass at +inf alone exceeds ``tail``."""
        if self.infinity > tail:
            return float(self.positions[-1])
        index = int(np.searchsorted(-self._tail_p[1:], -tail, side="left"))
        return float(self.positions[min(index, self.positions.size - 1)])

    def quantiles(self, levels=(), lower_tails=(), upper_tails=()):
        """:meth:`quantile`, :meth:`lower_quantile` and :meth:`upper_quantile` at several
        arguments (the interface of :meth:`PrivacyLoss.quantiles`)."""
        return (
            tuple(self.quantile(v) for v in levels),
            tuple(self.lower_quantile(v) for v in lower_tails),
            tuple(self.upper_quantile(v) for v in upper_tails),
        )


def _prefix_sums(values: np.ndarray) -> np.ndarray:
    """[0, v_0, v_0 + v_1, ..., sum v]: entry k is the sum of the first k values."""
    return np.concatenate([[0.0], np.cumsum(values)])


def _suffix_sums(values: np.ndarray) -> np.ndarray:
    """[sum v, ..., v_{n-1}, 0]: entry k is the sum of the values from k on."""
    return np.concatenate([np.cumsum(values[::-1])[::-1], [0.0]])
