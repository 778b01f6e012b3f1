"""``dpforge epsilon|delta --engine ...``: engine selection and the montecarlo flags."""

from __future__ import annotations

import importlib.util
import math

import pytest

from dpforge.cli.main import main

LAPLACE = ["--noise", "laplace", "--scale", "2", "--sampling-rate", "0.016", "--steps", "200"]
GAUSSIAN = ["--noise-multiplier", "1.0", "--sampling-rate", "0.02", "--steps", "100"]
MC = ["--engine", "montecarlo", "--samples", "4000", "--seed", "7"]






def test_epsilon_montecarlo_json_has_samples_and_confidence(run_json):
    data = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", *MC, "--confidence", "0.95")
    assert data["engine"] == "montecarlo"
    assert data["samples"] == 4000 and data["confidence"] == 0.95 and data["bound"] == "high-probability"
    assert data["lower"] <= data["estimate"] <= data["upper"] == data["epsilon"]
    assert data["accuracy"]["seed"] == 7
    assert data["description"]["steps"] == 100
    # the same seed gives the same numbers
    again = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", *MC, "--confidence", "0.95")
    assert again["upper"] == data["upper"] and again["lower"] == data["lower"]
    prv = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5")
    assert prv["engine"] == "prv" and "samples" not in prv
    assert prv["lower"] <= data["upper"] <= 1.05 * prv["upper"]


def test_delta_montecarlo_json(run_json):
    data = run_json("delta", *LAPLACE, "--epsilon", "0.5", *MC)
    assert data["engine"] == "montecarlo" and data["samples"] == 4000 and data["confidence"] == 0.99
    assert 0.0 <= data["lower"] <= data["upper"] == data["delta"] <= 1.0


def test_samples_accepts_scientific_notation(run_json):
    data = run_json("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "montecarlo", "--samples", "3e3", "--seed", "1")
    assert data["samples"] == 3000


def test_pure_engine(run_json, run_error):
    data = run_json("epsilon", *LAPLACE, "--delta", "1e-5", "--engine", "pure")
    assert data["engine"] == "pure"
    assert data["upper"] == pytest.approx(200 * math.log1p(0.016 * math.expm1(0.5)), rel=1e-12)
    assert "samples" not in data
    delta = run_json("delta", *LAPLACE, "--epsilon", "100", "--engine", "pure")
    assert delta["upper"] == 0.0
    line = run_error("epsilon", *GAUSSIAN, "--delta", "1e-5", "--engine", "pure")
    assert "Gaussian" in line


def test_table_output_names_the_bound(capsys):
    code = main(["epsilon", *GAUSSIAN, "--delta", "1e-5", *MC])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "samples" in out and "confidence" in out and "high-probability" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--engine", "montecarlo", "--samples", "0"], "--samples must be an integer >= 1, got 0"),
        (["--engine", "montecarlo", "--samples", "2.5"], "--samples must be an integer >= 1"),
        (["--engine", "montecarlo", "--samples", "many"], "--samples must be an integer >= 1, got 'many'"),
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
    assert data["upper"] >= prv["lower"]
