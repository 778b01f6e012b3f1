"""``dpforge epsilon|delta --engine ...``: engine selection and the montecarlo flags."""

from __future__ import annotations

import importlib.util
import math

import pytest

from dpforge.cli.main import main
from dpforge.cli.schema import validate

LAPLACE = ["--noise", "laplace", "--scale", "2", "--sampling-rate", "0.016", "--steps", "200"]
GAUSSIAN = ["--noise-multiplier", "1.0", "--sampling-rate", "0.02", "--steps", "100"]
MC = ["--engine", "montecarlo", "--samples", "4000", "--seed", "7"]






def test_epsilon_montecarlo_json_has_samples_and_confidence(run_json):
    data = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", *MC, "--confidence", "0.95")
    assert data["engine"] == "montecarlo"
    assert data["samples"] == 4000 and data["confidence"] == 0.95 and data["bound"] == "high-probability"
    assert validate(data) == []
    assert data["epsilon_lower"] <= data["epsilon_estimate"] <= data["epsilon_upper"]
    assert data["seed"] == 7 and data["accuracy"]["seed"] == 7
    assert data["accuracy"]["requested"] is None  # montecarlo takes no relative-accuracy request
    assert data["mechanism"][0]["steps"] == 100
    # the same seed gives the same numbers
    again = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", *MC, "--confidence", "0.95")
    assert again["epsilon_upper"] == data["epsilon_upper"] and again["epsilon_lower"] == data["epsilon_lower"]
    prv = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5")
    assert prv["engine"] == "prv" and "samples" not in prv and "epsilon_estimate" not in prv
    assert prv["epsilon_lower"] <= data["epsilon_upper"] <= 1.05 * prv["epsilon_upper"]


def test_delta_montecarlo_json(run_json):
    data = run_json("delta", *LAPLACE, "--epsilon", "0.5", *MC)
    assert data["engine"] == "montecarlo" and data["samples"] == 4000 and data["confidence"] == 0.99
    assert validate(data) == []
    assert 0.0 <= data["delta_lower"] <= data["delta_estimate"] <= data["delta"] <= 1.0


def test_samples_accepts_scientific_notation(run_json):
    data = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "montecarlo", "--samples", "3e3", "--seed", "1")
    assert data["samples"] == 3000


def test_pure_engine(run_json, run_error):
    data = run_json("epsilon", *LAPLACE, "--delta", "1e-5", "--engine", "pure")
    assert data["engine"] == "pure"
    assert validate(data) == []
    assert data["epsilon_upper"] == pytest.approx(200 * math.log1p(0.016 * math.expm1(0.5)), rel=1e-12)
    # the certified lower bound is the exact single-step epsilon(delta) (far below the basic composition)
    assert 0 < data["epsilon_lower"] <= data["epsilon_upper"] and "samples" not in data
    delta = run_json("delta", *LAPLACE, "--epsilon", "100", "--engine", "pure")
    assert delta["delta"] == 0.0
    line = run_error("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "pure")
    assert "Gaussian" in line


def test_table_output_names_the_bound(capsys):
    code = main(["epsilon", *GAUSSIAN, "--delta", "1e-5", *MC])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "samples" in out and "confidence" in out and "high-probability" in out
    assert any(line.split() == ["seed", "7"] for line in out.splitlines())  # the seed is reported in the table too


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--engine", "montecarlo", "--samples", "0"], "--samples must be an integer >= 1, got 0"),
        (["--engine", "montecarlo", "--samples", "2.5"], "--samples must be an integer >= 1"),
        (["--engine", "montecarlo", "--samples", "many"], "--samples must be an integer >= 1, got 'many'"),
        # past 2**53 at the flag; between it and the engine's 1e10, by the engine
        (["--engine", "montecarlo", "--samples", "99999999999999999999999"], "--samples must be an integer >= 1 and at most 2**53"),
        (["--engine", "montecarlo", "--samples", "1e12"], "samples must be an integer >= 1 and at most 10000000000"),
        (["--engine", "montecarlo", "--confidence", "1.5"], r"--confidence must be in (0, 1), got 1.5"),
        (["--engine", "montecarlo", "--confidence", "0"], r"--confidence must be in (0, 1)"),
        (["--engine", "montecarlo", "--seed", "-1"], "--seed must be an integer >= 0, got -1"),
        (["--samples", "100"], "--samples applies only to --engine montecarlo"),
        (["--engine", "pure", "--seed", "1"], "--seed applies only to --engine montecarlo, not --engine pure"),
        (["--engine", "magic"], "invalid choice: 'magic'"),
    ],
)
def test_bad_engine_flags(extra, message, run_error):
    line = run_error("epsilon", *GAUSSIAN, "--delta", "1e-5", *extra)
    assert message in line


def test_delta_too_small_for_the_samples_is_a_one_line_error(run_error):
    line = run_error("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "montecarlo", "--samples", "10")
    assert "samples=10" in line and "would need" in line


@pytest.mark.skipif(importlib.util.find_spec("dpforge.accounting.rdp") is None, reason="rdp engine not available yet")
def test_rdp_engine_flag(run_json):
    data = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "rdp")
    assert data["engine"] == "rdp"
    prv = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5")
    assert validate(data) == []
    assert data["epsilon_upper"] >= prv["epsilon_lower"]
