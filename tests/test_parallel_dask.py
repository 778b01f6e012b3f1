"""dpforge.parallel with a Dask ``distributed`` cluster: a LocalCluster in-process."""

from __future__ import annotations

import concurrent.futures
import functools
import importlib

import pytest

distributed = pytest.importorskip("distributed")

from dpforge.accounting import calibrate_noise_multiplier, epsilon  # noqa: E402
from dpforge.design.search import lmo_search  # noqa: E402
from dpforge.errors import ParameterError  # noqa: E402
from dpforge.mechanisms import Gaussian, PoissonSampled  # noqa: E402
from dpforge.parallel import dask_executor, is_dask_client, resolve_executor  # noqa: E402

stages = importlib.import_module("dpforge.design.stages")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None, silence_logs=40
    )
    with distributed.Client(cluster) as dask_client:
        yield dask_client
    cluster.close()


def _square(x: int) -> int:
    return x * x


def test_a_client_becomes_an_executor_with_ordered_results(client):
    assert is_dask_client(client) and not is_dask_client(concurrent.futures.ThreadPoolExecutor)
    executor, owned = resolve_executor(client)
    assert not owned and isinstance(executor, concurrent.futures.Executor)
    assert list(executor.map(_square, range(20))) == [x * x for x in range(20)]
    future = executor.submit(_square, 7)
    assert isinstance(future, concurrent.futures.Future) and future.result() == 49
    with pytest.raises(ParameterError, match="distributed.Client"):
        dask_executor(object())


def test_calibration_sweep_on_the_cluster_equals_the_serial_sweep(client):
    rates = [0.01, 0.02, 0.05]
    calibrate = functools.partial(calibrate_noise_multiplier, steps=200, target_epsilon=2.0, delta=1e-5)
    executor, _ = resolve_executor(client)
    on_cluster = [r.parameter for r in executor.map(calibrate, rates)]
    serial = [calibrate(q).parameter for q in rates]
    assert on_cluster == serial


def test_montecarlo_engine_runs_on_the_client(client):
    description = PoissonSampled(Gaussian(1.0), 0.1)
    options = dict(engine="montecarlo", samples=20_000, seed=5)
    a = epsilon(description, 1e-3, executor=client, **options)
    b = epsilon(description, 1e-3, executor="serial", **options)
    assert a.upper == b.upper and a.lower == b.lower


def test_lmo_search_on_the_client_equals_serial(client, monkeypatch):
    monkeypatch.setattr(stages, "_POINTS_PER_DIMENSION", 2)
    monkeypatch.setattr(stages, "_POLISH_STARTS", 2)
    monkeypatch.setattr(stages, "_POLISH_EVALUATIONS_PER_DIMENSION", 4)
    monkeypatch.setattr(stages, "_POLISH_EVALUATIONS_MIN", 3)
    kwargs = dict(components=("gamma",), seed=3, time_limit=120)
    serial = lmo_search(1.0, 1e-5, 0.05, 100, executor="serial", **kwargs).to_dict()
    on_cluster = lmo_search(1.0, 1e-5, 0.05, 100, executor=client, **kwargs).to_dict()
    serial.pop("elapsed"), on_cluster.pop("elapsed")
    assert on_cluster == serial
