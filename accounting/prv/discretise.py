"""Certified grid discretisations of a privacy-loss law (both bounds on one grid).

Notation: L is the privacy loss under P (law ``omega``), its hockey-stick profile is
delta(eps) = E_P[(1 - e^{eps - L})_+] (plus the mass at L = +inf).  For any two
non-negative measures with delta_a <= delta_b at every eps, composing each with the same
non-negative measure keeps the order, because
delta_{a*nu}(eps) = integral of delta_a(eps - l) d nu(l).  So a per-step pessimistic
(resp. optimistic) measure composes into a pessimistic (resp. optimistic) one.

* Upper (pessimistic) measure: "connect the dots" (Doroshenko, Ghazi, Kamath, Kumar,
  Manurangsi 2022).  The P-mass m and Q-mass n = E_P[e^{-L}] of each cell (l_k, l_{k+1}]
  are split between its two ends so that both are preserved.  Its profile equals the
  true one at every grid point and is the chord (linear in e^eps) in between, which
  lies above the convex true profile.  Mass below the grid is rounded up to its first
  point; mass above the grid is moved to +inf.
* Lower (optimistic) measure: post-processing.  Quantising the privacy loss into bins
  B_k is a post-processing of the mechanism, so the pair of bin probabilities
  (P(B_k), Q(B_k)) is dominated by the true pair (data-processing inequality).  Its
  loss on bin k is v_k = log P(B_k)/Q(B_k).  Each atom is then moved *down* onto the
  grid shifted by a common offset c >= 0 (rounding down only lowers the profile).  Mass
  below the first bin is dropped (this only lowers the profile).

Both constructions are exact up to floating-point rounding of the distribution
functions; the composition step accounts for aliasing and FFT round-off.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numba
import numpy as np

from dpforge.accounting.prv import rounding
from dpforge.accounting.prv.limits import check_grid
from dpforge.mechanisms.pairs import PrivacyLoss


@dataclass(frozen=True)
class GridMeasure:
    """Non-negative masses at positions ``(first_index + j) * step - shift``, plus an atom at +inf."""

    first_index: int
    masses: np.ndarray
    step: float
    shift: float = 0.0
    infinity_mass: float = 0.0

    @property
    def positions(self) -> np.ndarray:
        """Loss values of the masses: (first_index + j) * step - shift, j = 0..len(masses)-1."""
        return (self.first_index + np.arange(self.masses.size)) * self.step - self.shift

    @property
    def total_mass(self) -> float:
        """Sum of the finite masses (the atom at +inf not included)."""
        return float(self.masses.sum())

    def mean_index(self) -> float:
        """Mass-weighted mean grid index of the finite masses (``first_index`` when the
        measure is empty)."""
        return float(self.first_index + _mean_offset(self.masses))


@numba.njit(cache=True)
def _mean_offset(masses: np.ndarray) -> float:  # pragma: no cover - jitted
    """sum_j j m_j / sum_j m_j (0 for an empty measure)."""
    total = 0.0
    weighted = 0.0
    for j in range(masses.size):
        total += masses[j]
        weighted += j * masses[j]
    return weighted / total if total > 0 else 0.0


def _differences(cdf: np.ndarray, sf: np.ndarray) -> np.ndarray:
    """Interval masses from the CDF in the lower half and from the survival function in
    the upper half (no cancellation in either tail)."""
    masses = np.where(cdf[1:] <= 0.5, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:])
    return np.maximum(masses, 0.0)


def _functions(loss: PrivacyLoss, points: np.ndarray) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The four distribution functions at ``points`` and their modelled errors (:mod:`.rounding`)."""
    points = np.ascontiguousarray(points, dtype=float)
    values = tuple(np.asarray(v, dtype=float) for v in loss.distribution_functions(points))
    return values, rounding.function_errors(loss, points, values)


def _cell_masses(loss: PrivacyLoss, edges: np.ndarray) -> tuple[np.ndarray, ...]:
    """(Pr_P(L in cell), Pr_Q(L in cell), bounds on their errors, and the parts of those
    bounds shared by neighbouring cells) for the cells (edges[i], edges[i+1]]: a finite
    discrete law sums its atoms cell by cell (nothing shared), a mechanism's law
    differences its distribution functions (:func:`_differences_with_errors`)."""
    if hasattr(loss, "cell_masses"):
        m, n, error_m, error_n = loss.cell_masses(edges)
        return m, n, error_m, error_n, np.zeros(m.size + 1), np.zeros(m.size + 1)
    (cdf_p, sf_p, cdf_q, sf_q), (e_cdf_p, e_sf_p, e_cdf_q, e_sf_q) = _functions(loss, edges)
    m, error_m, shared_m = _differences_with_errors(cdf_p, sf_p, e_cdf_p, e_sf_p)
    n, error_n, shared_n = _differences_with_errors(cdf_q, sf_q, e_cdf_q, e_sf_q)
    return m, n, error_m, error_n, shared_m, shared_n


def _end_masses(loss: PrivacyLoss, low: float, high: float) -> tuple[float, float, float, float, float, float]:
    """(Pr_P(L <= low) and its error, Pr_P(L > high), Pr_Q(L > high) and their errors)."""
    values, errors = _functions(loss, np.array([low, high]))
    return (
        float(values[0][0]), float(errors[0][0]),
        float(values[1][1]), float(errors[1][1]),
        float(values[3][1]), float(errors[3][1]),
    )


def _base_cell_masses(loss: PrivacyLoss, edges: np.ndarray) -> tuple[np.ndarray, ...]:
    """(C-mass, S-mass of each cell (edges[i], edges[i+1]], their error bounds, the parts
    of those shared by neighbouring cells (:func:`_differences_with_errors`), and
    Pr_C(L > top), Pr_S(L > top) with theirs) of a subsampled law, C = Q0 and S = P0
    (:meth:`PrivacyLoss.base_distribution_functions`)."""
    (c_le, c_gt, s_le, s_gt), (e_c_le, e_c_gt, e_s_le, e_s_gt) = rounding.base_functions_and_errors(loss, edges)
    a, error_a, shared_a = _differences_with_errors(c_le, c_gt, e_c_le, e_c_gt)
    b, error_b, shared_b = _differences_with_errors(s_le, s_gt, e_s_le, e_s_gt)
    return a, b, error_a, error_b, shared_a, shared_b, float(c_gt[-1]), float(s_gt[-1]), float(e_c_gt[-1]), float(e_s_gt[-1])


