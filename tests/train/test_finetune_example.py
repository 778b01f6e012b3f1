"""examples/finetune_transformer.py runs end to end at tiny sizes and its plans verify."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("opacus")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "finetune_transformer.py"


@pytest.mark.slow
def test_tiny_run_trains_writes_ledgers_and_verifies(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("finetune_transformer", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    options = example.parse(["--tiny", "--output", str(tmp_path)])
    report = example.run(options)
    assert report["verify_exit_codes"] == [0, 0]
    for method in ("dpsgd", "dpzo"):
        assert report[method]["epsilon_upper"] <= 3.0
        assert 0.0 <= report[method]["accuracy"] <= 1.0
        assert os.path.exists(tmp_path / method / "dpforge_plan.toml")
        assert os.path.exists(tmp_path / method / "checkpoint-2" / "dpforge_ledger.json")
    assert report["dpsgd"]["groups"] > 1  # group-wise clipping
    assert "WITHIN BUDGET" in capsys.readouterr().out
