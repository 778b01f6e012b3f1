"""The engine registry and the one calibrator over any deterministic certified engine."""

from __future__ import annotations

import math

import pytest

from dpforge.accounting import calibrate, calibrate_laplace_scale, calibrate_noise_multiplier, engine_names, epsilon
from dpforge.accounting.api import get_engine, register_engine
from dpforge.accounting.calibrate import find_parameter
from dpforge.errors import CalibrationError, ParameterError, UnsupportedError
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled


def test_builtin_engines_are_registered_default_first():
    assert engine_names()[0] == "prv"
    assert set(engine_names()) >= {"prv", "rdp", "montecarlo", "pure"}
    with pytest.raises(ParameterError, match="engine must be one of prv"):
        get_engine("pld")


def test_a_registered_engine_is_dispatched_to():
    class Doubling:
        """A toy engine: twice the RDP engine's bound (still an upper bound)."""

        def epsilon(self, description, delta, **options):
            import dataclasses

            result = get_engine("rdp").epsilon(description, delta, **options)
            return dataclasses.replace(result, upper=2 * result.upper, engine="doubling")

        def delta(self, description, epsilon, **options):
            raise NotImplementedError

    register_engine("doubling", Doubling())
    try:
        description = Composed([(Gaussian(2.0), 3)])
        assert epsilon(description, 1e-5, engine="doubling").upper == pytest.approx(2 * epsilon(description, 1e-5, engine="rdp").upper)
        assert "doubling" in engine_names()
    finally:
        from dpforge.accounting import api

        api._REGISTRY.pop("doubling")
    with pytest.raises(ParameterError):
        register_engine("not an identifier", Doubling())


def test_find_parameter_on_a_closed_form():
    """epsilon(p) = 10 / p: the root is 10 / target; the answer meets the target within tolerance."""
    evaluate = lambda p: 10.0 / p  # noqa: E731
    root = find_parameter(evaluate, 2.0, low_limit=1e-3, high_limit=1e4, rel_tolerance=1e-3, start=1.0)
    assert 2.0 * (1 - 1e-3) <= root.epsilon <= 2.0
    assert root.parameter == pytest.approx(5.0, rel=1e-3)
    with pytest.raises(CalibrationError, match="not reachable") as caught:
        find_parameter(evaluate, 1e-9, low_limit=1e-3, high_limit=1e4, rel_tolerance=1e-3, start=1.0)
    assert caught.value.parameter == 1e4 and caught.value.epsilon == pytest.approx(1e-3)
    low = find_parameter(evaluate, 1e9, low_limit=1e-3, high_limit=1e4, rel_tolerance=1e-3, start=1.0, accept_lower_limit=True)
    assert low.parameter == pytest.approx(1e-3)


@pytest.mark.parametrize("engine", ["rdp", "pure"])
def test_calibrate_on_other_engines_meets_their_certified_bound(engine):
    if engine == "rdp":
        result = calibrate_noise_multiplier(0.01, 500, 2.0, 1e-5, engine="rdp")
        check = epsilon(Composed([(Gaussian(result.parameter), 1)]), 1e-5)  # noqa: F841 - touches the default engine
    else:
        result = calibrate_laplace_scale(0.02, 100, 2.0, 1e-5, engine="pure")
    assert result.engine == engine
    assert 2.0 * (1 - 1e-3) <= result.epsilon <= 2.0
    assert 0.0 <= result.lower <= result.epsilon  # the engine's own certified lower bound, never NaN
    assert math.isfinite(result.parameter)


def test_rdp_calibration_needs_more_noise_than_prv():
    prv = calibrate_noise_multiplier(0.01, 500, 2.0, 1e-5)
    rdp = calibrate_noise_multiplier(0.01, 500, 2.0, 1e-5, engine="rdp")
    assert rdp.parameter > prv.parameter


def test_calibration_refuses_a_high_probability_engine():
    with pytest.raises(UnsupportedError, match="holds only with a probability"):
        calibrate(lambda s: Composed([(Gaussian(s), 10)]), 1.0, 1e-5, engine="montecarlo")


def test_numeric_arguments_after_the_question_are_keyword_only():
    with pytest.raises(TypeError):
        calibrate_noise_multiplier(0.01, 100, 1.0, 1e-5, 1e-3)  # rel_tolerance must be named
    with pytest.raises(TypeError):
        calibrate_laplace_scale(0.01, 100, 1.0, 1e-5, 2.0)  # sensitivity must be named


_RATE = PoissonSampled(Gaussian(1.0), 0.01)


@pytest.mark.parametrize(
    "call, message",
    [
        # a subnormal delta: a tenth of it (the truncation tail) underflowed to 0 and the
        # prv engine divided by zero
        (lambda: epsilon(Composed([(_RATE, 10)]), 5e-324), r"delta must be in \[2.2250738585072014e-308, 1\)"),
        # integers beyond the double range overflowed float()
        (lambda: epsilon(Composed([(_RATE, 10)]), 10**400), r"delta must be a finite number, got 1000.*\(401 characters\)"),
        (lambda: Gaussian(10**400), "noise_multiplier must be a finite number"),
        (lambda: Composed([(_RATE, 10**400)]), r"count must be an integer >= 1 and at most 2\*\*53"),
        # nested rates multiplying to 0, nested counts past 2**53
        (lambda: epsilon(Composed([(PoissonSampled(PoissonSampled(Gaussian(1.0), 1e-200), 1e-200), 10)]), 1e-5), "multiply to 0.0"),
        (lambda: epsilon(Composed([(Composed([(_RATE, 2**40)]), 2**40)]), 1e-5), r"multiply to 1.21e\+24 steps, more than 2\*\*53"),
        # a grid step whose top point overflowed e^x in the error cover (math domain error)
        (lambda: epsilon(Composed([(_RATE, 10)]), 1e-5, step=1e3), r"step must be a finite number in \(0, 64\]"),
    ],
)
def test_extreme_inputs_are_refused_with_one_named_line(call, message):
    with pytest.raises(ParameterError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_the_coarsest_step_allowed_answers_with_a_flagged_certified_bracket():
    result = epsilon(Composed([(_RATE, 10)]), 1e-5, step=64.0)
    assert not result.accuracy["reached"] and 0.0 <= result.lower <= result.upper