@numba.njit(cache=True)
def _differences_with_errors(le, gt, error_le, error_gt):  # pragma: no cover - jitted
    """:func:`_differences`, bounds on their errors, and the part of those bounds shared by
    neighbouring cells, in one pass.

    A cell's bound is the two differenced values' modelled errors, the subtraction's
    rounding, and what clamping a negative difference to 0 added.  Where cells c - 1 and
    c difference the same function, their common edge's value enters the first with
    sign +1 and the second with sign -1, so its error E cancels from any mix
    x m_c-1 + y m_c except for |x - y| E: ``shared[c]`` is that E (0 at the ends and
    where the function changes), and the routing's labels take it off
    (:func:`_routed_errors`).  It matters where an edge falls on a pile of mass, where the
    distribution functions are ill-conditioned: a subsampled law piles 1 - q of its mass
    at log(1 - q), and at sigma = 0.172, q = 9e-7 the phase search put an edge there
    with 1.2e-3 of modelled error, which the label holding both of its cells lost (0.25 %
    of the law's mass per step, all of it after 11,862 steps).  So the cell where the
    CDF passes 1/2 (the pile's, in that case) is also differenced with the CDF when that
    leaves the less error unshared (the absolute error model holds above 1/2 too)."""
    cells = le.size - 1
    masses = np.empty(cells)
    errors = np.empty(cells)
    shared = np.zeros(cells + 1)
    u = 1.1102230246251565e-16
    lower = np.empty(cells, dtype=np.bool_)
    for c in range(cells):
        lower[c] = le[c + 1] <= 0.5
        if c > 0 and lower[c - 1] and not lower[c]:
            # the switch to the survival function is at edge c, or at c + 1 if less is lost
            if error_le[c] + error_gt[c] > error_le[c + 1] + error_gt[c + 1]:
                lower[c] = True
    for c in range(cells):
        if lower[c]:
            difference = le[c + 1] - le[c]
            error = error_le[c + 1] + error_le[c]
            edge = error_le[c]
        else:
            difference = gt[c] - gt[c + 1]
            error = error_gt[c] + error_gt[c + 1]
            edge = error_gt[c]
        if c > 0 and lower[c] == lower[c - 1]:
            shared[c] = edge
        masses[c] = max(difference, 0.0)
        errors[c] = error + 2.0 * u * abs(difference) + max(-difference, 0.0)
    return masses, errors, shared


def _atoms_within(loss: PrivacyLoss, low: float, high: float) -> list[float]:
    """The finite atoms of the law between ``low`` and ``high``, in the law's order; both
    constructions put the grid's phase on the first of them."""
    return [a for a in loss.atoms if np.isfinite(a) and low <= a <= high]


def upper_measure(loss: PrivacyLoss, step: float, low: float, high: float, exponent: float | None = None) -> GridMeasure:
    """Connect-the-dots pessimistic measure on the grid k*step + phase, from below ``low``
    to above ``high`` (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022): each cell's P-
    and Q-mass split between its two ends, mass below the grid rounded up to its first
    point, mass above it moved to +inf.

    The phase puts a grid point on the law's first atom (Laplace, randomised response;
    0 without atoms): an atom at a cell's upper end b is kept whole at b, whereas one
    inside a cell is spread to both ends and its kink in the profile is lost (Laplace,
    b = 10, q = 1e-6, one step at delta = 1e-15: eps is the top atom to 15 digits, and
    with phase 0 the upper bound sat 1.7e-3 above it at a step of 3.2e-10).  With
    atoms whole steps apart (.components.atom_aligned_step) every atom sits on a point.

    With ``exponent`` the cells are those of :func:`graded_lattice` (whole steps wide in
    the bulk, up to ``GRADE_WIDEST`` steps in the thin tails).  The construction holds
    for any cell edges: the profile equals the true one at every edge and is the chord in
    between (a cell (a, b] puts beta = (m - n e^a) / (1 - e^{a - b}) at b and m - beta at a)."""
    atoms = _atoms_within(loss, low, high)
    phase = float(atoms[0] % step) if atoms else 0.0
    # with atoms on grid points, one more point at each end keeps an atom at an end of
    # the support off the ends of the grid whatever the rounding (the top one would go
    # to +inf)
    margin = 1 if atoms else 0
    check_grid((high - low) / step + 2 + 2 * margin, "the pessimistic grid of one step's privacy loss")
    k_lo = int(np.floor((low - phase) / step)) - margin
    k_hi = max(int(np.ceil((high - phase) / step)), k_lo + 1) + margin
    if exponent is None:
        lattice = np.arange(k_lo, k_hi + 1)
    else:
        lattice = graded_lattice(loss, step, k_lo, k_hi, phase, exponent)
    grid = lattice * step + phase
    m, n, errors, bottom, top = _upper_parts(loss, grid)
    # split each cell (l_a, l_b]: beta at l_b, alpha at l_a, preserving m and n
    excess = m - n * np.exp(grid[:-1])
    beta = np.clip(excess / (-np.expm1(-np.diff(lattice) * step)), 0.0, m)
    alpha = m - beta
    masses = np.zeros(k_hi - k_lo + 1)
    masses[lattice[:-1] - k_lo] += alpha
    masses[lattice[1:] - k_lo] += beta
    masses[0] += bottom  # everything at or below the grid, rounded up
    ceiling = min(float(grid[-1]), float(loss.support[1]))
    infinity = top + _add_cover(masses, errors, grid, lattice - k_lo, ceiling)
    return GridMeasure(k_lo, masses, step, -phase, infinity)


#: ulps by which connect the dots raises each cell's P-mass and lowers its Q-mass
_CELL_ULPS = 8.0
#: float64 machine epsilon (2^-52), as the compiled label kernels read it
_EPS = 2.220446049250313e-16


def _suffix(values: np.ndarray) -> np.ndarray:
    """sum_{k >= j} values[k] for j = 0 .. len(values) (the last is 0)."""
    return np.append(np.cumsum(values[::-1])[::-1], 0.0)


@numba.njit(cache=True)
def _telescoped(le, gt, error_le, error_gt):  # pragma: no cover - jitted
    """(cell masses, the reconstructed survival function sum_{k >= j} mass_k + gt[-1] at
    each edge j, and two parts of a bound on its error) of one measure whose cell masses
    are differences of its computed distribution functions (:func:`_differences`).  The
    differences telescope: from edge j the sum is the value that starts it (cell j's
    branch, the survival function at the top; its error is the first part, local to
    l_j) plus, at each later edge where the branch switches, both values there, and what
    clipping negative differences to 0 added (the second part, the same for every edge
    below them).  The subtractions' rounding is relative to each cell, and
    :func:`_upper_parts` covers it cell by cell."""
    cells = le.size - 1
    masses = np.empty(cells)
    survival = np.empty(cells + 1)
    local = np.empty(cells + 1)
    spread = np.empty(cells + 1)
    survival[cells] = gt[cells]
    local[cells] = error_gt[cells]
    spread[cells] = 0.0
    above = gt[cells]
    shared = 0.0
    next_lower = False  # the top value is a survival function
    for k in range(cells - 1, -1, -1):
        lower = le[k + 1] <= 0.5
        difference = le[k + 1] - le[k] if lower else gt[k] - gt[k + 1]
        mass = max(difference, 0.0)
        masses[k] = mass
        shared += mass - difference
        if lower != next_lower:
            shared += error_le[k + 1] + error_gt[k + 1]
        above += mass
        survival[k] = above
        local[k] = error_le[k] if lower else error_gt[k]
        spread[k] = shared
        next_lower = lower
    return masses, survival, local, spread


