"""Running the Monte-Carlo accountant's samples: the data one chunk needs, chunk sizes,
per-chunk seeds, chunks run in the calling process or on an executor, and their results
combined.

Samples are drawn by the numba kernels of :mod:`.kernels` in chunks with their own seeds:
four words of ``numpy.random.SeedSequence(seed, spawn_key=(stage, direction, chunk))``,
from which the kernels seed one xoshiro256** generator per block (Blackman & Vigna 2018).
The chunk and block sizes depend only on the number of draws per sample, so results are
reproducible and independent of thread counts and of the optional executor (any
:class:`concurrent.futures.Executor` through :func:`dpforge.parallel.resolve_executor`,
e.g. a Dask client's ``get_executor()``; a ``ProcessPoolExecutor`` must use the "spawn"
or "forkserver" start method, because numba's OpenMP threads cannot be forked).  At most
``_WINDOW`` chunks are in flight, so memory does not grow with the number of samples.
Progress is reported by :class:`dpforge.parallel.Progress`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dpforge.accounting.montecarlo import kernels
from dpforge.accounting.montecarlo.samplers import StepSampler
from dpforge.parallel import Progress

#: chunks in flight at once on an executor (memory stays flat)
_WINDOW = 64


@dataclass(frozen=True)
class _Batch:
    """Everything a chunk needs (plain data, picklable for executors)."""

    arrays: tuple
    generic: tuple
    grid: np.ndarray | None
    lam: float
    log_c: float


def _generic_offsets(generic: Sequence[StepSampler], words: np.ndarray, n: int, lam: float) -> np.ndarray:
    """The summed losses of the NumPy-drawn (plugged-in) components of ``n`` samples, from
    a generator seeded by the chunk's words (empty when there are none)."""
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


def _progress_bar(total: int, enabled: Any) -> Progress:
    """The engine's progress over ``total`` samples: ``enabled`` None draws a bar only when
    stderr is a terminal, True/False force it on/off; shown once a run passes 2 s."""
    return Progress(total, label="dpforge montecarlo", enabled=enabled, delay=2.0, unit="samples")


@dataclass
class _Runner:
    """Runs the samples of one call: its seed, executor (already resolved) and progress."""

    seed: int
    executor: Any
    progress: Progress

    def words(self, stage: int, direction: int, chunk: int) -> np.ndarray:
        """The four seed words of one chunk (stage 0 pilot, 1 main, 2 delta)."""
        sequence = np.random.SeedSequence(self.seed, spawn_key=(stage, direction, chunk))
        return sequence.generate_state(4, dtype=np.uint64)

    def run(self, batch: _Batch, draws: int, n: int, stage: int, direction: int, label: str):
        """Run ``n`` samples in chunks (in order; at most ``_WINDOW`` chunks in flight on the
        executor) and combine them: concatenated losses, or summed grid sums."""
        chunk, block = _chunking(draws)
        # one chunk's seeds at a time: a list of every chunk's held memory in proportion to n
        jobs = ((self.words(stage, direction, i), min(chunk, n - start)) for i, start in enumerate(range(0, n, chunk)))
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
            self.progress.update(size, stage=label)

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

    def close(self) -> None:
        """Remove the progress bar (if one was drawn)."""
        self.progress.close()
