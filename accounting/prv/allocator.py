"""The C allocator's thresholds for the engine's FFT-sized temporaries (glibc only).

glibc's malloc serves a block above ``M_MMAP_THRESHOLD`` (128 KiB at start) by mmap and
returns it to the system on free, and it trims the heap's top above
``M_TRIM_THRESHOLD``; every grid-sized array (a 92k-point transform is 1.5 MB) is then
page-faulted in again on first touch.  glibc raises both thresholds itself, up to 32 and
64 MiB, once a larger mmapped block is freed, so the engine's speed depended on what
else the process had imported (importing scipy.optimize frees such a block):
``benchmarks/allocator.py`` (``results/allocator.json``) times W3 (q = 0.001,
sigma = 0.8, T = 1e5) at 0.60x of glibc's start-up state after ``import scipy.optimize``.

:func:`raise_thresholds` sets the two thresholds to those same values (32 MiB, 64 MiB)
when the engine is imported, so the timing no longer depends on what else the process
imported (W3 0.48x and S1 0.79x of glibc's start-up state in the same benchmark).  Freed memory up to the trim threshold stays with the process for reuse.
``DPFORGE_MALLOC_DEFAULTS=1`` leaves the allocator alone; other C libraries are not
touched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's own ceilings for its dynamic thresholds on 64-bit systems
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD


def raise_thresholds() -> bool:
    """Set glibc's mmap and trim thresholds to ``MMAP_THRESHOLD`` and ``TRIM_THRESHOLD``;
    True when they were set (Linux with glibc, and not opted out)."""
    if os.environ.get("DPFORGE_MALLOC_DEFAULTS") == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
