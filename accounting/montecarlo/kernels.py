"""Numba kernels of the Monte-Carlo accountant (:mod:`dpforge.accounting.montecarlo`).

* Random numbers: xoshiro256** (Blackman & Vigna 2018), one generator per block of
  samples, seeded by splitmix64 from the chunk's four seed words and the block index, so
  results depend only on the seed and the chunk/block partition, never on the number of
  threads or on which worker ran a chunk.
* Normal variates: the 256-layer ziggurat of Marsaglia & Tsang (2000) on 52-bit
  integers (the layout NumPy's ``Generator.standard_normal`` uses), exact up to the
  53-bit resolution of the uniform variates.
* One step of a component draws an *outcome* from a small categorical table and then the
  privacy loss of that outcome (see the ``ATOM`` ... ``LAPMID_REJ`` codes below); the
  tables are built in :mod:`dpforge.accounting.montecarlo` for the plain or the
  exponentially tilted law of one step.
* ``composed_losses`` returns the composed loss of every sample (pilot runs);
  ``accumulate`` adds, for each grid point eps_g, the normalised importance-sampling terms
  Z_g = e^{-lam (L - eps_g)} (1 - e^{eps_g - L})_+ / c(lam) in [0, 1] and their squares.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

_U64 = np.uint64

# outcome codes of the per-step tables
ATOM = 0  # the loss is par[0]
GAUSS = 1  # r = par[0] * z + par[1], z ~ N(0, 1)
LAPMID = 2  # x on [0, a], density prop. to e^{s x}; s = par[0], a = par[1], aux = par[2]; r = 2x - a
GAUSS_REJ = 3  # z ~ N(par[2], 1), r = par[0] z + par[1], accepted by the tangent rule par[3:6]
LAPMID_REJ = 4  # x as LAPMID (s = par[0] < 0), accepted by the tangent rule par[3:6]
N_PAR = 6

#: at most this many factors (1 - q + q e^r) are multiplied before one log is taken
_GROUP = 16
#: |r| below this uses the product form (each factor within e^{+-30})
_R_PRODUCT = 30.0


def _ziggurat_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tables of the 256-layer normal ziggurat for 52-bit uniforms (Marsaglia & Tsang 2000)."""
    r = 3.6541528853610088
    v = 0.00492867323399
    m1 = 2.0**52
    ki = np.zeros(256, dtype=np.uint64)
    wi = np.zeros(256)
    fi = np.zeros(256)
    dn = tn = r
    q = v / math.exp(-0.5 * dn * dn)
    ki[0] = np.uint64((dn / q) * m1)
    ki[1] = 0
    wi[0] = q / m1
    wi[255] = dn / m1
    fi[0] = 1.0
    fi[255] = math.exp(-0.5 * dn * dn)
    for i in range(254, 0, -1):
        dn = math.sqrt(-2.0 * math.log(v / dn + math.exp(-0.5 * dn * dn)))
        ki[i + 1] = np.uint64((dn / tn) * m1)
        tn = dn
        fi[i] = math.exp(-0.5 * dn * dn)
        wi[i] = dn / m1
    return ki, wi, fi


_KI, _WI, _FI = _ziggurat_tables()
_ZIG_R = 3.6541528853610088
_ZIG_INV_R = 1.0 / _ZIG_R
_TWO_M53 = 1.0 / 9007199254740992.0


# --------------------------------------------------------------------------- generator


@njit(inline="always")
def _rotl(x, k):
    return (x << k) | (x >> (_U64(64) - k))


@njit(inline="always")
def _next(st):
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    result = _rotl(s1 * _U64(5), _U64(7)) * _U64(9)
    t = s1 << _U64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, _U64(45))
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return result


@njit(inline="always")
def _uniform(st):
    """Uniform on [0, 1) with 53 random bits."""
    return float(_next(st) >> _U64(11)) * _TWO_M53


@njit(inline="always")
def _uniform_open(st):
    """Uniform on (0, 1]."""
    return float((_next(st) >> _U64(11)) + _U64(1)) * _TWO_M53


