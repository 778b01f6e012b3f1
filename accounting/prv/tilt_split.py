"""A tilted composition of one measure, split by the number of its rare large losses.

Why.  Tilting by e^{theta x} (:mod:`.tilt`) weights one step's largest losses by
e^{theta x}: at small q and many steps the tilted law then carries a few of them, each up
to the top of the one-step support.  The window is cut where the tilted mass beyond it is
at most tail / S(floor), so it must hold many such losses: sigma = 0.6, q = 1e-6, T = 1e7
at delta = 1e-10 composed its upper chain tilted at 21.4 on a window 13.5 nats wide (10M
points in long double, 1.9 s) for an eps of 0.178, because the tilted law has about
Poisson(0.12) losses above 0.1 nats.

How.  Split the measure at a grid point c into B (its masses at or below c) and R (those
above), omega = B + R.  Composition is bilinear, so

    omega^{*T} = sum_k C(T, k) B^{*(T-k)} * R^{*k}.

The terms k <= K are kept, M = sum_{k <= K} C(T, k) B^{*(T-k)} * R^{*k}, and M is at most
omega^{*T} entry by entry.  The profile is linear in the measure, so

* the lower profile of M is a lower bound (a sub-measure);
* the upper profile of M plus the mass of the dropped terms is an upper bound (a
  measure's profile is at most its mass): that mass goes to +inf.  It is
  sum_{k > K} C(T, k) |B|^{T-k} rho^k <= max(1, |B|)^T sum_{k > K} x^k / k! <=
  max(1, |B|)^T x^{K+1} / (K+1)! / (1 - x / (K + 2)) with x = T rho, rho = R's mass
  (an upper measure's masses can sum to a little over 1: its error cover).  For each K
  of 1 to ``_MAX_TERMS``, c is the lowest point that keeps this within
  ``_DROPPED_SHARE`` of the tail, and the K whose window is narrowest is taken.

Everything is tilted as in :func:`.tilt.compose_tilted` (the same normalisation Z of the
whole measure, so M's entries untilt by the same S(y)), and M's spectrum is formed as
B^(T-K) sum_{k <= K} C(T, k) B^(K-k) R^k (hats: transforms): one power and K + 1 products.
Term k lies within B^{*(T-k)}'s Chernoff window shifted by k times R's support, so its
tilted mass beyond y is at most C(T, k) rho~^k e^{(T-k) K_B(lam) - lam (y - k r)} (lam > 0,
r the top of R's support; below the window lam < 0 and r its bottom), with K_B the
cumulant of the tilted bulk (:func:`.compose._log_mgf`, an upper bound).  The window is
the union of the terms' windows at the tilted tail, shared among them; these bounds are
also the tilted masses beyond it, which :func:`.tilt.compose_tilted` uses as it uses the
whole law's.  With R's losses taken out, the bulk's window is narrow and the terms only
add K times R's reach: 2.0 nats for that call (c = 0.1, K = 1), against 13.5.

Round-off.  A term's transform carries the power's relative error, about T u
(:func:`.compose.roundoff_model`), so the spectrum's error at a frequency is about T u
times sum_k |term k| there, not T u |M^|.  Summed over the frequencies, term k weighs
about C(T, k) (rho~ / |B~|)^k times term 0 (|R^| <= rho~; sum |B^|^{T-k} over sum
|B^|^T is about sqrt(T / (T - k)) for a Gaussian-like spectrum, which the model's factor
4 covers), whose peak is at most M's, so the allowance is the model at M's largest entry
times sum_{k <= K} (T rho~ / |B~|)^k / k!  (1.13 for that call).  The model itself is the one :mod:`.compose` checks against mpmath references.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import fft as sp_fft

from dpforge.accounting.prv.compose import (
    _U,
    _chernoff_lambdas,
    _kept_frequencies,
    _log_mgf,
    _place,
    _power,
    refine_lambdas,
    roundoff_model,
)
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.accounting.prv.limits import check_grid
from dpforge.errors import LimitError

#: the split is taken when its window is at most this share of the whole measure's
_SPLIT_SHARE = 0.5
#: the dropped terms' untilted mass is kept within this share of the truncation tail
_DROPPED_SHARE = 0.1
#: at most this many large losses are kept (K)
_MAX_TERMS = 3
#: relative margin on a computed sum of non-negative masses (n u for n up to 1e7 entries)
_SUM_MARGIN = 1e-8
#: added to each term's log coefficient (the rounding of log C(T, k) and of (T - k) K_B)
_LOG_MARGIN = 1e-9
#: the split is tried only where the whole measure's window holds at least this many points
_MIN_POINTS = 2**18


def worth_splitting(points: float) -> bool:
    """Whether a split is tried for a whole window of ``points`` points: at least
    ``_MIN_POINTS`` (below, the plan's own passes over the measure cost about what they
    could save) and within the memory budget (where the whole window is refused, so is
    the split: it shortens a composition, it does not take on one the engine would not
    attempt; sigma = 1.18, q = 1.1e-9, T = 22 at delta = 1.8e-267 composed split windows
    of 18M points for 96 s, where the whole one's refusal ended the call flagged in 31 s)."""
    if points < _MIN_POINTS:
        return False
    try:
        check_grid(points, "the FFT window of the composition")
    except LimitError:
        return False
    return True


@dataclass(frozen=True)
class SplitComposition:
    """M~ (the kept terms, tilted) on its window: what :func:`.tilt.compose_tilted` reads."""

    positions: np.ndarray
    masses: np.ndarray  # tilted entries of M (aliased FFT output)
    grid_size: int
    above_tilted: float  # M~'s mass above and below the window
    below_tilted: float
    dropped: float  # untilted mass of the dropped terms (at +inf in the upper profile)
    roundoff: float  # per-entry allowance in tilted units
    terms: int  # K
    split: float  # c


def dropped_mass(count: int, rho: float, terms: int, bulk: float = 1.0) -> float:
    """An upper bound on sum_{k > K} C(T, k) b^{T-k} rho^k for T = ``count``, K = ``terms``
    and any b <= ``bulk`` (module docstring; inf where T rho >= K + 2)."""
    x = count * rho * (1.0 + _SUM_MARGIN)
    if not x < terms + 2:
        return math.inf
    growth = math.exp(count * math.log1p(max(bulk - 1.0, 0.0)))
    return growth * x ** (terms + 1) / math.factorial(terms + 1) / (1.0 - x / (terms + 2))


@dataclass(frozen=True)
class _Plan:
    """One split: where, how many terms, the bulk's exponents and cumulants, the window."""

    index: int  # last entry of B
    terms: int
    rho: float  # untilted mass of R
    bulk_mass: float  # untilted mass of B (an upper bound)
    rho_tilted: float  # its tilted mass (an upper bound)
    log_terms: np.ndarray  # log C(T, k) rho~^k, k = 0..K
    lam: np.ndarray
    bulk_cumulant: np.ndarray  # K_B at lam (tilted bulk)
    reach: tuple[float, float]  # R's lowest and highest occupied positions
    bottom: float
    top: float


def _log_binomial(count: int, k: int) -> float:
    """log C(T, k), from the exact integer (lgamma differences lose 1.5e-6 at T = 1e9)."""
    return math.log(math.comb(count, k))


def _term_log_masses(plan_lam: np.ndarray, bulk: np.ndarray, log_terms: np.ndarray, count: int, reach: float, position: float) -> np.ndarray:
    """log of each term's Chernoff bound at ``position``, per exponent: log C(T, k) rho~^k
    + (T - k) K_B(lam) - lam (position - k reach), shape (K + 1, exponents)."""
    k = np.arange(log_terms.size)[:, None]
    return log_terms[:, None] + (count - k) * bulk[None, :] - plan_lam[None, :] * (position - k * reach)


def _side_edge(plan_lam: np.ndarray, bulk: np.ndarray, log_terms: np.ndarray, count: int, reach: float, level: float, upper: bool) -> float:
    """The window's top (``upper``) or bottom: the furthest of the terms' own edges, each
    the best over the exponents of that side of where its bound reaches e^level."""
    side = plan_lam > 0 if upper else plan_lam < 0
    lam, cumulant = plan_lam[side], bulk[side]
    k = np.arange(log_terms.size)[:, None]
    with np.errstate(invalid="ignore"):
        edges = (log_terms[:, None] + (count - k) * cumulant[None, :] + lam[None, :] * k * reach - level) / lam[None, :]
    edges = np.where(np.isfinite(edges), edges, np.inf if upper else -np.inf)
    per_term = np.min(edges, axis=1) if upper else np.max(edges, axis=1)
    return float(np.max(per_term) if upper else np.min(per_term))


def _beyond(plan: _Plan, count: int, position: float, upper: bool) -> float:
    """A bound on M~'s tilted mass above (``upper``) or below ``position``: the terms'
    Chernoff bounds, each at its best exponent, summed."""
    side = plan.lam > 0 if upper else plan.lam < 0
    reach = plan.reach[1] if upper else plan.reach[0]
    logs = _term_log_masses(plan.lam[side], plan.bulk_cumulant[side], plan.log_terms, count, reach, position)
    return float(np.sum(np.exp(np.min(logs, axis=1))))


def _plan(
    measure: GridMeasure, suffix: np.ndarray, count: int, tilted: np.ndarray, tail: float, log_tail: float, terms: int
) -> _Plan | None:
    """The split for K = ``terms``: c the lowest entry whose untilted mass above keeps the
    dropped terms within their share of ``tail`` (``suffix``: the untilted mass at and
    above each entry); None where nothing lies above it, or where the allowance's growth
    would pass 1e6 (B~ all but empty)."""
    budget = _DROPPED_SHARE * tail
    # the largest rho the dropped terms allow: x^{K+1} / (K+1)! / (1 - x / (K+2)) <= budget
    # holds for x <= ((K+1)! budget / 2)^{1/(K+1)} when that is at most (K + 2) / 2
    x = min((math.factorial(terms + 1) * budget / 2.0) ** (1.0 / (terms + 1)), 0.5 * (terms + 2))
    allowed = np.flatnonzero(suffix * count * (1.0 + _SUM_MARGIN) <= x)
    if allowed.size == 0 or count <= terms:
        return None
    first_tail = int(allowed[0])  # R: entries from here up
    occupied = np.flatnonzero(measure.masses[first_tail:] > 0)
    if occupied.size == 0 or first_tail == 0:
        return None
    rho = float(suffix[first_tail])
    # untilted |B| from above (a cumulative sum of n terms is within n u of itself)
    bulk_mass = (float(suffix[0]) - rho) * (1.0 + 4.0 * suffix.size * _U)
    if not dropped_mass(count, rho, terms, bulk_mass) <= budget:
        return None
    positions = measure.positions
    reach = (float(positions[first_tail + occupied[0]]), float(positions[first_tail + occupied[-1]]))
    bulk = GridMeasure(measure.first_index, tilted[:first_tail], measure.step, measure.shift)
    rho_tilted = float(np.sum(tilted[first_tail:])) * (1.0 + _SUM_MARGIN)
    if not rho_tilted > 0.0:  # R's tilted masses underflowed: nothing to split off
        return None
    if not count * rho_tilted / float(np.sum(tilted[:first_tail])) < 1e6:
        return None  # the round-off growth (split_composition) would pass any use
    log_terms = np.array([_log_binomial(count, k) + k * math.log(rho_tilted) + _LOG_MARGIN for k in range(terms + 1)])
    level = log_tail - math.log(terms + 1)
    lam = _chernoff_lambdas([(bulk, count)], math.exp(max(log_tail, -700.0)))  # a start only

    def bulk_at(extra: np.ndarray) -> np.ndarray:
        return count * _log_mgf(bulk, extra)

    lam, _ = refine_lambdas(lam, bulk_at(lam), level, bulk_at)
    cumulant = _log_mgf(bulk, lam)  # per step, for every term's own count
    top = _side_edge(lam, cumulant, log_terms, count, reach[1], level, upper=True)
    bottom = _side_edge(lam, cumulant, log_terms, count, reach[0], level, upper=False)
    if not (math.isfinite(top) and math.isfinite(bottom)) or top < bottom:
        return None
    return _Plan(first_tail - 1, terms, rho, bulk_mass, rho_tilted, log_terms, lam, cumulant, reach, bottom, top)


def split_composition(
    measure: GridMeasure, count: int, tilted: np.ndarray, tail: float, log_tail: float, whole: tuple[float, float], extended: bool
) -> SplitComposition | None:
    """M~ for the one measure ``measure`` composed ``count`` times, tilted (``tilted``: its
    tilted masses, summing to 1) and cut at the tilted tail e^``log_tail``, where a split
    with K of 1 to ``_MAX_TERMS`` gives a window at most ``_SPLIT_SHARE`` of ``whole``
    (the whole measure's bottom and top); else None (module docstring)."""
    suffix = np.cumsum(measure.masses[::-1])[::-1]  # untilted mass at and above each entry
    plans = [p for terms in range(1, _MAX_TERMS + 1) if (p := _plan(measure, suffix, count, tilted, tail, log_tail, terms)) is not None]
    if not plans:
        return None
    plan = min(plans, key=lambda p: p.top - p.bottom)
    if plan.top - plan.bottom > _SPLIT_SHARE * (whole[1] - whole[0]):
        return None
    step = measure.step
    check_grid((plan.top - plan.bottom) / step + 3, "the FFT window of the composition")
    size = sp_fft.next_fast_len(int(math.ceil((plan.top - plan.bottom) / step)) + 3, real=True)
    real = np.longdouble if extended else np.float64
    split = plan.index + 1
    bulk_masses, tail_masses = tilted[:split], tilted[split:]
    centre = int(round(GridMeasure(measure.first_index, bulk_masses, step).mean_index()))
    base = count * (centre * step - measure.shift)
    rows = np.zeros((2, size), dtype=real)
    _place(rows[0], bulk_masses, measure.first_index - centre)
    _place(rows[1], tail_masses, measure.first_index + split - centre)
    bulk_spectrum, tail_spectrum = sp_fft.rfft(rows, axis=1)
    del rows
    terms = plan.terms
    bulk_tilted = float(np.sum(bulk_masses))  # |B~|
    # frequencies where B^(T-K) is negligible are set to 0 (.compose._kept_frequencies);
    # there |sum_k C(T, k) B^(K-k) R^k| <= sum_k C(T, k) |B~|^(K-k) rho~^k, which scales
    # what dropping them can move an entry
    keep, pruned = _kept_frequencies(bulk_spectrum[None, :], np.array([count - terms]), size, extended)
    polynomial_bound = sum(math.comb(count, k) * bulk_tilted ** (terms - k) * plan.rho_tilted**k for k in range(terms + 1))
    pruned *= polynomial_bound * (1.0 + _SUM_MARGIN)
    bulk_spectrum, tail_spectrum = bulk_spectrum[keep], tail_spectrum[keep]
    # sum_k C(T, k) B^(K-k) R^k, then times B^(T-K)
    polynomial = np.zeros_like(bulk_spectrum)
    bulk_power = np.ones_like(bulk_spectrum)
    for k in range(terms, -1, -1):  # k = K .. 0: B^(K-k) grows as k falls
        polynomial += real(math.comb(count, k)) * bulk_power * _power(tail_spectrum, k)
        bulk_power *= bulk_spectrum
    spectrum = np.zeros(size // 2 + 1, dtype=polynomial.dtype)
    spectrum[keep] = _power(bulk_spectrum, count - terms) * polynomial
    del bulk_spectrum, tail_spectrum, polynomial, bulk_power
    composed = sp_fft.irfft(spectrum.astype(complex) if extended else spectrum, size)
    first = int(math.floor((plan.bottom - base) / step))
    offsets = np.arange(first, first + size)
    positions = base + offsets * step
    masses = composed[offsets % size]
    high, low = positions[-1] + 0.5 * step, positions[0] - 0.5 * step
    ratio = count * plan.rho_tilted / bulk_tilted
    growth = sum(ratio**k / math.factorial(k) for k in range(terms + 1))
    model = roundoff_model(count, size, extended) * float(masses.max()) * growth
    return SplitComposition(
        positions=positions,
        masses=masses,
        grid_size=size,
        above_tilted=_beyond(plan, count, high, upper=True),
        below_tilted=_beyond(plan, count, low, upper=False),
        dropped=dropped_mass(count, plan.rho, terms, plan.bulk_mass),
        roundoff=max(2.0 * max(-float(masses.min()), 0.0), model) + pruned,
        terms=terms,
        split=float(measure.positions[plan.index]),
    )