@numba.njit(cache=True)
def _profile_errors(local_1, spread_1, local_2, spread_2, survival_p, survival_q, grid, q, mode):  # pragma: no cover - jitted
    """(the errors local to each edge, zeta) of the connect-the-dots profile from two
    measures' telescoped errors (:func:`_telescoped`): mode 0 has P and Q (weights 1 and
    e^l), mode 1 a subsampled law's parts C and S in the remove direction (|e^l - 1 + q|
    and q), mode 2 in the add direction (|1 - (1 - q) e^l| and q e^l).  The shared parts
    are a share of the profile S_P - e^l S_Q (less 4 ulps of its terms) no larger than
    zeta; where the profile is not positive they join the local ones."""
    size = grid.size
    u = 1.1102230246251565e-16
    local = np.empty(size)
    zeta = 0.0
    for j in range(size):
        l = grid[j]
        if mode == 0:
            own = local_1[j] + _exp_times(l, local_2[j])
            shared = spread_1[j] + _exp_times(l, spread_2[j])
        elif mode == 1:
            weight = abs(math.expm1(l) + q)
            own = weight * local_1[j] + q * local_2[j]
            shared = weight * spread_1[j] + q * spread_2[j]
        elif l < 700.0:
            weight = abs(1.0 - (1.0 - q) * math.exp(l))
            own = weight * local_1[j] + q * _exp_times(l, local_2[j])
            shared = weight * spread_1[j] + q * _exp_times(l, spread_2[j])
        else:  # |1 - (1 - q) e^l| x <= x + e^l x, without overflow
            own = local_1[j] + _exp_times(l, local_1[j]) + q * _exp_times(l, local_2[j])
            shared = spread_1[j] + _exp_times(l, spread_1[j]) + q * _exp_times(l, spread_2[j])
        e_q = _exp_times(l, survival_q[j])
        profile = survival_p[j] - e_q - 4.0 * u * (survival_p[j] + e_q)
        if shared > 0.0 and profile > 0.0:
            zeta = max(zeta, shared / profile)
        else:
            own += shared
        local[j] = own if not math.isnan(own) else math.inf
    return local, zeta


@numba.njit(cache=True)
def _exp_times(exponent, value):  # pragma: no cover - jitted
    """e^exponent * value for value >= 0, without overflow where the product is finite."""
    if value <= 0.0:
        return 0.0
    return math.exp(exponent + math.log(value))


