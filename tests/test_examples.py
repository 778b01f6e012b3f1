"""The torch examples say which extra they need: without torch, one line and exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["dpzero_toy.py", "dpsgd_groupwise.py"])
def test_example_without_torch_gives_a_one_line_hint(name):
    # sys.modules["torch"] = None makes ``import torch`` fail as on a base install
    code = f"import sys, runpy; sys.modules['torch'] = None; runpy.run_path({str(EXAMPLES / name)!r}, run_name='__main__')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"{name} needs the torch extra (PyTorch): pip install -e '.[torch]'"]
    assert "pip install -e '.[torch]'" in (EXAMPLES / name).read_text().split('"""')[1]  # the docstring says so too
