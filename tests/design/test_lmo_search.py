"""LMO parameter search: certified budget, reproducibility, search space, serialisation, CLI.

The default-run tests use a small workload, a serial executor (or a thread pool) and a
reduced search budget, so the file runs in well under a minute; the full default search
on the issue's workload is marked ``slow``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import json
import math

import numpy as np
import pytest

from dpforge.accounting import calibrate_noise_multiplier, epsilon
from dpforge.cli import lmo as cli_lmo
from dpforge.mechanisms import LMO, Composed, PoissonSampled
from dpforge.design.search import LMOSearchResult, lmo_search

# the modules themselves (``dpforge.design.search`` may be re-exported as the function)
search_module = importlib.import_module("dpforge.design.search")
space_module = importlib.import_module("dpforge.design.space")
scale_module = importlib.import_module("dpforge.design.scale")
stages_module = importlib.import_module("dpforge.design.stages")

TARGET, DELTA, Q, T = 1.0, 1e-5, 0.05, 100


def _strict_json(text: str):
    def reject(name):
        raise AssertionError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=reject)


def _small_budget(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(stages_module, "_POINTS_PER_DIMENSION", 2)
    mp.setattr(stages_module, "_POLISH_STARTS", 2)
    mp.setattr(stages_module, "_POLISH_EVALUATIONS_PER_DIMENSION", 4)
    mp.setattr(stages_module, "_POLISH_EVALUATIONS_MIN", 3)


@pytest.fixture
def small_budget(monkeypatch):
    _small_budget(monkeypatch)


@pytest.fixture(scope="module")
def result() -> LMOSearchResult:
    with pytest.MonkeyPatch.context() as mp:
        _small_budget(mp)
        return lmo_search(TARGET, DELTA, Q, T, components=("gamma", "uniform"), executor="serial", time_limit=120)


def _workload(mechanism: LMO, q: float = Q, steps: int = T):
    return Composed([(PoissonSampled(mechanism, q), steps)])


# --------------------------------------------------------------------------- the budget


def test_certified_epsilon_within_target(result):
    assert not result.stopped_early
    independent = epsilon(_workload(result.mechanism), DELTA)  # default accuracy, recomputed here
    assert independent.upper <= TARGET
    assert result.epsilon == pytest.approx(independent.upper, rel=1e-12)
    assert result.epsilon_lower <= result.epsilon <= TARGET
    # calibrated, not over-noised: within the final tolerance (1e-3) plus the accuracy of the engine
    assert result.epsilon >= TARGET * (1 - 5e-3)


def test_reported_noise_and_gaussian_baseline(result):
    m = result.mechanism
    assert m.dimension == 1 and m.sensitivity == 1.0
    assert result.std == pytest.approx(m.std()) and result.mean_absolute == pytest.approx(m.mean_absolute())
    assert result.objective == "variance" and result.objective_value == pytest.approx(m.variance())
    sigma = calibrate_noise_multiplier(Q, T, TARGET, DELTA).parameter
    assert result.gaussian_noise_multiplier == pytest.approx(sigma, rel=1e-9)
    assert result.gaussian_std == pytest.approx(sigma)
    assert result.gaussian_abs == pytest.approx(sigma * math.sqrt(2 / math.pi))
    assert result.std_ratio == pytest.approx(result.std / result.gaussian_std)
    assert result.abs_ratio == pytest.approx(result.mean_absolute / result.gaussian_abs)
    assert result.evaluations > 5 and result.epsilon_evaluations >= result.evaluations
    assert result.seed == 0 and result.components == ("gamma", "uniform")


def test_scaling_is_the_structural_fact_the_search_uses():
    shape = LMO(weights=(0.4, 0.0, 0.6), gamma_shape=4.0, gamma_scale=0.25, uniform_low=0.5, uniform_high=2.0)
    eps = [epsilon(_workload(shape.scaled(s)), DELTA, relative_accuracy=1e-2).upper for s in (0.8, 1.0, 1.25)]
    assert eps[0] > eps[1] > eps[2]
    assert shape.scaled(1.25).std() == pytest.approx(1.25 * shape.std())
    assert shape.scaled(1.25).mean_absolute() == pytest.approx(1.25 * shape.mean_absolute())


# --------------------------------------------------------------------------- reproducibility


def test_same_seed_same_result_across_executors(small_budget):
    kwargs = dict(components=("gamma",), seed=3, time_limit=120)
    serial = lmo_search(TARGET, DELTA, Q, T, executor="serial", **kwargs)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threaded = lmo_search(TARGET, DELTA, Q, T, executor=pool, **kwargs)
    assert not serial.stopped_early and not threaded.stopped_early
    a, b = serial.to_dict(), threaded.to_dict()
    a.pop("elapsed"), b.pop("elapsed")
    assert a == b


def test_seed_changes_the_global_stage():
    patterns = space_module._patterns(("gamma", "uniform"))
    assert stages_module._global_points(patterns, 0) == stages_module._global_points(patterns, 0)
    assert stages_module._global_points(patterns, 0) != stages_module._global_points(patterns, 1)


# --------------------------------------------------------------------------- the space


@pytest.mark.parametrize("components, weights", [(("uniform",), (0.0, 0.0, 1.0)), (("gamma",), (1.0, 0.0, 0.0))])
def test_components_restriction_respected(small_budget, components, weights):
    found = lmo_search(TARGET, DELTA, Q, T, components=components, executor="serial", time_limit=120)
    assert found.mechanism.weights == weights
    assert found.components == components
    assert epsilon(_workload(found.mechanism), DELTA).upper <= TARGET


def test_exponential_only_for_callable_objectives(small_budget):
    with pytest.raises(ValueError, match="infinite variance"):
        lmo_search(TARGET, DELTA, Q, T, components=("exponential",), executor="serial")
    # a callable may use it: (the noise scale grows with exponential_rate under scaling)
    found = lmo_search(
        TARGET, DELTA, Q, T, objective=lambda m: m.exponential_rate, components=("exponential",), time_limit=60
    )
    assert found.mechanism.weights == (0.0, 1.0, 0.0)
    assert found.objective == "<lambda>"
    assert math.isinf(found.std) and math.isinf(found.mean_absolute)
    assert found.epsilon <= TARGET
    data = _strict_json(found.to_json())
    assert data["std"] == "inf" and data["std_ratio"] == "inf"
    assert LMOSearchResult.from_dict(data) == found


def test_every_shape_in_the_box_is_a_valid_lmo():
    rng = np.random.default_rng(0)
    for pattern in space_module._patterns(space_module.COMPONENTS):
        d = len(space_module._coordinates(pattern))
        for u in [np.zeros(d), np.ones(d), *rng.random((20, d))]:
            mechanism = space_module._decode(pattern, tuple(u), 0.5, 2.0)
            assert mechanism.sensitivity == 2.0
            assert [w > 0 for w in mechanism.weights] == [c in pattern for c in space_module.COMPONENTS]


def test_variance_pruning_and_objective_names():
    workload = dataclasses.replace(_workload_for_tests(), objective="variance")
    pruned = scale_module._calibrate_shape(("gamma", "exponential"), (0.5, 0.5, 0.5), workload)
    assert pruned.status == "pruned" and pruned.evaluations == 0


def _workload_for_tests():
    return scale_module._Workload(TARGET, DELTA, Q, T, 1.0, 0.5, "variance", 2.05, None)


def test_abs_objective(small_budget):
    found = lmo_search(TARGET, DELTA, Q, T, objective="abs", components=("uniform",), executor="serial")
    assert found.objective == "abs"
    assert found.objective_value == pytest.approx(found.mechanism.mean_absolute())


def test_unreachable_target_names_best_epsilon(small_budget, monkeypatch):
    monkeypatch.setattr(space_module, "_SCALE_LIMITS", (1e-4, 0.05))  # far too little noise allowed
    with pytest.raises(ValueError, match=r"no LMO shape .* reaches target_epsilon=1 .*best certified epsilon found: \d") as error:
        lmo_search(TARGET, DELTA, Q, T, components=("gamma",), executor="serial")
    assert type(error.value).__name__ == "CalibrationError" and error.value.epsilon > TARGET


def test_progress_callback_and_quiet_stderr(small_budget, capsys):
    events = []
    lmo_search(TARGET, DELTA, Q, T, components=("uniform",), executor="serial", progress=events.append)
    assert events and events[-1]["done"] >= events[0]["done"] > 0
    assert {e["stage"] for e in events} <= {"global", "polish"}
    lmo_search(TARGET, DELTA, Q, T, components=("uniform",), executor="serial")
    assert capsys.readouterr().err == ""  # not a terminal: no bar


def test_time_limit_stops_early(small_budget, monkeypatch):
    monkeypatch.setattr(stages_module, "_BATCH", 1)
    found = lmo_search(TARGET, DELTA, Q, T, components=("gamma", "uniform"), executor="serial", time_limit=0.01)
    assert found.stopped_early
    assert found.epsilon <= TARGET


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "change, name",
    [
        ({"target_epsilon": 0}, "target_epsilon"),
        ({"target_epsilon": float("nan")}, "target_epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"delta": 0}, "delta"),
        ({"sampling_rate": 0}, "sampling_rate"),
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"steps": 0}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"objective": "median"}, "objective"),
        ({"components": ("gamma", "cauchy")}, "components"),
        ({"components": ()}, "components"),
        ({"components": ("gamma", "gamma")}, "components"),
        ({"time_limit": 0}, "time_limit"),
        ({"time_limit": -1}, "time_limit"),
        ({"seed": -1}, "seed"),
        ({"sensitivity": 0}, "sensitivity"),
        ({"executor": "threads"}, "executor"),
        ({"executor": 3}, "executor"),
    ],
)
def test_bad_input(change, name):
    kwargs = dict(target_epsilon=TARGET, delta=DELTA, sampling_rate=Q, steps=T)
    kwargs.update(change)
    with pytest.raises(ValueError, match=name) as error:
        lmo_search(**kwargs)
    assert "\n" not in str(error.value)


# --------------------------------------------------------------------------- JSON and files


def test_json_round_trip(result, tmp_path):
    data = _strict_json(result.to_json())
    assert LMOSearchResult.from_dict(data) == result
    assert LMO.from_dict(data["mechanism"]) == result.mechanism
    path = tmp_path / "best.json"
    path.write_text(result.to_json(indent=2))
    assert cli_lmo.load_lmo_file(path) == result.mechanism
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(result.mechanism.to_dict()))
    assert cli_lmo.load_lmo_file(str(bare)) == result.mechanism


def test_from_dict_rejects_bad_results(result):
    data = result.to_dict()
    with pytest.raises(ValueError, match="missing the field 'epsilon'"):
        LMOSearchResult.from_dict({k: v for k, v in data.items() if k != "epsilon"})
    with pytest.raises(ValueError, match="unknown LMO search result field 'colour'"):
        LMOSearchResult.from_dict({**data, "colour": 1})
    with pytest.raises(ValueError, match="'std'"):
        LMOSearchResult.from_dict({**data, "std": [1]})
    with pytest.raises(ValueError, match="'mechanism'"):
        LMOSearchResult.from_dict({**data, "mechanism": {"weights": [0.5, 0.5]}})
    # a workload no search could have had (read back, then accounted by `dpforge epsilon --lmo`)
    for field, value, allowed in [("delta", 2.0, "delta must be in"), ("delta", 0.0, "delta must be in"),
                                  ("sampling_rate", 1.5, r"sampling_rate must be in \(0, 1\]"),
                                  ("steps", 0, "steps must be an integer >= 1"), ("steps", 10**30, "at most 2\\*\\*53")]:
        with pytest.raises(ValueError, match=f"'{field}'.*{allowed}"):
            LMOSearchResult.from_dict({**data, field: value})


def test_result_errors_are_typed_and_old_files_load(result):
    from dpforge.errors import InputFileError

    data = result.to_dict()
    with pytest.raises(InputFileError, match="'mechanism'"):
        LMOSearchResult.from_dict({**data, "mechanism": {**data["mechanism"], "mechanism": "gaussian"}})
    with pytest.raises(InputFileError, match="must be a JSON object"):
        LMOSearchResult.from_dict([1])
    # the first release wrote the mechanism with LMO.to_dict's fixed field list
    m = result.mechanism
    old = {**data, "mechanism": {
        "mechanism": "lmo", "weights": list(m.weights), "gamma_shape": m.gamma_shape, "gamma_scale": m.gamma_scale,
        "exponential_rate": m.exponential_rate, "uniform_low": m.uniform_low, "uniform_high": m.uniform_high,
        "sensitivity": m.sensitivity, "dimension": m.dimension, "norm": m.norm}}
    assert LMOSearchResult.from_dict(json.loads(json.dumps(old))) == result


def test_bad_input_is_a_parameter_error_and_worker_pool_is_public():
    from dpforge.errors import ParameterError

    with pytest.raises(ParameterError, match="components"):
        lmo_search(TARGET, DELTA, Q, T, components=("cauchy",))
    assert search_module._spawn_pool is search_module.worker_pool
    pool = search_module.worker_pool(1)  # no task submitted: no process started
    try:
        assert isinstance(pool, concurrent.futures.ProcessPoolExecutor)
    finally:
        pool.shutdown()


#: every field of an LMO object (an LMO file must state them all)
_FULL = {key: value for key, value in LMO().to_dict().items() if key != "mechanism"}


@pytest.mark.parametrize(
    "content, problem",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"mechanism": "gaussian"}', "'mechanism' must be 'lmo'"),
        ('{"mechanism": "lmo"}', "weights: missing"),
        ('{"weights": [1, 0, 0]}', "gamma_shape: missing"),  # an LMO file states every field
        (json.dumps({**_FULL, "weights": [0.5, 0.6, 0.0]}), "sum to 1"),
        (json.dumps({**_FULL, "gamma_shape": -1}), "gamma_shape"),
        (json.dumps({**_FULL, "weights": "100"}), "weights: must be a list"),
        (json.dumps({**_FULL, "colour": 1}), "colour: not a field of a lmo mechanism"),
        ('{"weights": [1, 0, 0], "weights": [0, 0, 1]}', "'weights' appears twice"),
        ('{"mechanism": {"weights": [1, 0, 0], "uniform_low": 2, "uniform_high": 1}}', "uniform_low"),
    ],
)
def test_load_lmo_file_malformed(tmp_path, content, problem):
    path = tmp_path / "lmo.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=problem) as error:
        cli_lmo.load_lmo_file(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_load_lmo_file_missing(tmp_path):
    with pytest.raises(ValueError, match="missing.json: cannot read LMO file"):
        cli_lmo.load_lmo_file(tmp_path / "missing.json")


# --------------------------------------------------------------------------- CLI


def test_cli_search_standalone(small_budget, tmp_path, capsys):
    out = tmp_path / "best.json"
    code = cli_lmo.main(
        ["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", str(Q), "--steps", str(T),
         "--components", "uniform", "--workers", "0", "--json", "--out", str(out)]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = _strict_json(captured.out)
    assert data["out"] == str(out) and data["epsilon_upper"] <= 1.0
    mechanism = cli_lmo.load_lmo_file(out)
    assert mechanism.to_dict() == data["search"]["mechanism"]
    code = cli_lmo.main(["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", str(Q),
                         "--steps", str(T), "--components", "uniform", "--workers", "1"])
    text = capsys.readouterr().out
    assert code == 0 and "std / gaussian std" in text and "epsilon (certified upper)" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["search", "--delta", "1e-5"], "--target-epsilon is required"),
        (["search", "--target-epsilon", "1"], "--delta is required"),
        (["search", "--target-epsilon", "-1", "--delta", "1e-5"], "--target-epsilon must be a finite number > 0, got -1"),
        (["search", "--target-epsilon", "1", "--delta", "2"], "--delta must be in (0, 1), got 2"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "2.5"], "--steps must be an integer >= 1"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0", "--steps", "1"], "--sampling-rate must be in (0, 1]"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1", "--objective", "median"], "invalid choice"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1", "--components", "gamma,cauchy"], "--components"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1", "--time-limit", "0"], "--time-limit"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1", "--seed", "x"], "--seed must be an integer"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1", "--out", "/no/such/dir/x.json"], "--out"),
        (["search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", "1", "--steps", "1", "--components", "exponential"], "infinite variance"),
    ],
)
def test_cli_search_errors(argv, message, capsys):
    code = cli_lmo.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("dpforge: error:")


def _hooked() -> bool:
    from dpforge.cli import main as cli_main

    try:
        cli_main.build_parser().parse_args(["lmo", "search"])
    except Exception:
        return False
    return hasattr(cli_main, "lmo_description")


needs_hook = pytest.mark.skipif(not _hooked(), reason="cli/main.py does not hook in dpforge.cli.lmo yet")


@needs_hook
def test_main_epsilon_with_lmo_file(result, tmp_path, capsys):
    from dpforge.cli.main import main

    path = tmp_path / "best.json"
    path.write_text(result.to_json())
    code = main(["epsilon", "--lmo", str(path), "--sampling-rate", str(Q), "--steps", str(T), "--delta", "1e-5", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = _strict_json(captured.out)
    assert data["epsilon_upper"] == pytest.approx(epsilon(_workload(result.mechanism), DELTA).upper, rel=1e-9)
    assert data["epsilon_upper"] <= TARGET
    code = main(["epsilon", "--lmo", str(path), "--noise-multiplier", "1", "--delta", "1e-5"])
    err = capsys.readouterr().err
    assert code == 2 and "--lmo cannot be combined with --noise-multiplier" in err and err.count("\n") == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code = main(["epsilon", "--lmo", str(bad), "--delta", "1e-5"])
    err = capsys.readouterr().err
    assert code == 2 and "not valid JSON" in err and err.count("\n") == 1


@needs_hook
def test_main_lmo_search(small_budget, tmp_path, capsys):
    from dpforge.cli.main import main

    out = tmp_path / "best.json"
    code = main(["lmo", "search", "--target-epsilon", "1", "--delta", "1e-5", "--sampling-rate", str(Q), "--steps",
                 str(T), "--components", "gamma", "--workers", "0", "--seed", "1", "--json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert _strict_json(captured.out)["search"]["seed"] == 1
    assert cli_lmo.load_lmo_file(out).weights == (1.0, 0.0, 0.0)
    code = main(["lmo", "search", "--target-epsilon", "0", "--delta", "1e-5"])
    err = capsys.readouterr().err
    assert code == 2 and "--target-epsilon must be a finite number > 0" in err and err.count("\n") == 1


# --------------------------------------------------------------------------- the full default search


@pytest.mark.slow
def test_default_search_on_the_issue_workload():
    found = lmo_search(1.0, 1e-5, 0.01, 1000)
    assert not found.stopped_early and found.elapsed <= 60.0
    assert epsilon(_workload(found.mechanism, 0.01, 1000), 1e-5).upper <= 1.0
    again = lmo_search(1.0, 1e-5, 0.01, 1000, executor="serial")
    assert again.mechanism == found.mechanism and again.epsilon == found.epsilon


def _raises(task):
    raise ZeroDivisionError(f"task {task}")


def test_a_failing_search_task_raises_its_own_error_from_the_runner():
    """The runner's fallback for a broken process pool named
    ``concurrent.futures.process`` without importing it, so any task's error surfaced as
    an AttributeError (``lmo search --sensitivity 1e300`` exited 1 with that traceback)."""
    import concurrent.futures

    from dpforge.design.stages import _Runner
    from dpforge.parallel import SerialExecutor

    with pytest.raises(ZeroDivisionError, match="task 1"):
        _Runner(SerialExecutor(), owned=True).map(_raises, [1, 2])
    with concurrent.futures.ThreadPoolExecutor(1) as pool, pytest.raises(ZeroDivisionError):
        _Runner(pool, owned=False).map(_raises, [3])