@njit(inline="always")
def _splitmix(x):
    z = x + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


@njit(inline="always")
def _seed(st, words, block):
    """Independent-looking xoshiro state for ``block`` of a chunk with seed ``words``."""
    b = _U64(block)
    for i in range(4):
        st[i] = _splitmix(words[i] ^ _splitmix(b * _U64(4) + _U64(i)))
    if st[0] == 0 and st[1] == 0 and st[2] == 0 and st[3] == 0:  # pragma: no cover
        st[0] = _U64(1)


@njit(inline="always")
def _normal(st):
    while True:
        r = _next(st)
        idx = np.intp(r & _U64(0xFF))
        r = r >> _U64(8)
        rabs = (r >> _U64(1)) & _U64(0x000FFFFFFFFFFFFF)
        x = float(rabs) * _WI[idx]
        if r & _U64(1):
            x = -x
        if rabs < _KI[idx]:
            return x
        if idx == 0:
            while True:
                xx = -_ZIG_INV_R * math.log(_uniform_open(st))
                yy = -math.log(_uniform_open(st))
                if yy + yy > xx * xx:
                    if (rabs >> _U64(8)) & _U64(1):
                        return -(_ZIG_R + xx)
                    return _ZIG_R + xx
        elif (_FI[idx - 1] - _FI[idx]) * _uniform(st) + _FI[idx] < math.exp(-0.5 * x * x):
            return x


# --------------------------------------------------------------------------- one step


@njit(inline="always")
def _ell(r, q, log_q, log_1mq):
    """log(1 - q + q e^r), accurate for every r."""
    if q >= 1.0:
        return r
    if r > 0.0:
        return r + log_q + math.log1p(math.exp(log_1mq - log_q - r))
    return log_1mq + math.log1p(math.exp(log_q - log_1mq + r))


@njit(inline="always")
def _trunc_exp(st, s, a, aux):
    """x on [0, a] with density prop. to e^{s x}; aux = e^{-s a} (s > 0) or expm1(s a) (s < 0)."""
    u = _uniform(st)
    if s > 0.0:
        return a + math.log(u + (1.0 - u) * aux) / s
    if s < 0.0:
        return math.log1p(u * aux) / s
    return u * a


@njit
def _component_loss(st, count, q, log_q, log_1mq, sign, lam, n_out, cum, otype, par):
    """Sum of ``count`` independent one-step losses of one component."""
    total = 0.0
    prod = 1.0
    grouped = 0
    mq = 1.0 - q
    for _ in range(count):
        j = 0
        if n_out > 1:
            u = _uniform(st)
            while j < n_out - 1 and u >= cum[j]:
                j += 1
        kind = otype[j]
        if kind == ATOM:
            total += par[j, 0]
            continue
        if kind == GAUSS:
            r = par[j, 0] * _normal(st) + par[j, 1]
        elif kind == LAPMID:
            r = 2.0 * _trunc_exp(st, par[j, 0], par[j, 1], par[j, 2]) - par[j, 1]
        else:
            # rejection from the tangent envelope of a log-concave tilted law
            r0 = par[j, 3]
            ell0 = par[j, 4]
            s0 = par[j, 5]
            while True:
                if kind == GAUSS_REJ:
                    r = par[j, 0] * (_normal(st) + par[j, 2]) + par[j, 1]
                else:
                    r = 2.0 * _trunc_exp(st, par[j, 0], par[j, 1], par[j, 2]) - par[j, 1]
                if -_R_PRODUCT < r < _R_PRODUCT:
                    ell = math.log(mq + q * math.exp(r))
                else:
                    ell = _ell(r, q, log_q, log_1mq)
                excess = lam * (ell - ell0 - s0 * (r - r0))
                if excess <= 0.0:
                    break
                u = _uniform(st)
                # accept with probability e^{-excess}; 1 - excess <= e^{-excess} is a cheap squeeze
                if u < 1.0 - excess or u < math.exp(-excess):
                    break
            total += sign * ell
            continue
        if -_R_PRODUCT < r < _R_PRODUCT:
            prod *= mq + q * math.exp(r)
            grouped += 1
            if grouped == _GROUP:
                total += sign * math.log(prod)
                prod = 1.0
                grouped = 0
        else:
            total += sign * _ell(r, q, log_q, log_1mq)
    if grouped:
        total += sign * math.log(prod)
    return total


