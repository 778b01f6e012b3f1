"""The one mechanism serialisation: round trips, strict reading, files of dpforge 0.1."""

from __future__ import annotations

import json

import pytest

from dpforge.errors import DpforgeError, InputFileError
from dpforge.mechanisms import LMO, Gaussian, Laplace, PureDP, mechanism_from_dict, mechanism_to_dict

MECHANISMS = [
    Gaussian(1.3, sensitivity=0.5),
    Laplace(2.0, sensitivity=3.0),
    Laplace(0.5, dimension=7, norm="l2"),
    PureDP(0.25),
    LMO(weights=(0.5, 0.2, 0.3), gamma_shape=3.0, gamma_scale=0.5, exponential_rate=2.0, uniform_low=0.2, uniform_high=1.5),
]


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: type(m).__name__)
def test_round_trip_through_json(mechanism):
    data = json.loads(json.dumps(mechanism_to_dict(mechanism)))
    assert mechanism_from_dict(data) == mechanism


def test_lmo_file_written_by_dpforge_0_1_still_loads():
    # the exact layout LMO.to_dict wrote in 0.1 (weights as a list, every field present)
    old = {
        "mechanism": "lmo", "weights": [1.0, 0.0, 0.0], "gamma_shape": 3.0, "gamma_scale": 1.0,
        "exponential_rate": 1.0, "uniform_low": 0.5, "uniform_high": 1.0, "sensitivity": 1.0,
        "dimension": 1, "norm": "l2",
    }
    assert mechanism_from_dict(old) == LMO(weights=(1.0, 0.0, 0.0), gamma_shape=3.0)
    assert LMO.from_dict({k: v for k, v in old.items() if k != "mechanism"}) == mechanism_from_dict(old)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"mechanism": "cauchy", "scale": 1.0}, 'mechanism: must be one of gaussian, laplace, pure, lmo, got "cauchy"'),
        ({"noise_multiplier": 1.0}, "mechanism: missing"),
        ({"mechanism": "gaussian"}, "noise_multiplier: missing"),
        ({"mechanism": "gaussian", "noise_multiplier": "1.0"}, 'noise_multiplier: must be a finite number, got "1.0"'),
        ({"mechanism": "gaussian", "noise_multiplier": True}, "noise_multiplier: must be a finite number, got True"),
        ({"mechanism": "gaussian", "noise_multiplier": 1.0, "colour": 1}, "colour: not a field of a gaussian mechanism"),
        ({"mechanism": "laplace", "scale": 1.0, "dimension": 2.5}, "dimension: must be an integer, got 2.5"),
        ({"mechanism": "laplace", "scale": 1.0, "norm": 2}, "norm: must be a string, got 2"),
        ({"mechanism": "lmo", "weights": "100"}, 'weights: must be a list of finite numbers, got "100"'),
        ({"mechanism": "lmo", "gamma_shape": 2.0}, "weights: missing"),
        ({"mechanism": "gaussian", "noise_multiplier": -1.0}, "noise_multiplier must be a finite number > 0"),
        ([1, 2], "a mechanism must be an object"),
    ],
)
def test_strict_reading_names_the_field(data, message):
    with pytest.raises(InputFileError) as caught:
        mechanism_from_dict(data)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value) and isinstance(caught.value, DpforgeError)


def test_plan_phase_spelling_of_the_kind():
    assert mechanism_from_dict({"noise": "pure", "epsilon": 0.5}, kind_key="noise") == PureDP(0.5)
