"""The recorded benchmark results are strict JSON: other tools (jq, JavaScript, a JSON
schema) reject the NaN and Infinity that Python's json module writes by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RESULTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("*.json"))


def _reject(constant: str):
    raise ValueError(f"{constant} is not JSON")


def test_there_are_results():
    assert RESULTS


@pytest.mark.parametrize("path", RESULTS, ids=[path.name for path in RESULTS])
def test_results_are_strict_json(path):
    json.loads(path.read_text(), parse_constant=_reject)