def _times_exp(values: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """values * e^exponents without overflow for the small values it multiplies."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(values > 0.0, np.exp(exponents + np.log(np.where(values > 0.0, values, 1.0))), 0.0)


def _upper_parts(loss, grid: np.ndarray):
    """(P- and Q-masses of the cells, a bound on the error of the connect-the-dots
    profile at each edge, the P-mass at or below the grid, the P-mass above it, both
    raised by their errors) (module .rounding).

    At an edge l_j the connect-the-dots profile is S_P(l_j) - e^{l_j} S_Q(l_j) for the
    survival functions the cell masses reconstruct (the split keeps each cell's masses;
    clipping beta only raises it), so its error is that of two survival functions, not
    the sum of the cells' errors.  For a subsampled law the masses are mixed from the
    parts C = Q0 and S = P0, and the profile is (1 - q - e^l) S_C + q S_S (remove) or
    (1 - (1 - q) e^l) S_C - q e^l S_S (add): C's error enters scaled by |1 - q - e^l|,
    small where the losses are.  The errors local to each edge are returned for
    :func:`_add_cover`; those shared by every edge below a branch switch (or a clipped
    difference) are a small share of the profile there, and the whole measure is scaled
    by 1 + zeta, zeta their largest share, which multiplies the profile by that.  What
    rounds cell by cell (each difference, the mixture,
    the split of a cell between its ends) is a few ulps of the cell: every cell's P-mass
    is raised and its Q-mass lowered by ``_CELL_ULPS`` ulps, which only raises its
    profile.  A finite discrete law sums its atoms cell by cell, so its cells' errors add
    up."""
    grid = np.ascontiguousarray(grid, dtype=float)
    u = rounding.U
    if hasattr(loss, "cell_masses"):
        m, n, error_m, error_n = loss.cell_masses(grid)
        below, below_error, above, above_error, above_q, above_q_error = _end_masses(loss, float(grid[0]), float(grid[-1]))
        local = _suffix(error_m) + above_error + _times_exp(_suffix(error_n) + above_q_error, grid)
        zeta = 0.0
    elif isinstance(loss, PrivacyLoss) and loss.sampling_rate < 1.0:
        q = float(loss.sampling_rate)
        (c_le, c_gt, s_le, s_gt), (e_c_le, e_c_gt, e_s_le, e_s_gt) = rounding.base_functions_and_errors(loss, grid)
        a, survival_c, local_c, spread_c = _telescoped(c_le, c_gt, e_c_le, e_c_gt)
        b, survival_s, local_s, spread_s = _telescoped(s_le, s_gt, e_s_le, e_s_gt)
        mixed = (1.0 - q) * a + q * b
        survival_mixed = (1.0 - q) * survival_c + q * survival_s
        if loss.direction == "remove":
            m, n, mode = mixed, a, 1
            survival_p, survival_q = survival_mixed, survival_c
            below = (1.0 - q) * c_le[0] + q * s_le[0]
            below_error = (1.0 - q) * e_c_le[0] + q * e_s_le[0]
            above, above_error = (1.0 - q) * c_gt[-1] + q * s_gt[-1], (1.0 - q) * e_c_gt[-1] + q * e_s_gt[-1]
        else:
            m, n, mode = a, mixed, 2
            survival_p, survival_q = survival_c, survival_mixed
            below, below_error = c_le[0], e_c_le[0]
            above, above_error = c_gt[-1], e_c_gt[-1]
        local, zeta = _profile_errors(local_c, spread_c, local_s, spread_s, survival_p, survival_q, grid, q, mode)
    else:
        (cdf_p, sf_p, cdf_q, sf_q), (e_cdf_p, e_sf_p, e_cdf_q, e_sf_q) = _functions(loss, grid)
        m, survival_p, local_p, spread_p = _telescoped(cdf_p, sf_p, e_cdf_p, e_sf_p)
        n, survival_q, local_q, spread_q = _telescoped(cdf_q, sf_q, e_cdf_q, e_sf_q)
        local, zeta = _profile_errors(local_p, spread_p, local_q, spread_q, survival_p, survival_q, grid, 1.0, 0)
        below, below_error, above, above_error = cdf_p[0], e_cdf_p[0], sf_p[-1], e_sf_p[-1]
    local[0] += below_error
    raise_p, lower_q = 1.0 + _CELL_ULPS * u, 1.0 - _CELL_ULPS * u
    # the shared errors are a share of the profile no larger than zeta: scaling the
    # measure by 1 + zeta multiplies its profile by that
    scale = 1.0 + zeta
    return (
        m * (raise_p * scale),
        n * (lower_q * scale),
        local,
        float((below + below_error) * raise_p * scale),
        float((above + above_error) * scale),
    )


def _add_cover(masses: np.ndarray, errors: np.ndarray, grid: np.ndarray, index: np.ndarray, ceiling: float) -> float:
    """Add to ``masses`` (at positions ``index`` of the grid points) a cover of the
    profile's errors: for E the errors' running maximum from above, P-mass
    d_i = (E_i - E_i+1) / (1 - e^{l_i - l_i+1}) at the next grid point l_i+1, so that
    the cover's profile at l_j is at least sum_{i >= j} d_i (1 - e^{l_i - l_i+1}) = E_j.
    The true profile is convex in e^eps and the measure's is linear in e^eps between
    grid points, so the bound holds between them too.  Each point's cover sits on the
    next point, where its error is (a cover further up would reach queries far above
    the law's errors: one step of sigma = 1, q = 1e-6 has errors of 1e-21, and at
    T = 1e5 a cover 1/16 nat up added 1.6e-15 to delta = 1e-15).  Points above
    ``ceiling`` (the law's largest loss, up to rounding) put theirs at +inf: the law has
    no mass there, so their errors are only the floor; a point on the largest atom (which
    may come out just below it) covers its error one point up (at +inf, its 7e-15 a step
    made Laplace b = 1, q = 1, T = 1e5 uncertifiable at delta = 1e-10).  Returns the mass
    at +inf."""
    return _cover(masses, errors, grid, np.ascontiguousarray(index, dtype=np.int64), ceiling + 64.0 * rounding.U * max(1.0, abs(ceiling)))


@numba.njit(cache=True)
def _cover(masses, errors, grid, index, ceiling):  # pragma: no cover - jitted
    """:func:`_add_cover` in one backward pass."""
    size = grid.size
    envelope = 0.0
    infinite = 0.0
    for i in range(size - 1, -1, -1):
        if not errors[i] <= math.inf:  # NaN
            return math.inf
        higher = max(envelope, errors[i])
        step = higher - envelope
        envelope = higher
        if step <= 0.0:
            continue
        if math.isinf(step):
            return math.inf
        if i < size - 1 and grid[i] <= ceiling:
            masses[index[i + 1]] += step / -math.expm1(grid[i] - grid[i + 1])
        else:
            infinite += step
    return infinite


#: the widest cell of a graded grid, in grid steps (a power of two)
GRADE_WIDEST = 64
#: the part of a uniform grid's discretisation error that the wider cells may add
GRADE_SHARE = 0.05


def graded_lattice(
    loss: PrivacyLoss, step: float, k_lo: int, k_hi: int, phase: float, exponent: float | Sequence[float]
) -> np.ndarray:
    """Lattice indices k_lo = k_0 < k_1 < ... = k_hi of cell edges k * step + phase: every
    index where the law carries weight, and only every 2nd, 4th, ... ``GRADE_WIDEST``-th
    one across its thin tails.

    Either discretisation of a cell of width w moves its mass within the cell (connect
    the dots spreads it to both ends; the optimistic quantiser pools it), and to leading
    order the composed profile's error grows like the sum over cells of w^2 times the
    cell's weight (Doroshenko et al. 2022, section 5: the error is O(h^2) per step).  The
    weight of a coarse cell i (``GRADE_WIDEST`` steps, P-mass m_i) is the larger of m_i and
    its mass tilted at ``exponent``, m_i e^{lambda x_i+1} / sum_j m_j e^{lambda x_j}: at the
    queried eps the composed profile reads the one-step law tilted by about its saddle
    exponent.  Each coarse cell is cut into k_i (a power of two) equal cells, the fewest
    with (GRADE_WIDEST / k_i)^2 w_i <= GRADE_SHARE / (coarse cells), so the wider cells
    add at most ``GRADE_SHARE`` of a uniform grid's error.  Only tightness depends on
    this: both constructions are certified for any edges.

    ``exponent`` may be several exponents (one measure read at several eps, as a prefix
    table's rows are: :mod:`.prefixes`): a cell's weight is then the largest of its
    P-mass and its masses tilted at each, so its cells are at least as fine as those of
    any one of them."""
    widest = GRADE_WIDEST
    if k_hi - k_lo < 8 * widest:
        return np.arange(k_lo, k_hi + 1)
    coarse = np.append(np.arange(k_lo, k_hi, widest), k_hi)
    x = coarse * step + phase
    cdf_p, sf_p, _, _ = loss.distribution_functions(x)
    exponents = np.atleast_1d(np.asarray(exponent, dtype=float)).ravel()
    return _graded_edges(coarse, x, cdf_p, sf_p, np.ascontiguousarray(exponents), widest, GRADE_SHARE)


@numba.njit(cache=True)
def _graded_edges(coarse, x, cdf_p, sf_p, exponents, widest, share):  # pragma: no cover - jitted
    """:func:`graded_lattice` from the distribution function at the coarse edges ``x``
    (lattice indices ``coarse``): each coarse cell's weight w (its P-mass, or its mass
    tilted at one of ``exponents`` when larger), then 2^j equal pieces with j the smallest
    for which (width / 2^j)^2 w <= share / (coarse cells), at most log2(widest)."""
    cells = coarse.size - 1
    mass = np.empty(cells)
    total = 0.0
    for i in range(cells):
        if cdf_p[i + 1] <= 0.5:
            m = cdf_p[i + 1] - cdf_p[i]
        else:
            m = sf_p[i] - sf_p[i + 1]
        mass[i] = max(m, 0.0)
        total += mass[i]
    weight = np.empty(cells)
    for i in range(cells):
        weight[i] = mass[i] / max(total, 1e-300)
    for exponent in exponents:
        if not exponent > 0:
            continue
        top = -np.inf
        for i in range(cells):
            if mass[i] > 0:
                top = max(top, np.log(mass[i]) + exponent * x[i])
        if top > -np.inf:
            norm = 0.0
            for i in range(cells):
                if mass[i] > 0:
                    norm += np.exp(np.log(mass[i]) + exponent * x[i] - top)
            log_norm = top + np.log(norm)
            for i in range(cells):
                if mass[i] > 0:
                    tilted = np.exp(min(np.log(mass[i]) + exponent * x[i + 1] - log_norm, 0.0))
                    weight[i] = max(weight[i], tilted)
    levels = 0
    while (1 << levels) < widest:
        levels += 1
    pieces = np.empty(cells, dtype=np.int64)
    size = 1
    for i in range(cells):
        need = weight[i] * (widest * widest * cells / share)
        j = 0
        while j < levels and need > 4.0**j:  # smallest j with 4^j >= need
            j += 1
        pieces[i] = min(1 << j, coarse[i + 1] - coarse[i])
        size += pieces[i]
    edges = np.empty(size, dtype=np.int64)
    at = 0
    for i in range(cells):
        width = coarse[i + 1] - coarse[i]
        for k in range(pieces[i]):
            edges[at] = coarse[i] + (k * width) // pieces[i]
            at += 1
    edges[at] = coarse[cells]
    return edges


@numba.njit(cache=True)
def _sweep_forward(up: np.ndarray, down: np.ndarray) -> np.ndarray:  # pragma: no cover - jitted
    """pi balancing labels 1, 2, ... from the left (stable where cell masses rise)."""
    cells = up.size
    pi = np.zeros(cells)
    for k in range(1, cells):
        need = (1.0 - pi[k - 1]) * down[k - 1]
        if need <= 0.0:
            pi[k] = 0.0
        elif up[k] <= 0.0 or need > up[k]:
            pi[k] = 1.0
            # label k would lean down: send more of cell k-1 to label k-1 instead
            if down[k - 1] > 0.0:
                pi[k - 1] = min(1.0, max(pi[k - 1], 1.0 - up[k] / down[k - 1]))
        else:
            pi[k] = need / up[k]
    return pi


@numba.njit(cache=True)
def _sweep_backward(up: np.ndarray, down: np.ndarray, top_up: float) -> np.ndarray:  # pragma: no cover - jitted
    """pi balancing labels K, K-1, ... from the right (stable where cell masses fall)."""
    cells = up.size
    pi = np.zeros(cells)
    positive = top_up
    for k in range(cells, 0, -1):
        if down[k - 1] > 0.0:
            pi[k - 1] = min(1.0, max(0.0, 1.0 - positive / down[k - 1]))
        else:
            pi[k - 1] = 0.0
        positive = pi[k - 1] * up[k - 1]
    return pi


def _label_excess(pi: np.ndarray, up: np.ndarray, down: np.ndarray, top_up: float) -> np.ndarray:
    """pos_k - neg_k for every label k = 0..K (>= 0 means the label's loss is >= l_k)."""
    pos = np.append(pi * up, top_up)
    neg = np.concatenate([[0.0], (1.0 - pi) * down])
    return pos - neg


def _route(up: np.ndarray, down: np.ndarray, top_up: float) -> np.ndarray:
    """Split fractions pi_c of each cell (l_c, l_c+1] between labels c and c+1.

    Label k receives pi_k of cell k (losses above l_k, weight U_k = E_P[1 - e^{l_k - L};
    cell k]) and 1 - pi_k-1 of cell k-1 (losses below l_k, weight D_k-1 =
    E_P[e^{l_k - L} - 1; cell k-1]).  Its loss log P/Q is >= l_k exactly when its
    excess pi_k U_k - (1 - pi_k-1) D_k-1 is >= 0, and the excess is (to first order) the
    mass-weighted amount by which rounding the label down to l_k lowers the loss.
    A forward sweep balances labels from the left, a backward sweep from the right; the
    cells left of a split s take the forward fractions, the others the backward ones,
    with s chosen to minimise the total excess; the label at the split is tipped up if
    it would lean down.  Every label ends with excess >= 0.
    """
    forward = _sweep_forward(up, down)
    backward = _sweep_backward(up, down, top_up)
    cells = up.size
    excess_f = np.maximum(_label_excess(forward, up, down, top_up), 0.0)
    excess_b = np.maximum(_label_excess(backward, up, down, top_up), 0.0)
    # cost(s): forward labels 0..s-1, backward labels s+1..K, mismatch at label s
    before = np.concatenate([[0.0], np.cumsum(excess_f)])[: cells + 1]
    after = np.concatenate([np.cumsum(excess_b[::-1])[::-1][1:], [0.0]])
    pos = np.append(backward * up, top_up)
    neg = np.concatenate([[0.0], (1.0 - forward) * down])
    cost = before + after + np.abs(pos - neg)
    split = int(np.argmin(cost))
    pi = np.concatenate([forward[:split], backward[split:]])
    if split > 0 and neg[split] > pos[split] and down[split - 1] > 0:
        pi[split - 1] = min(1.0, 1.0 - pos[split] / down[split - 1])
    return pi


def _cell_weights(m: np.ndarray, n: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """U_c = E_P[1 - e^{t_c - L}; cell c] and D_c = E_P[e^{t_c+1 - L} - 1; cell c] for the
    label targets t (the grid points l, or l plus a slack): label k's excess
    pi_k U_k - (1 - pi_k-1) D_k-1 is >= 0 exactly when its loss is >= t_k."""
    up = np.maximum(m - n * np.exp(grid[:-1]), 0.0)
    down = np.maximum(n * np.exp(grid[1:]) - m, 0.0)
    return up, down


@numba.njit(cache=True)
def _label_slack(m, n, error_m, error_n, step, q):  # pragma: no cover - jitted
    """An estimate of the relative error of each label's loss (cells c - 1 and c feed
    label c: their errors over their masses, the P-like part's plus the Q-like part's),
    a tenth larger, at most a quarter step: a label balanced at its grid point plus this
    slack keeps its loss above the point once its masses' errors are taken off, so it
    stays on its own point.  For a subsampled law's parts (q < 1: ``m``, ``n`` are the
    C- and S-masses) the relative errors enter the loss scaled by q B/A / (1 - q + q B/A)
    (:func:`_mixture_label_losses`).  Only tightness depends on it: the labels' own
    bounds follow the routing (:func:`_label_losses`)."""
    cells = m.size
    out = np.empty(cells + 1)
    for k in range(cells + 1):
        mass_p = error_p = mass_q = error_q = 0.0
        for c in (k - 1, k):
            if 0 <= c < cells:
                mass_p += m[c]
                error_p += error_m[c]
                mass_q += n[c]
                error_q += error_n[c]
        slack = 0.0
        if mass_p > 0.0:
            slack += error_p / mass_p
        if mass_q > 0.0:
            slack += error_q / mass_q
        if q < 1.0:
            ratio = mass_q / mass_p if mass_p > 0.0 else 0.0
            slack *= q * ratio / (1.0 - q + q * ratio)
        out[k] = min(1.1 * slack, 0.25 * step)
    return out


#: entries kept by the per-law caches (a ledger of 10,000 distinct steps has 20,000 laws)
LAW_CACHE = 2**16


@functools.lru_cache(maxsize=LAW_CACHE)
def _bulk_quantiles(loss: PrivacyLoss) -> tuple[float, float, float, float]:
    """(q_0.05, q_0.95, lower 1e-6 quantile, upper 1e-4 quantile) of one step's loss under
    P, found together (cached: every grid step of every refinement asks the same law)."""
    (q05, q95), (tail_low,), (tail_high,) = loss.quantiles((0.05, 0.95), (1e-6,), (1e-4,))
    return q05, q95, tail_low, tail_high


def _choose_phase(
    loss: PrivacyLoss, step: float, low: float, high: float, candidates: int = 24, zoom: int = 0, reach: float = 4.0
) -> float:
    """Grid offset in [0, step) for the optimistic measure.

    With atoms (Laplace, randomised response) the grid is put just below an atom, so
    that atoms whole steps apart all sit (just) above grid points and cost nothing.
    Otherwise the routing leaves excess mainly where the law piles up against an end of
    its support (subsampling makes steep edges at log(1-q)), and how much depends
    sharply on where the grid falls.  The offset is chosen among ``candidates`` values
    by routing the bulk of the law (all but 1e-6 and 1e-4 of its tails, and no more than
    ``reach`` bulk widths beyond its 5 % and 95 % quantiles) on each grid;
    one evaluation of the distribution functions on a sub-grid serves every candidate.
    Each of ``zoom`` further passes tries ``candidates`` offsets between the neighbours
    of the best one so far (the excess can change tenfold within 1/200 of a step, and a
    law composed over a million steps pays it a million times).
    """
    atoms = _atoms_within(loss, low, high)
    if atoms:
        anchor = atoms[0]
        # 256 ulps of the atoms themselves (plus 1e-9 step): the grid's arithmetic rounds
        # by ulps of the positions.  It was 256 ulps of max(1, |atom|), 5.7e-14 nats, which
        # every step's atom labels lost: Laplace b = 10, q = 1e-6 (atoms at +-1e-7),
        # T = 1e5 at delta = 1e-5 stopped 1.19e-3 wide whatever the grid, now 6.2e-4.
        # Only tightness depends on it: labels are placed at or below their loss bounds
        margin = 256.0 * np.finfo(float).eps * max(abs(a) for a in atoms) + 1e-9 * step
        return float((anchor - margin) % step)
    # only laws of mechanisms are cached (a composed chunk's law is used once, and its
    # arrays must not outlive the call)
    quantiles = _bulk_quantiles if isinstance(loss, PrivacyLoss) else _bulk_quantiles.__wrapped__
    q05, q95, tail_low, tail_high = quantiles(loss)
    if q95 - q05 > 200.0 * step:
        return 0.0  # the grid resolves the law: the offset does not matter
    # the excess that depends on the offset comes from where the law is steep on the grid
    # scale (its bulk and the edges it piles against); beyond a few bulk widths past the
    # quantiles it is smooth and every offset routes it alike
    beyond = reach * (q95 - q05) + 2.0 * step
    bulk_low = max(low, tail_low, q05 - beyond)
    bulk_high = min(high, tail_high, q95 + beyond)
    if not bulk_low < bulk_high:
        # no bulk within [low, high]: a part of a composed chunk can hold almost no mass
        # (1e-21 at sigma = 0.17, q = 9e-7, T = 11862, delta = 2e-14), whose quantiles
        # cross; there is nothing for the offset to fit (the search had no points)
        return 0.0
    cells = int(np.ceil((bulk_high - bulk_low) / step)) + 2
    candidates = int(max(4, min(candidates, 60_000 // max(cells, 1))))
    sub = step / candidates
    start = bulk_low - step
    points = start + sub * np.arange((cells + 1) * candidates + 1)
    cdf_p, sf_p, cdf_q, sf_q = loss.distribution_functions(points)
    excess = _phase_excesses(points, cdf_p, sf_p, cdf_q, sf_q, candidates)
    best = start + int(np.argmin(excess)) * sub
    for _ in range(zoom):
        # offsets best - sub .. best + sub, laid out as the kernel reads them: the grid of
        # candidate c is points[c::candidates]
        offsets = best - sub + (2.0 * sub / candidates) * np.arange(candidates)
        points = (offsets[None, :] + step * np.arange(cells + 1)[:, None]).ravel()
        cdf_p, sf_p, cdf_q, sf_q = loss.distribution_functions(points)
        excess = _phase_excesses(points, cdf_p, sf_p, cdf_q, sf_q, candidates)
        best, sub = float(offsets[int(np.argmin(excess))]), 2.0 * sub / candidates
    return float(best % step)


@functools.lru_cache(maxsize=LAW_CACHE)
def _cached_phase(
    loss: PrivacyLoss, step: float, low: float, high: float, candidates: int, zoom: int, reach: float
) -> float:
    """:func:`_choose_phase` of a mechanism's law, cached (a float a key)."""
    return _choose_phase(loss, step, low, high, candidates, zoom, reach)


def _phase_excess_reference(
    points: np.ndarray, cdf_p: np.ndarray, sf_p: np.ndarray, cdf_q: np.ndarray, sf_q: np.ndarray, phase: int, candidates: int
) -> float:
    """Total label excess of routing the grid ``points[phase::candidates]`` (numpy; the
    specification :func:`_phase_excesses` compiles)."""
    idx = np.arange(phase, points.size, candidates)
    grid = points[idx]
    a_p, b_p, a_q, b_q = cdf_p[idx], sf_p[idx], cdf_q[idx], sf_q[idx]
    m, n = _differences(a_p, b_p), _differences(a_q, b_q)
    up, down = _cell_weights(m, n, grid)
    top_up = max(float(b_p[-1] - b_q[-1] * np.exp(grid[-1])), 0.0)
    pi = _route(up, down, top_up)
    return float(np.maximum(_label_excess(pi, up, down, top_up), 0.0).sum())


@numba.njit(cache=True)
def _route_compiled(up, down, top_up):  # pragma: no cover - jitted
    """:func:`_route` compiled (same steps: both sweeps, the split minimising the total
    excess, the tip at the split), in O(cells) memory."""
    cells = up.size
    forward = _sweep_forward(up, down)
    backward = _sweep_backward(up, down, top_up)
    # cost(s) = forward excess of labels < s + backward excess of labels > s + |mismatch at s|
    after = np.zeros(cells + 1)
    running = 0.0
    for k in range(cells, 0, -1):
        after[k] = running
        pos = top_up if k == cells else backward[k] * up[k]
        running += max(pos - (1.0 - backward[k - 1]) * down[k - 1], 0.0)
    after[0] = running
    best_cost = np.inf
    split = 0
    before = 0.0
    for s in range(cells + 1):
        pos = top_up if s == cells else backward[s] * up[s]
        neg = 0.0 if s == 0 else (1.0 - forward[s - 1]) * down[s - 1]
        cost = before + after[s] + abs(pos - neg)
        if cost < best_cost:
            best_cost, split = cost, s
        if s < cells:
            f_pos = forward[s] * up[s]
            f_neg = 0.0 if s == 0 else (1.0 - forward[s - 1]) * down[s - 1]
            before += max(f_pos - f_neg, 0.0)
    pi = np.empty(cells)
    for c in range(cells):
        pi[c] = forward[c] if c < split else backward[c]
    if split > 0:
        pos = top_up if split == cells else backward[split] * up[split]
        neg = (1.0 - forward[split - 1]) * down[split - 1]
        if neg > pos and down[split - 1] > 0:
            pi[split - 1] = min(1.0, 1.0 - pos / down[split - 1])
    return pi


@numba.njit(cache=True)
def _phase_excesses(points, cdf_p, sf_p, cdf_q, sf_q, candidates):  # pragma: no cover - jitted
    """For every candidate offset c, the total label excess of routing the grid
    ``points[c::candidates]``: :func:`_phase_excess_reference` for all candidates in one
    compiled pass (same steps: cell masses, weights, the routing, the excess)."""
    out = np.empty(candidates)
    for phase in range(candidates):
        size = (points.size - phase + candidates - 1) // candidates
        cells = size - 1
        up = np.empty(cells)
        down = np.empty(cells)
        for c in range(cells):
            i, j = phase + c * candidates, phase + (c + 1) * candidates
            m = cdf_p[j] - cdf_p[i] if cdf_p[j] <= 0.5 else sf_p[i] - sf_p[j]
            n = cdf_q[j] - cdf_q[i] if cdf_q[j] <= 0.5 else sf_q[i] - sf_q[j]
            m = max(m, 0.0)
            n = max(n, 0.0)
            up[c] = max(m - n * np.exp(points[i]), 0.0)
            down[c] = max(n * np.exp(points[j]) - m, 0.0)
        last = phase + cells * candidates
        top_up = max(sf_p[last] - sf_q[last] * np.exp(points[last]), 0.0)
        pi = _route_compiled(up, down, top_up)
        total = 0.0
        for k in range(cells + 1):
            pos = top_up if k == cells else pi[k] * up[k]
            neg = 0.0 if k == 0 else (1.0 - pi[k - 1]) * down[k - 1]
            total += max(pos - neg, 0.0)
        out[phase] = total
    return out


@numba.njit(cache=True)
def _routed(cells, pi, top):  # pragma: no cover - jitted
    """What the routing gives each label of a per-cell quantity: label k gets pi_k of
    cell k and 1 - pi_k-1 of cell k-1, the top label also ``top``."""
    size = cells.size + 1
    out = np.zeros(size)
    for c in range(size - 1):
        out[c] += pi[c] * cells[c]
        out[c + 1] += (1.0 - pi[c]) * cells[c]
    out[size - 1] += top
    return out


@numba.njit(cache=True)
def _routed_errors(errors, shared, pi, top):  # pragma: no cover - jitted
    """:func:`_routed` of the cells' error bounds, less what cancels: label k holds
    1 - pi_k-1 of cell k - 1 and pi_k of cell k, so their shared edge's error E_k
    (:func:`_differences_with_errors`) enters it |1 - pi_k-1 - pi_k| times, not
    1 - pi_k-1 + pi_k times: 2 min(1 - pi_k-1, pi_k) E_k is taken off (with the rounding
    of that subtraction, 4 ulps of the terms, added back)."""
    out = _routed(errors, pi, top)
    u = 1.1102230246251565e-16
    for k in range(1, pi.size):
        if shared[k] > 0.0:
            gross = (1.0 - pi[k - 1]) * errors[k - 1] + pi[k] * errors[k]
            cancelled = 2.0 * min(1.0 - pi[k - 1], pi[k]) * shared[k]
            out[k] = max(out[k] - cancelled + 4.0 * u * (out[k] + gross + cancelled), 0.0)
    return out


@numba.njit(cache=True)
def _routed_all(
    first, second, first_error, second_error, first_shared, second_shared, pi, top_first, top_second, top_first_error, top_second_error
):  # pragma: no cover - jitted
    """:func:`_routed` of two measures' cell masses, :func:`_routed_errors` of their
    errors, and the two label kernels' outputs (kept P-masses, loss bounds), zero until
    set: one more label than cells."""
    size = pi.size + 1
    return (
        _routed(first, pi, top_first),
        _routed(second, pi, top_second),
        _routed_errors(first_error, first_shared, pi, top_first_error),
        _routed_errors(second_error, second_shared, pi, top_second_error),
        np.zeros(size),
        np.zeros(size),
    )


@numba.njit(cache=True)
def _label_losses(m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n, grid, step):  # pragma: no cover - jitted
    """(the P-mass each label keeps, a lower bound on its loss, the largest rounding
    margin) for the labels of the routing.

    Label k gets pi_k of cell k and 1 - pi_k-1 of cell k-1 (both measures; the top label
    also the mass above the grid).  The cells' computed masses carry modelled errors
    (``error_m``, ``error_n``; module .rounding), so the label's true masses lie within
    P_k -+ E_P and Q_k -+ E_Q (plus two ulps of the sums), and its loss is at least
    log(P_k - E_P) - log(Q_k + E_Q) less the logarithms' rounding (+inf where no Q-mass
    can exist), capped at its grid point l_k (no higher point is needed); the placement's
    arithmetic (:func:`_place_labels`) rounds by a few ulps of that value and of the step,
    so a margin of 8 ulps of their sum is taken off.  The label keeps P-mass P_k - E_P; a
    label where that is not positive is dropped (mass 0)."""
    p_label, q_label, p_error, q_error, kept, lowest = _routed_all(
        m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n
    )
    eps = _EPS
    widest = 0.0
    for k in range(grid.size):
        low_p = p_label[k] - p_error[k] - 2.0 * eps * p_label[k]
        if low_p > 0.0:
            high_q = q_label[k] + q_error[k] + 2.0 * eps * q_label[k]
            if high_q <= 0.0:
                value = np.inf
            else:
                log_p, log_q = np.log(low_p), np.log(high_q)
                value = log_p - log_q - 2.0 * eps * (abs(log_p) + abs(log_q))
            value = min(value, grid[k])
            margin = 8.0 * eps * (abs(value) + step)
            kept[k] = low_p
            lowest[k] = value - margin
            widest = max(widest, margin)
    return kept, lowest, widest


@numba.njit(cache=True)
def _mixture_label_losses(
    a, b, error_a, error_b, shared_a, shared_b, pi, top_a, top_b, top_error_a, top_error_b, q, remove, grid, step
):  # pragma: no cover - jitted
    """:func:`_label_losses` for a subsampled law from its parts: C-masses ``a`` and
    S-masses ``b`` of the cells (C = Q0, S = P0; remove has P = (1-q) C + q S and Q = C,
    add has P = C and Q = (1-q) C + q S).  Label k's loss is +-log1p(q (B_k/A_k - 1)) for
    its parts A_k, B_k, so the rounding of the ratio B/A enters scaled by about q: the
    loss is bounded with the ratio at its end of [(B - E_B)/(A + E_A), (B + E_B)/(A - E_A)]
    (dropped where A - E_A is not positive when that end is needed), less the rounding of
    q rho - q and of log1p; the label keeps P-mass P_k less its error."""
    a_label, b_label, a_error, b_error, kept, lowest = _routed_all(
        a, b, error_a, error_b, shared_a, shared_b, pi, top_a, top_b, top_error_a, top_error_b
    )
    eps = _EPS
    widest = 0.0
    for k in range(grid.size):
        big_a = a_label[k]
        big_b = b_label[k]
        e_a = a_error[k] + 2.0 * eps * big_a
        e_b = b_error[k] + 2.0 * eps * big_b
        if remove:
            mass = (1.0 - q) * big_a + q * big_b
            low_p = mass - ((1.0 - q) * e_a + q * e_b) - 2.0 * eps * mass
            if low_p <= 0.0:
                continue
            ratio = max(big_b - e_b, 0.0) / (big_a + e_a)  # the loss grows with B/A
        else:
            low_p = big_a - e_a
            if low_p <= 0.0:
                continue
            ratio = (big_b + e_b) / low_p  # the loss falls as B/A grows
        x = q * ratio - q
        slack = 8.0 * eps * (q * ratio + abs(x)) / (1.0 + x)
        value = math.log1p(x)
        value = value - slack - 2.0 * eps * abs(value) if remove else -value - slack - 2.0 * eps * abs(value)
        value = min(value, grid[k])
        margin = 8.0 * eps * (abs(value) + step)
        kept[k] = low_p
        lowest[k] = value - margin
        widest = max(widest, margin)
    return kept, lowest, widest


def _place_labels(kept, lowest, widest, grid, lattice, step, phase) -> tuple[np.ndarray, float]:
    """Each label rounded down onto the grid shifted by a common offset: returns (masses
    on indices lattice[0] - 1 .. lattice[-1], that offset).  ``grid[k]`` is the lattice
    point ``lattice[k] * step + phase`` (up to rounding).

    Each label goes to the highest shifted point at or below its loss bound ``lowest``.
    The shift is twice the largest rounding margin (so that balanced labels, whose bound
    lies a margin below their own point, stay on it), plus what :func:`_choose_shift`
    finds worth it for labels whose masses' errors put their bound further below (a
    shift of every label against a full step for the few).  A label that would land
    below the grid is dropped (only lowers the profile)."""
    widest = max(widest, 1e-300)
    occupied = kept > 0.0
    offset = np.where(occupied, lowest + 2.0 * widest - grid, 0.0)
    floor_shift = 2.0 * widest + 1e-9 * step + _choose_shift(offset[occupied], kept[occupied], step)
    return _placed(kept, lowest, lattice, step, phase, floor_shift), float(floor_shift)


@numba.njit(cache=True)
def _placed(kept, lowest, lattice, step, phase, floor_shift):  # pragma: no cover - jitted
    """The placement of :func:`_place_labels` at a given shift."""
    masses = np.zeros(lattice[-1] - lattice[0] + 2)
    for k in range(kept.size):
        if kept[k] > 0.0:
            target = min(int(math.floor((lowest[k] - phase + floor_shift) / step)), lattice[k])
            index = target - (lattice[0] - 1)
            if index >= 0:
                masses[index] += kept[k]
    return masses


def _labels_rounded_down(
    m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n, grid, lattice, step, phase
) -> tuple[np.ndarray, float]:
    """The labels of the routing (:func:`_label_losses`) placed by :func:`_place_labels`."""
    kept, lowest, widest = _label_losses(
        m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n, grid, step
    )
    return _place_labels(kept, lowest, widest, grid, lattice, step, phase)


def lower_measure(
    loss: PrivacyLoss,
    step: float,
    low: float,
    high: float,
    phase: float | None = None,
    zoom: int = 0,
    exponent: float | None = None,
    search: tuple[int, float] = (24, 4.0),
) -> GridMeasure:
    """Optimistic measure by post-processing: each cell (l_c, l_c+1] of the loss is split
    between the labels c and c+1 in fixed proportions (a randomised quantiser, hence a
    post-processing of the mechanism), chosen so that every label's true loss
    log P(label)/Q(label) is at least its grid point; rounding each label down onto its
    grid point then only lowers the profile.  Mass below the grid is dropped.  The grid
    is k*step + phase (see :func:`_choose_phase`, with ``zoom`` passes and ``search`` =
    (candidates, reach) when no phase is given);
    with ``exponent`` its cells are those of :func:`graded_lattice` (the routing holds for
    any cell edges: each label's loss is at least its own edge).
    """
    check_grid((high - low) / step + 3, "the optimistic grid of one step's privacy loss")  # + the cell below low
    if phase is None:
        # a mechanism's law asked again at the same grid (the refinement's tilted
        # evaluation after its untilted one, verify's prefix rows after the whole plan)
        # reuses its phase; a composed chunk's law is searched afresh (used once)
        choose = _cached_phase if isinstance(loss, PrivacyLoss) else _choose_phase
        phase = choose(loss, step, low, high, search[0], zoom, search[1])
    # one cell below the point at or below ``low``: mass at or below the first point is
    # dropped, and a law that piles up at the end of its support puts its pile there
    # (sigma = 0.06, q = 4e-6: 1 - q of the mass within 1e-60 of log(1 - q), which is
    # ``low`` and, at the phase the search prefers, a grid point: the measure kept q)
    k_lo = int(np.floor((low - phase) / step)) - 1
    k_hi = max(int(np.ceil((high - phase) / step)), k_lo + 1)
    if exponent is None:
        lattice = np.arange(k_lo, k_hi + 1)
    else:
        lattice = graded_lattice(loss, step, k_lo, k_hi, phase, exponent)
    return lower_on_grid(loss, lattice * step + phase, k_lo, step, phase, lattice=lattice)


def lower_on_grid(
    loss: PrivacyLoss,
    grid: np.ndarray,
    k_lo: int,
    step: float,
    phase: float,
    include_above: bool = True,
    lattice: np.ndarray | None = None,
) -> GridMeasure:
    """:func:`lower_measure` on explicit cell edges ``grid`` (the lattice points
    (k_lo + j) * step + phase, up to rounding, or ``lattice[j] * step + phase`` when a
    lattice is given): the cells (grid[j], grid[j+1]] are routed
    and their labels rounded down.  Mass at or below grid[0] is dropped; mass above
    grid[-1] joins the top label when ``include_above``, else it is dropped too (a
    sub-measure: dropping mass only lowers the profile).  Two calls on grids that share
    an edge therefore cover disjoint parts of the law (:mod:`.two_scale`)."""
    if lattice is None:
        lattice = np.arange(k_lo, k_lo + grid.size)
    if isinstance(loss, PrivacyLoss) and loss.sampling_rate < 1.0:
        return _lower_on_grid_subsampled(loss, grid, step, phase, include_above, lattice)
    m, n, error_m, error_n, shared_m, shared_n = _cell_masses(loss, grid)
    if include_above:
        _, _, top_m, top_error_m, top_n, top_error_n = _end_masses(loss, float(grid[0]), float(grid[-1]))
    else:
        top_m = top_n = top_error_m = top_error_n = 0.0
    # route towards targets a slack above the grid points, so that every label's loss
    # stays above its point once its masses' modelled errors are taken off
    targets = grid + _label_slack(m, n, error_m, error_n, step, 1.0)
    up, down = _cell_weights(m, n, targets)
    top_up = max(top_m - top_n * np.exp(targets[-1]), 0.0)
    pi = _route_compiled(up, down, top_up)
    masses, floor_shift = _labels_rounded_down(
        m, n, error_m, error_n, shared_m, shared_n, pi, top_m, top_n, top_error_m, top_error_n, grid, lattice, step, phase
    )
    return GridMeasure(int(lattice[0]) - 1, masses, step, floor_shift - phase, 0.0)


def _lower_on_grid_subsampled(
    loss: PrivacyLoss, grid: np.ndarray, step: float, phase: float, include_above: bool, lattice: np.ndarray
) -> GridMeasure:
    """:func:`lower_on_grid` for a subsampled law, from its parts C = Q0 and S = P0:
    P and Q of a cell share C's rounding, which cancels from the label's ratio P/Q, so
    each label's loss is bounded from its parts (:func:`_mixture_label_losses`)."""
    q = float(loss.sampling_rate)
    remove = loss.direction == "remove"
    a, b, error_a, error_b, shared_a, shared_b, top_a, top_b, top_error_a, top_error_b = _base_cell_masses(loss, grid)
    if not include_above:
        top_a = top_b = top_error_a = top_error_b = 0.0
    mixed = (1.0 - q) * a + q * b
    m, n = (mixed, a) if remove else (a, mixed)
    top_mixed = (1.0 - q) * top_a + q * top_b
    top_m, top_n = (top_mixed, top_a) if remove else (top_a, top_mixed)
    # the loss's rounding: the parts' relative errors, scaled by q B/A / (1 - q + q B/A)
    targets = grid + _label_slack(a, b, error_a, error_b, step, q)
    up, down = _cell_weights(m, n, targets)
    top_up = max(top_m - top_n * np.exp(targets[-1]), 0.0)
    pi = _route_compiled(up, down, top_up)
    kept, lowest, widest = _mixture_label_losses(
        a, b, error_a, error_b, shared_a, shared_b, pi, top_a, top_b, top_error_a, top_error_b, q, remove, grid, step
    )
    masses, floor_shift = _place_labels(kept, lowest, widest, grid, lattice, step, phase)
    return GridMeasure(int(lattice[0]) - 1, masses, step, floor_shift - phase, 0.0)


def _choose_shift(offset: np.ndarray, mass: np.ndarray, step: float) -> float:
    """Common downward shift c >= 0 trading a shift of every label by c against a full
    step for labels whose loss bound lies more than c below their grid point (mean cost:
    c times the total mass against the step times the mass left behind)."""
    deficit = -offset
    positive = deficit > 0
    if not positive.any():
        return 0.0
    order = np.argsort(deficit[positive])[::-1]
    candidates = np.minimum(deficit[positive][order], step)
    # mass that still needs a full step when c = candidates[i]: labels with larger deficit
    beyond = np.concatenate([[0.0], np.cumsum(mass[positive][order])[:-1]])
    total = mass.sum()
    cost = candidates * total + step * beyond
    cost_zero = step * mass[positive].sum()
    best = int(np.argmin(cost))
    if cost[best] < cost_zero:
        return float(candidates[best] * (1.0 + 1e-9))
    return 0.0