@njit
def _composed_loss(st, counts, qs, log_qs, log_1mqs, signs, lams, n_outs, cums, otypes, pars):
    total = 0.0
    for c in range(counts.shape[0]):
        total += _component_loss(
            st, counts[c], qs[c], log_qs[c], log_1mqs[c], signs[c], lams[c], n_outs[c], cums[c], otypes[c], pars[c]
        )
    return total


# --------------------------------------------------------------------------- chunk kernels


@njit(parallel=True, cache=True)
def composed_losses(words, n, block, counts, qs, log_qs, log_1mqs, signs, lams, n_outs, cums, otypes, pars, offsets):
    """Composed privacy loss of ``n`` samples (plus ``offsets`` when non-empty)."""
    out = np.empty(n)
    n_blocks = (n + block - 1) // block
    for b in prange(n_blocks):
        st = np.empty(4, dtype=np.uint64)
        _seed(st, words, b)
        for i in range(b * block, min(n, (b + 1) * block)):
            loss = _composed_loss(st, counts, qs, log_qs, log_1mqs, signs, lams, n_outs, cums, otypes, pars)
            if offsets.shape[0]:
                loss += offsets[i]
            out[i] = loss
    return out


@njit(parallel=True, cache=True)
def accumulate(
    words, n, block, counts, qs, log_qs, log_1mqs, signs, lams, n_outs, cums, otypes, pars, offsets, grid, lam, log_c
):
    """Sums over ``n`` samples of Z_g and Z_g^2 for every grid point (see the module docstring).

    Returns (sums, squares), each of the grid's length; blocks are reduced in a fixed order.
    """
    g_count = grid.shape[0]
    n_blocks = (n + block - 1) // block
    sums = np.zeros((n_blocks, g_count))
    squares = np.zeros((n_blocks, g_count))
    # ratios between neighbouring grid points of the two exponentials
    rho = np.empty(max(g_count - 1, 1))
    sig = np.empty(max(g_count - 1, 1))
    for g in range(g_count - 1):
        step = grid[g + 1] - grid[g]
        rho[g] = math.exp(-lam * step)
        sig[g] = math.exp(-step)
    for b in prange(n_blocks):
        st = np.empty(4, dtype=np.uint64)
        _seed(st, words, b)
        for i in range(b * block, min(n, (b + 1) * block)):
            loss = _composed_loss(st, counts, qs, log_qs, log_1mqs, signs, lams, n_outs, cums, otypes, pars)
            if offsets.shape[0]:
                loss += offsets[i]
            if not loss > grid[0]:
                continue
            g = np.searchsorted(grid, loss) - 1
            u = loss - grid[g]
            t = math.exp(-lam * u - log_c)
            v = math.exp(-u)
            while True:
                z = min(t * (1.0 - v), 1.0)
                sums[b, g] += z
                squares[b, g] += z * z
                if g == 0:
                    break
                g -= 1
                t *= rho[g]
                v *= sig[g]
                if t < 1e-300:
                    break
    total = np.zeros(g_count)
    total_sq = np.zeros(g_count)
    for b in range(n_blocks):
        for g in range(g_count):
            total[g] += sums[b, g]
            total_sq[g] += squares[b, g]
    return total, total_sq


@njit(cache=True)
def normals(words, n):
    """``n`` standard normal variates from one generator (for tests of the sampler)."""
    st = np.empty(4, dtype=np.uint64)
    _seed(st, words, 0)
    out = np.empty(n)
    for i in range(n):
        out[i] = _normal(st)
    return out
